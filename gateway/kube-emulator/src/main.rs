//! `forge-kubesim` binary: starts the emulator, prints its kubeconfig and writes it to
//! a file, then serves until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use forge_kubesim::{NodeSpec, RunMode, Sim, SimConfig, TimedModel};

/// Kubernetes + KubeRay emulator.
#[derive(Debug, Parser)]
#[command(name = "forge-kubesim", version)]
struct Args {
    /// Listen address (port 0 = ephemeral).
    #[arg(long, env = "KUBESIM_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Node layout: `series=COUNTxGPUS[@key[=value]:Effect...],...` (e.g.
    /// `h100=4x8,a100=2x8`; `h100=2x8@nvidia.com/gpu=present:NoSchedule` taints;
    /// `cpu=2x0` has no GPU resource).
    #[arg(long, env = "KUBESIM_NODES", default_value = "h100=4x8,a100=2x8")]
    nodes: String,
    /// Node label key holding the GPU series.
    #[arg(
        long,
        env = "FORGE_K8S_GPU_NODE_LABEL",
        default_value = "starforge/gpu-series"
    )]
    gpu_node_label: String,
    /// Namespaces to create (comma separated; the first is the kubeconfig default).
    #[arg(long, env = "FORGE_K8S_NAMESPACE", default_value = "starforge")]
    namespaces: String,
    /// Kubelet run mode: `process` (really run entrypoints) or `timed` (model only).
    #[arg(long, env = "KUBESIM_MODE", default_value = "process")]
    mode: String,
    /// Where to write the kubeconfig.
    #[arg(long, env = "KUBESIM_KUBECONFIG", default_value = "kubesim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Serve the API only, without the simulated operator, scheduler and kubelet.
    #[arg(long)]
    no_controllers: bool,
    /// Require this bearer token on every request (401 Unauthorized otherwise); the
    /// kubeconfig carries it. Without it any request is accepted.
    #[arg(long, env = "KUBESIM_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Containers of this image run the OpenAI-compatible inference stand-in (process
    /// mode) instead of vLLM, e.g. the value of the gateway's `FORGE_IMAGE_VLLM`.
    #[arg(long, env = "KUBESIM_INFERENCE_IMAGE")]
    inference_image: Option<String>,
    /// Where the simulated kubelet keeps pods' volumes and jobs' working directories.
    /// Created if missing and then removed at exit; an existing directory is used and
    /// left in place. Default: a fresh directory under the system's temporary one.
    #[arg(long, env = "KUBESIM_SCRATCH_ROOT")]
    scratch_root: Option<PathBuf>,
    /// A virtualenv with `ray[default]` (`bash deploy/install-ray.sh` makes
    /// `target/ray`): process mode runs Ray nodes and submitters on it. Without it Ray
    /// is simulated.
    #[arg(long, env = "KUBESIM_RAY_VENV")]
    ray_venv: Option<PathBuf>,
}

/// Runs the emulator; a failure is one `error: …` report on stderr (never a backtrace,
/// whatever `RUST_BACKTRACE` says) and exit code 1.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    let mut cfg = SimConfig {
        listen: args.listen,
        gpu_node_label: args.gpu_node_label,
        run_controllers: !args.no_controllers,
        token: args.token.filter(|t| !t.is_empty()),
        ..SimConfig::default()
    };
    cfg.nodes = NodeSpec::parse_layout(&args.nodes)?;
    cfg.namespaces = args
        .namespaces
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    cfg.controllers.mode = match args.mode.as_str() {
        "process" => RunMode::Process,
        "timed" => RunMode::Timed(TimedModel::default()),
        other => anyhow::bail!("unknown --mode {other:?} (process|timed)"),
    };
    cfg.controllers.inference_image = args.inference_image.filter(|i| !i.is_empty());
    if let Some(root) = args.scratch_root {
        cfg.controllers.scratch_root = root;
    }
    if let Some(venv) = args.ray_venv.filter(|v| !v.as_os_str().is_empty()) {
        let ray = forge_kubesim::controllers::ray::install::RayInstall::from_venv(&venv)?;
        cfg.controllers.image_path = vec![ray.bin.clone()];
        cfg.controllers.ray = Some(ray);
    }
    let sim = Sim::start(cfg).await?;
    sim.write_kubeconfig(&args.kubeconfig)
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;
    println!("{}", sim.kubeconfig_yaml());
    eprintln!(
        "forge-kubesim serving {} (kubeconfig written to {})",
        sim.url(),
        args.kubeconfig.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        got = tokio::signal::ctrl_c() => got.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    sim.shutdown().await;
    Ok(())
}
