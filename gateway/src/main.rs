//! `forge-gateway`: config → build → run.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use forge_gateway::auth::hash_token;
use forge_gateway::compose::{self, CapsuleBackend, spawn_controllers};
use forge_gateway::config::{self, Config};
use forge_gateway::live_tokens::{LiveTokens, TokenSource};
use forge_gateway::policy::boot_links_from_file;
use forge_gateway::router;
use forge_gateway::shutdown::Shutdown;

/// mimalloc instead of glibc's malloc. Packing a capsule deflates each small file with a
/// new zlib-rs stream whose 64-byte-aligned buffers glibc's `memalign` does not reuse:
/// a capsule of 2 000 small files grew the heap by ~600 MiB (`cargo bench -p forge-capsule
/// --bench pack`, its peak-RSS part); mimalloc keeps it at ~25 MiB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "forge-gateway",
    version,
    about = "Forge scheduling gateway for GPU training jobs"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve against a real cluster (FORGE_K8S_API_SERVER + FORGE_K8S_TOKEN, else
    /// in-cluster, else kubeconfig; FORGE_* settings).
    Serve {
        /// Policy chain file (YAML/JSON); wins over FORGE_POLICY_CHAIN_FILE (environment
        /// or FORGE_CONFIG_FILE).
        #[arg(long)]
        policy_chain: Option<PathBuf>,
    },
    /// The embedded default: an in-process Kubernetes + KubeRay emulator, no S3.
    Dev {
        /// Node layout: series=NODESxGPUS, comma separated.
        #[arg(long, default_value = "h100=2x8,h200=2x8")]
        nodes: String,
        /// Directory with the built reference policy components.
        #[arg(long, default_value = "target/plugins/components")]
        plugins_dir: PathBuf,
        /// How the embedded cluster runs jobs.
        #[arg(long, value_enum, default_value = "process")]
        sim: forge_gateway::dev::SimMode,
        /// Run this chain file instead of the reference chain.
        #[arg(long)]
        policy_chain: Option<PathBuf>,
        /// An image whose pulls fail in the embedded cluster (repeatable).
        #[arg(long = "failing-image")]
        failing_images: Vec<String>,
        /// Listen on a non-loopback FORGE_LISTEN (dev mode runs job code as your own
        /// processes and prints an admin token: only for a machine you alone use).
        #[arg(long)]
        allow_remote: bool,
        /// Play a KubeRay operator that predates `preRunningDeadlineSeconds` (ignores it):
        /// the gateway's own pre-running deadline still times jobs out.
        #[arg(long)]
        old_operator: bool,
        /// The virtualenv with `ray[default]` the embedded cluster's Ray nodes run
        /// (`bash deploy/install-ray.sh` makes target/ray); without it Ray is simulated.
        #[arg(long, env = "FORGE_DEV_RAY_VENV")]
        ray_venv: Option<PathBuf>,
    },
    /// Print the SHA-256 to put in the tokens file for a token.
    HashToken { token: String },
    /// Print the Markdown table of every FORGE_* setting (or rewrite README's copy).
    ConfigTable {
        /// Rewrite the table between the config-table markers of this README instead.
        #[arg(long)]
        readme: Option<PathBuf>,
    },
}

/// Runs the command; a failure is one `error: …` report on stderr (the causes joined on
/// its first line, never a backtrace, whatever `RUST_BACKTRACE` says) and exit code 1.
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
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::HashToken { token } => {
            println!("{}", hash_token(&token));
            Ok(())
        }
        Command::ConfigTable { readme: None } => {
            print!("{}", config::markdown_table());
            Ok(())
        }
        Command::ConfigTable { readme: Some(path) } => {
            let changed = config::update_readme(&path)?;
            println!(
                "{}: configuration table {}",
                path.display(),
                if changed {
                    "rewritten"
                } else {
                    "already up to date"
                }
            );
            Ok(())
        }
        Command::Dev {
            nodes,
            plugins_dir,
            sim,
            policy_chain,
            failing_images,
            allow_remote,
            old_operator,
            ray_venv,
        } => {
            dev(
                forge_gateway::dev::DevOptions {
                    nodes,
                    plugins_dir,
                    env: std::env::vars()
                        .filter(|(k, _)| k.starts_with("FORGE_"))
                        .collect(),
                    sim,
                    policy_chain,
                    failing_images,
                    old_operator,
                    ray_venv,
                },
                allow_remote,
            )
            .await
        }
        Command::Serve { policy_chain } => serve_cluster(policy_chain).await,
    }
}

