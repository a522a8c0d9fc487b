//! `forge playground`: inference servers for a model on the team's GPUs — start one,
//! list them, show one (state, pod phase, next reclaim), extend its TTL, end it. The
//! server itself is called at the `endpoint` shown, with the same token (any
//! OpenAI-compatible client: base URL `<gateway><endpoint>`).

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::output::{Format, emit, field, table, time};

/// The playground commands.
#[derive(Debug, Subcommand)]
pub enum PlaygroundCommand {
    /// Start a playground (prints it; `state` is pending until the model is loaded)
    #[command(
        after_help = "Examples:\n  forge playground create --model meta-llama/Llama-3.1-8B-Instruct --gpus 1 --ttl 3600 --idle 900\n  forge playground create --model /forge/storage/teams/a/ckpt --gpus 2 --ttl 7200 --arg=--max-model-len --arg=8192"
    )]
    Create(CreateArgs),
    /// Your team's playgrounds (newest first)
    List,
    /// One playground: state, pod phase and pending reason, endpoint, next reclaim
    Status {
        /// Playground id
        id: String,
    },
    /// Add seconds to a playground's hard TTL
    Extend {
        /// Playground id
        id: String,
        /// Seconds to add
        seconds: u64,
    },
    /// End a playground now (its GPUs go back)
    Delete {
        /// Playground id
        id: String,
    },
}

/// `forge playground create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Model id or path on the team's storage
    #[arg(long)]
    model: String,
    /// GPUs (tensor-parallel size)
    #[arg(long)]
    gpus: u32,
    /// Hard TTL in seconds
    #[arg(long = "ttl")]
    ttl_seconds: u64,
    /// Idle TTL in seconds (from the last request)
    #[arg(long = "idle")]
    idle_seconds: Option<u64>,
    /// GPU series (else the policy picks)
    #[arg(long)]
    series: Option<String>,
    /// Extra server argument (repeatable; use `--arg=--flag`)
    #[arg(long = "arg")]
    args: Vec<String>,
}

fn print_one(pg: &Value) {
    println!(
        "{} {} {}",
        field(pg, "/id"),
        field(pg, "/state"),
        field(pg, "/model")
    );
    if let Some(phase) = pg["pod"]["phase"].as_str() {
        let reason = pg["pod"]["reason"].as_str().unwrap_or("");
        println!("  pod: {phase} {reason}");
    }
    if let Some(at) = pg["reclaim"]["atMs"].as_i64() {
        println!("  reclaim: {} ({})", time(at), field(pg, "/reclaim/reason"));
    }
    if let Some(reason) = pg["reason"].as_str() {
        println!("  ended: {reason}");
    }
    println!("  endpoint: {}", field(pg, "/endpoint"));
}

/// Runs a playground command.
pub async fn run(api: &Api, cmd: PlaygroundCommand, format: Format) -> Result<u8, CliError> {
    let pg: Value = match cmd {
        PlaygroundCommand::Create(a) => {
            let mut body = json!({"model": a.model, "gpus": a.gpus, "ttlSeconds": a.ttl_seconds,
                "args": a.args});
            if let Some(s) = a.series {
                body["series"] = json!(s);
            }
            if let Some(i) = a.idle_seconds {
                body["idleSeconds"] = json!(i);
            }
            api.call(Method::POST, "/v1/playgrounds", &body).await?
        }
        PlaygroundCommand::List => {
            let list: Value = api.get("/v1/playgrounds").await?;
            emit(format, &list, || {
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let rows = items.iter().map(|p| {
                    vec![
                        field(p, "/id"),
                        field(p, "/state"),
                        field(p, "/model"),
                        field(p, "/gpus"),
                        field(p, "/series"),
                        p["reclaim"]["atMs"].as_i64().map(time).unwrap_or_default(),
                        field(p, "/reason"),
                    ]
                });
                println!(
                    "{}",
                    table(
                        &[
                            "ID", "STATE", "MODEL", "GPUS", "SERIES", "RECLAIM", "REASON"
                        ],
                        rows
                    )
                );
            })?;
            return Ok(code::OK);
        }
        PlaygroundCommand::Status { id } => api.get(&format!("/v1/playgrounds/{id}")).await?,
        PlaygroundCommand::Extend { id, seconds } => {
            api.call(
                Method::POST,
                &format!("/v1/playgrounds/{id}/extend"),
                &json!({ "seconds": seconds }),
            )
            .await?
        }
        PlaygroundCommand::Delete { id } => {
            let resp = api
                .send(api.request(Method::DELETE, &format!("/v1/playgrounds/{id}")))
                .await?;
            crate::api::json(resp).await?
        }
    };
    emit(format, &pg, || print_one(&pg))?;
    Ok(code::OK)
}
