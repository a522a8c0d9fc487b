//! `forge-gateway dev`: the embedded default — the gateway against an in-process
//! Kubernetes + KubeRay emulator (process mode, GPU nodes in two series), the local
//! capsule store (signed URLs served by the gateway itself), the reference policy
//! chain and a fresh admin token. No cluster, no S3 — unless `FORGE_S3_*` is set, in
//! which case capsules and logs use that object storage exactly as `serve` does.
//!
//! Dev mode is a sandbox for one developer, not a shared service: it runs every job's
//! code as local processes of the user who started it and prints an admin token. So it
//! listens on loopback only unless `--allow-remote` is given ([`check_listen`]).
//!
//! With `FORGE_K8S_GPU_PASSTHROUGH=0` the emulated cluster is a GPU-less one, like a
//! kind cluster in CI: its nodes have no `nvidia.com/gpu`, only their GPU count in the
//! `FORGE_K8S_GPU_COUNT_LABEL` label, which capacity, policies and the gang fit read.
//!
//! This is a composition root (an edge), so it reports errors with `anyhow`. It is
//! compiled with the `dev` feature only: the production binary links no emulator.
//! `command.rs` is the `forge-gateway dev` command around [`start`]; `sample.rs` the
//! sample job it offers.

pub mod command;
pub mod sample;

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::Context;
use forge_kubesim::controllers::ray::install::RayInstall;
use forge_kubesim::controllers::{ControllerConfig, RunMode, RunSecs, TimedModel};
use forge_kubesim::{NodeSpec, Sim, SimConfig};
use url::Url;

use forge_policy_host::chain_file::LinkSpec;

use crate::auth::{Role, TokenEntry, hash_token};
use crate::compose::{self, CapsuleBackend};
use crate::config::{self, Config};
use crate::live_tokens::{LiveTokens, TokenSource};
use crate::policy::{boot_links, boot_links_from_file};
use crate::state::AppState;

/// Options of the dev mode.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// Node layout, e.g. `h200=2x8,h100=2x8` (series=NODESxGPUS).
    pub nodes: String,
    /// Directory with the reference policy components (built by `forge-plugin build`).
    pub plugins_dir: PathBuf,
    /// `FORGE_*` settings layered over the dev defaults (the binary passes its
    /// environment; tests pass a temporary data directory).
    pub env: HashMap<String, String>,
    /// How the embedded cluster runs jobs.
    pub sim: SimMode,
    /// A chain file to run instead of the reference chain.
    pub policy_chain: Option<PathBuf>,
    /// Images whose pulls fail in the embedded cluster (ErrImagePull, then
    /// ImagePullBackOff), to see how Forge reports it.
    pub failing_images: Vec<String>,
    /// Play a KubeRay operator that ignores `preRunningDeadlineSeconds` (older than
    /// the field), to see the gateway enforce the pre-running deadline itself.
    pub old_operator: bool,
    /// The virtualenv with `ray[default]` whose Ray the embedded cluster's Ray nodes,
    /// submitters and drivers run (`deploy/install-ray.sh` makes one in the clone).
    /// `None`: Ray is simulated and the entrypoint runs as a plain local process
    /// (`import ray` fails). Process mode only.
    pub ray_venv: Option<PathBuf>,
    /// How many fleets (emulated clusters, each with the node layout) the gateway
    /// drives: 1, or more as `fleet-1`, `fleet-2`, ….
    pub fleets: usize,
}

/// How the embedded cluster runs jobs.
#[derive(Debug, Clone, Copy, PartialEq, Default, clap::ValueEnum)]
pub enum SimMode {
    /// Really run entrypoints as local processes (fetching and verifying the capsule).
    #[default]
    Process,
    /// Simulated run times (no processes), for scale and load tests.
    Timed,
    /// A bare API server: RayJobs are stored, nothing runs (gateway load benchmarks).
    ApiOnly,
}

/// A running dev environment.
pub struct DevGateway {
    pub state: AppState,
    /// The first fleet's emulated cluster.
    pub sim: Sim,
    /// The other fleets' (`--fleets N`), in order.
    pub other_fleets: Vec<Sim>,
    /// The admin token printed for the user (also valid for `team-a`).
    pub token: String,
    pub kubeconfig: PathBuf,
}