async fn dev(opts: forge_gateway::dev::DevOptions, allow_remote: bool) -> anyhow::Result<()> {
    let listen = opts
        .env
        .get("FORGE_LISTEN")
        .map(|l| l.parse())
        .transpose()
        .context("FORGE_LISTEN")?
        .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 8080)));
    forge_gateway::dev::check_listen(listen, allow_remote)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let url = format!("http://{}", listener.local_addr()?);
    let public: url::Url = url.parse().context("listen URL")?;
    let dev = forge_gateway::dev::start(&opts, &public).await?;
    let sample = forge_gateway::dev::write_sample(&dev.state.config.gateway.data_dir)?;
    let controllers = spawn_controllers(&dev.state);
    println!("Forge gateway (dev) listening on {url}");
    println!("  token:      {}", dev.token);
    println!("              (admin of team-a, fresh at every start)");
    let tokens_file = dev.state.config.gateway.tokens_file.as_deref();
    for line in forge_gateway::dev::tokens_file_lines(tokens_file) {
        println!("  {line}");
    }
    println!(
        "  kubeconfig: {0}  (kubectl --kubeconfig {0} get rayjobs,pods -w)",
        dev.kubeconfig.display()
    );
    println!("  submit the sample job:");
    println!(
        "    curl -s -H 'Authorization: Bearer {}' -F spec=@{} -F code=@{} {url}/v1/jobs",
        dev.token,
        sample.spec.display(),
        sample.code.display()
    );
    println!(
        "  then: curl -s -H 'Authorization: Bearer {}' {url}/v1/jobs/<id>",
        dev.token
    );
    println!(
        "        curl -s -H 'Authorization: Bearer {}' {url}/v1/jobs/<id>/logs",
        dev.token
    );
    let shutdown = dev.state.shutdown.clone();
    serve(listener, router(dev.state), shutdown).await?;
    controllers.shutdown().await;
    dev.sim.shutdown().await;
    Ok(())
}

async fn serve_cluster(policy_chain: Option<PathBuf>) -> anyhow::Result<()> {
    let cfg = Config::from_env().map_err(|e| anyhow::anyhow!("{e}"))?;
    let policy_chain = policy_chain
        .or_else(|| cfg.gateway.policy_chain_file.clone())
        .context(
            "no policy chain: pass --policy-chain or set FORGE_POLICY_CHAIN_FILE (in the \
             environment or FORGE_CONFIG_FILE)",
        )?;
    let tokens = std::sync::Arc::new(LiveTokens::load(TokenSource {
        file: Some(cfg.gateway.tokens_path()),
        extra: Vec::new(),
    })?);
    let (client, source) = forge_gateway::cluster::connect::client(&cfg.k8s).await?;
    tracing::info!("Kubernetes API: {}", source.as_str());
    let boot = boot_links_from_file(&policy_chain)?;
    let capsules = match compose::s3_backend(&cfg).await? {
        Some(s3) => s3,
        None => {
            let public = cfg.gateway.public_url.clone().context(
                "without FORGE_S3_* the gateway serves capsules itself: set FORGE_PUBLIC_URL to \
                 the URL pods reach it at",
            )?;
            CapsuleBackend::Local {
                base_url: public.parse().context("FORGE_PUBLIC_URL")?,
            }
        }
    };
    let listener = tokio::net::TcpListener::bind(cfg.gateway.listen).await?;
    let state = compose::build_state(cfg, tokens, client, boot, capsules).await?;
    let controllers = spawn_controllers(&state);
    tracing::info!("forge-gateway listening on {}", listener.local_addr()?);
    let shutdown = state.shutdown.clone();
    serve(listener, router(state), shutdown).await?;
    // Controllers stop and the leader lease is released only after the HTTP server has
    // drained: a successor takes over at once instead of waiting for the lease to expire.
    controllers.shutdown().await;
    Ok(())
}

/// Serves until SIGTERM (what Kubernetes sends) or SIGINT, then ends the open event
/// streams and drains in-flight requests.
async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            }
            shutdown.begin();
        })
        .await
        .context("serving HTTP")
}
