//! `forge-gateway dev`: the embedded default — the gateway against an in-process
//! Kubernetes + KubeRay emulator (process mode, GPU nodes in two series), the reference
//! policy chain and a fresh admin token. No cluster, no S3.
//!
//! This is a composition root (an edge), so it reports errors with `anyhow`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use forge_kubesim::{NodeSpec, Sim, SimConfig};

use crate::app::{ActivePolicy, AppState};
use crate::auth::{Role, TokenEntry, Tokens, hash_token};
use crate::capacity::Capacity;
use crate::config::{self, Config};
use crate::policy::chain_file::{self, LinkSpec};
use crate::policy::{EngineLimits, PolicyEngine, PolicyRunner};

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
}

/// A running dev environment.
pub struct DevGateway {
    pub state: AppState,
    pub sim: Sim,
    /// The admin token printed for the user (also valid for `team-a`).
    pub token: String,
    pub kubeconfig: PathBuf,
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
        link("team-quota", serde_json::json!({"default": {"*": 16}})),
        link("rwo-guard", serde_json::json!({})),
    ]
}

/// Start the emulator and build the gateway state.
pub async fn start(opts: &DevOptions) -> anyhow::Result<DevGateway> {
    let mut env = config::dev_defaults();
    env.entry("FORGE_DATA_DIR".into())
        .or_insert_with(|| "forge-data".into());
    // The emulator runs entrypoints as local processes; the image only has to exist
    // in config so that `nemo-rl` jobs validate as they would in production.
    env.entry("FORGE_IMAGE_NEMO_RL".into())
        .or_insert_with(|| "rayproject/ray:2.55.1".into());
    env.extend(opts.env.clone());
    let cfg = Config::from_env_map(env).map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::create_dir_all(&cfg.gateway.data_dir)
        .with_context(|| format!("creating {}", cfg.gateway.data_dir.display()))?;

    let nodes = NodeSpec::parse_layout(&opts.nodes).context("--nodes")?;
    let sim = Sim::start(SimConfig {
        namespaces: vec![cfg.k8s.namespace.clone()],
        nodes,
        gpu_node_label: cfg.k8s.gpu_node_label.clone(),
        ..SimConfig::default()
    })
    .await
    .context("starting the embedded Kubernetes emulator")?;
    let kubeconfig = cfg.gateway.data_dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig)
        .context("writing the kubeconfig")?;

    let token = hex::encode(rand::random::<[u8; 32]>());
    let tokens = Tokens::from_entries(vec![TokenEntry {
        token_sha256: hash_token(&token),
        team: "team-a".into(),
        role: Role::Admin,
        name: Some("dev".into()),
    }])?;

    let engine = PolicyEngine::new(
        EngineLimits {
            deadline: Duration::from_millis(cfg.gateway.policy_deadline_ms),
            memory_cap_bytes: usize::try_from(cfg.gateway.policy_memory_mib << 20)
                .unwrap_or(usize::MAX),
            ..EngineLimits::default()
        },
        Some(cfg.gateway.data_dir.join("plugin-cache")),
    )?;
    let chain =
        chain_file::build(&engine, &reference_links(&opts.plugins_dir)).with_context(|| {
            format!(
                "loading the reference policies from {} (build them with `bash deploy/dev.sh`)",
                opts.plugins_dir.display()
            )
        })?;

    let client = sim.client().context("emulator client")?;
    let capacity =
        Capacity::start(client, &cfg.k8s.gpu_node_label, Duration::from_secs(10)).await?;
    let state = AppState {
        runner: PolicyRunner::new(cfg.gateway.policy_concurrency),
        config: Arc::new(cfg),
        tokens: Arc::new(tokens),
        capacity,
        policy: Arc::new(ArcSwap::from_pointee(ActivePolicy {
            version: 1,
            chain: Arc::new(chain),
        })),
    };
    Ok(DevGateway {
        state,
        sim,
        token,
        kubeconfig,
    })
}