/// Refuses a listen address that is not loopback unless `allow_remote`: dev mode runs
/// job code as the developer's own processes and hands out an admin token, so reaching
/// it from another machine means running anyone's code as this user.
pub fn check_listen(addr: std::net::SocketAddr, allow_remote: bool) -> anyhow::Result<()> {
    if addr.ip().is_loopback() || allow_remote {
        return Ok(());
    }
    anyhow::bail!(
        "refusing FORGE_LISTEN={addr}: `dev` runs every job's code as local processes of \
         your user and prints an admin token, so it listens on loopback only (e.g. \
         127.0.0.1:8080). Pass --allow-remote to listen on {addr} anyway, or run \
         `forge-gateway serve` against a cluster to share Forge"
    )
}

/// The reference chain the dev mode runs, in order.
pub fn reference_links(plugins_dir: &std::path::Path) -> Vec<LinkSpec> {
    let link = |name: &str, settings: serde_json::Value| LinkSpec {
        name: name.to_string(),
        component: plugins_dir.join(format!("forge-policy-{name}.wasm")),
        settings: Some(settings),
    };
    vec![
        link(
            "pool-series",
            serde_json::json!({"default_series": "h100", "allowed": ["h100", "h200"]}),
        ),
        link(
            "team-quota",
            serde_json::json!({"default": {"*": 16}, "max_priority": {"*": 100}}),
        ),
        link("rwo-guard", serde_json::json!({})),
    ]
}

