//! `forge-gateway`: config → build → run.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use clap::{Parser, Subcommand};
use forge_gateway::app::{ActivePolicy, AppState, router};
use forge_gateway::auth::{Tokens, hash_token};
use forge_gateway::capacity::Capacity;
use forge_gateway::config::Config;
use forge_gateway::policy::{EngineLimits, PolicyEngine, PolicyRunner, chain_file};

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
    /// Serve against a real cluster (kubeconfig or in-cluster config; FORGE_* settings).
    Serve {
        /// Policy chain file (YAML/JSON).
        #[arg(long, env = "FORGE_POLICY_CHAIN_FILE")]
        policy_chain: PathBuf,
    },
    /// The embedded default: an in-process Kubernetes + KubeRay emulator, no S3.
    Dev {
        /// Node layout: series=NODESxGPUS, comma separated.
        #[arg(long, default_value = "h100=2x8,h200=2x8")]
        nodes: String,
        /// Directory with the built reference policy components.
        #[arg(long, default_value = "target/plugins/components")]
        plugins_dir: PathBuf,
    },
    /// Print the SHA-256 to put in the tokens file for a token.
    HashToken { token: String },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
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
        Command::Dev { nodes, plugins_dir } => {
            let dev = forge_gateway::dev::start(&forge_gateway::dev::DevOptions {
                nodes,
                plugins_dir,
                env: std::env::vars()
                    .filter(|(k, _)| k.starts_with("FORGE_"))
                    .collect(),
            })
            .await?;
            let listen = dev.state.config.gateway.listen;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let url = format!("http://{}", listener.local_addr()?);
            println!("Forge gateway (dev) listening on {url}");
            println!("  token:      {}", dev.token);
            println!(
                "  kubeconfig: {}  (kubectl --kubeconfig {} get nodes)",
                dev.kubeconfig.display(),
                dev.kubeconfig.display()
            );
            println!("  try:");
            println!(
                "    curl -s -H 'Authorization: Bearer {}' {url}/v1/capacity",
                dev.token
            );
            println!(
                "    curl -s -H 'Authorization: Bearer {}' -H 'Content-Type: application/json' \\\n      -d '{{\"name\":\"demo\",\"framework\":\"nemo-rl\",\"entrypoint\":\"python train.py\",\"pools\":[{{\"name\":\"train\",\"nodes\":2,\"gpusPerNode\":8}}]}}' \\\n      {url}/v1/admission/review",
                dev.token
            );
            serve(listener, router(dev.state)).await?;
            dev.sim.shutdown().await;
            Ok(())
        }
        Command::Serve { policy_chain } => {
            let cfg = Config::from_env().map_err(|e| anyhow::anyhow!("{e}"))?;
            let tokens = Tokens::load(&cfg.gateway.tokens_path())?;
            let client = kube::Client::try_default()
                .await
                .context("connecting to Kubernetes")?;
            let engine = PolicyEngine::new(
                EngineLimits {
                    deadline: Duration::from_millis(cfg.gateway.policy_deadline_ms),
                    memory_cap_bytes: usize::try_from(cfg.gateway.policy_memory_mib << 20)
                        .unwrap_or(usize::MAX),
                    ..EngineLimits::default()
                },
                Some(cfg.gateway.data_dir.join("plugin-cache")),
            )?;
            let chain = chain_file::build(&engine, &chain_file::read(&policy_chain)?)?;
            let capacity =
                Capacity::start(client, &cfg.k8s.gpu_node_label, Duration::from_secs(30)).await?;
            let listener = tokio::net::TcpListener::bind(cfg.gateway.listen).await?;
            tracing::info!("forge-gateway listening on {}", listener.local_addr()?);
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
            serve(listener, router(state)).await
        }
    }
}

async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> anyhow::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
        })
        .await
        .context("serving HTTP")
}
