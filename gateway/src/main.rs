//! `forge-gateway`: config → build → run.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use forge_gateway::auth::hash_token;
use forge_gateway::compose::{self, CapsuleBackend, serve, spawn_controllers};
use forge_gateway::config::{self, Config};
use forge_gateway::live_tokens::{LiveTokens, TokenSource};
use forge_gateway::policy::boot_links_from_file;
use forge_gateway::router;

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
    #[cfg(feature = "dev")]
    Dev(forge_gateway::dev::command::DevArgs),
    /// (Not in this build: the production binary links no emulator.)
    #[cfg(not(feature = "dev"))]
    #[command(hide = true, disable_help_flag = true)]
    Dev {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        _args: Vec<String>,
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
/// its first line, each once: `answer::report`; never a backtrace, whatever
/// `RUST_BACKTRACE` says) and exit code 1.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", forge_gateway::answer::report(e.as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Logs (FORGE_LOG_FORMAT) and, when OTEL_* asks for them, exported traces.
    let telemetry = forge_gateway::telemetry::init("info,tower_http=warn")?;
    let result = run_command(cli).await;
    // The spans still buffered are sent before the process exits.
    tokio::task::spawn_blocking(move || telemetry.shutdown()).await?;
    result
}

async fn run_command(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
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
        #[cfg(feature = "dev")]
        Command::Dev(args) => forge_gateway::dev::command::run(args).await,
        #[cfg(not(feature = "dev"))]
        Command::Dev { .. } => anyhow::bail!(
            "this forge-gateway was built without dev mode (the production build links no \
             emulator): build it with `cargo build -p forge-gateway --features dev`, or run \
             `bash deploy/dev.sh`"
        ),
        Command::Serve { policy_chain } => serve_cluster(policy_chain).await,
    }
}

async fn serve_cluster(policy_chain: Option<PathBuf>) -> anyhow::Result<()> {
    let mut cfg = Config::from_env().map_err(|e| anyhow::anyhow!("{e}"))?;
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
    let clients = compose::connect_fleets(&mut cfg).await?;
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
    let state = compose::build_state(cfg, tokens, clients, boot, capsules).await?;
    let controllers = spawn_controllers(&state);
    tracing::info!("forge-gateway listening on {}", listener.local_addr()?);
    let shutdown = state.shutdown.clone();
    serve(listener, router(state), shutdown).await?;
    // Controllers stop and the leader lease is released only after the HTTP server has
    // drained: a successor takes over at once instead of waiting for the lease to expire.
    controllers.shutdown().await;
    Ok(())
}