/// Start the emulator and build the gateway state. `public_url` is where the gateway
/// will listen (pods fetch capsules from its local store there).
pub async fn start(opts: &DevOptions, public_url: &Url) -> anyhow::Result<DevGateway> {
    let mut env = config::dev_defaults();
    env.entry("FORGE_DATA_DIR".into())
        .or_insert_with(|| "forge-data".into());
    // The emulator runs entrypoints as local processes; the image only has to exist
    // in config so that `nemo-rl` jobs validate as they would in production.
    env.entry("FORGE_IMAGE_NEMO_RL".into())
        .or_insert_with(|| "rayproject/ray:2.55.1".into());
    env.extend(opts.env.clone());
    let mut cfg = Config::from_env_map(env).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::create_dir_all(&cfg.gateway.data_dir)
        .with_context(|| format!("creating {}", cfg.gateway.data_dir.display()))?;

    let nodes = NodeSpec::parse_layout(&opts.nodes).context("--nodes")?;
    let (sim, others) = start_fleets(opts, &mut cfg, &nodes).await?;
    let kubeconfig = cfg.gateway.data_dir.join("kubeconfig");

    // A fresh admin token each start, plus the tokens file's entries if one is set
    // (the file is reloaded when it changes; the fresh token stays).
    let token = hex::encode(rand::random::<[u8; 32]>());
    let tokens = LiveTokens::load(TokenSource {
        file: cfg.gateway.tokens_file.clone(),
        extra: vec![TokenEntry {
            token_sha256: hash_token(&token),
            team: "team-a".into(),
            role: Role::Admin,
            name: Some("dev".into()),
        }],
    })?;

    let boot = match &opts.policy_chain {
        Some(file) => boot_links_from_file(file)
            .with_context(|| format!("loading the policy chain {}", file.display()))?,
        None => boot_links(&reference_links(&opts.plugins_dir)).with_context(|| {
            format!(
                "loading the reference policies from {} (build them with `bash deploy/dev.sh`)",
                opts.plugins_dir.display()
            )
        })?,
    };
    let clients = std::iter::once(&sim)
        .chain(&others)
        .map(|sim| {
            let mut config = sim.config().context("emulator client")?;
            crate::cluster::connect::identify(&mut config);
            kube::Client::try_from(config).context("emulator client")
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // With FORGE_S3_* set, capsules and logs go to that object storage and pods fetch
    // capsules by presigned URL, as with `serve`; otherwise the gateway's local store.
    let capsules = match compose::s3_backend(&cfg).await? {
        Some(s3) => s3,
        None => CapsuleBackend::Local {
            base_url: public_url.clone(),
        },
    };
    let state =
        compose::build_state(cfg, std::sync::Arc::new(tokens), clients, boot, capsules).await?;
    Ok(DevGateway {
        state,
        sim,
        other_fleets: others,
        token,
        kubeconfig,
    })
}

/// The fleets' emulated clusters, each with the node layout `nodes`: the first fleet's,
/// then the others' (`--fleets N`). Each writes its kubeconfig in the data directory
/// (`kubeconfig`, then `kubeconfig-fleet-2`, …); with more than one, `cfg` gets them as
/// its fleets (`fleet-1`, `fleet-2`, …), as `FORGE_FLEETS_FILE` would list them.
async fn start_fleets(
    opts: &DevOptions,
    cfg: &mut Config,
    nodes: &[NodeSpec],
) -> anyhow::Result<(Sim, Vec<Sim>)> {
    let count = opts.fleets.max(1);
    let mut sims = Vec::with_capacity(count);
    let mut fleets = Vec::with_capacity(count);
    for i in 1..=count {
        let sim = start_sim(opts, cfg, nodes).await?;
        let file = if i == 1 {
            cfg.gateway.data_dir.join("kubeconfig")
        } else {
            cfg.gateway.data_dir.join(format!("kubeconfig-fleet-{i}"))
        };
        sim.write_kubeconfig(&file)
            .with_context(|| format!("writing {}", file.display()))?;
        fleets.push(config::FleetConfig {
            name: format!("fleet-{i}"),
            connection: config::FleetConnection::Kubeconfig {
                path: file,
                context: None,
            },
            namespace: None,
            labels: std::collections::BTreeMap::from([("dev".to_string(), i.to_string())]),
        });
        sims.push(sim);
    }
    if count > 1 {
        cfg.fleets = Some(fleets);
    }
    let first = sims.remove(0);
    Ok((first, sims))
}

/// One emulated cluster with the node layout `nodes`, running jobs as `opts.sim` says.
async fn start_sim(opts: &DevOptions, cfg: &Config, nodes: &[NodeSpec]) -> anyhow::Result<Sim> {
    let mut controllers = ControllerConfig {
        failing_images: opts.failing_images.iter().cloned().collect(),
        pre_running_deadline: !opts.old_operator,
        // Playground pods (`FORGE_IMAGE_VLLM`, set by the dev defaults) run the
        // emulator's OpenAI-compatible stand-in instead of vLLM.
        inference_image: cfg.image_for("vllm").map(str::to_owned),
        ..ControllerConfig::default()
    };
    if let Some(venv) = &opts.ray_venv {
        let ray = RayInstall::from_venv(venv).context("--ray-venv")?;
        controllers.ray = Some(ray);
    }
    if opts.sim == SimMode::Timed {
        controllers.mode = RunMode::Timed(TimedModel {
            run_secs: RunSecs::Fixed(30.0),
            ..TimedModel::default()
        });
    }
    let sim = Sim::start(SimConfig {
        namespaces: vec![cfg.k8s.namespace.clone()],
        nodes: nodes.to_vec(),
        gpu_node_label: cfg.k8s.gpu_node_label.clone(),
        controllers,
        run_controllers: opts.sim != SimMode::ApiOnly,
        // The embedded API server serves only the kubeconfig's (fresh) token: job
        // processes and other local users cannot drive the cluster.
        token: Some(hex::encode(rand::random::<[u8; 32]>())),
        ..SimConfig::default()
    })
    .await
    .context("starting the embedded Kubernetes emulator")?;
    if !cfg.k8s.gpu_passthrough {
        let client = sim.client().context("emulator client")?;
        strip_gpus(&client, nodes, &cfg.pods.gpu_count_label)
            .await
            .context("making the emulated nodes GPU-less (FORGE_K8S_GPU_PASSTHROUGH=0)")?;
    }
    Ok(sim)
}

/// A GPU-less cluster: the GPU nodes lose `nvidia.com/gpu` and carry their GPU count
/// in `count_label` instead.
async fn strip_gpus(
    client: &kube::Client,
    nodes: &[NodeSpec],
    count_label: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{Api, Patch, PatchParams};
    let api: Api<Node> = Api::all(client.clone());
    let params = PatchParams::default();
    for node in nodes.iter().filter(|n| n.series.is_some()) {
        let label =
            serde_json::json!({"metadata": {"labels": {count_label: node.gpus.to_string()}}});
        api.patch(&node.name, &params, &Patch::Merge(label)).await?;
        let no_gpus = serde_json::json!({"status": {
            "capacity": {crate::cluster::labels::GPU_RESOURCE: null},
            "allocatable": {crate::cluster::labels::GPU_RESOURCE: null},
        }});
        api.patch_status(&node.name, &params, &Patch::Merge(no_gpus))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_without_allow_remote() {
        for ok in ["127.0.0.1:8080", "[::1]:8080", "127.0.0.2:0"] {
            assert!(
                check_listen(ok.parse().expect("addr"), false).is_ok(),
                "{ok}"
            );
        }
        for remote in ["0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080"] {
            let addr = remote.parse().expect("addr");
            let err = check_listen(addr, false).expect_err(remote).to_string();
            assert!(
                err.contains("--allow-remote") && err.contains("loopback"),
                "{err}"
            );
            assert!(check_listen(addr, true).is_ok());
        }
    }
}
