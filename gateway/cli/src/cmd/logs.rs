//! `forge logs ID [-f] [--pod driver|head|<pod>] [--container C] [--tail N]`: the
//! archived log once the job ended, the live one before; `-f` follows it to the end of
//! the job (reconnecting from the last byte received) and exits with the job's outcome.
//! `--pods` lists the job's pods and containers whose logs can be read (every Ray pod
//! and the submitter), so one worker's log can be picked by name.

use serde_json::Value;

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::follow::{self, Start, detachable};
use crate::output::{Format, bytes, emit, field, table};

/// Arguments of `forge logs`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  forge logs JOB -f                       # the driver's output, followed\n  forge logs JOB --pods                   # every pod's log of the job\n  forge logs JOB --pod forge-x-worker-abc # one worker's log"
)]
pub struct LogsArgs {
    /// The job's id
    pub id: String,
    /// Follow the log until the job ends; exit with its outcome
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Whose log: `driver`, `head`, or a pod's name as `--pods` lists it
    #[arg(long, default_value = "driver", value_parser = pod_name)]
    pub pod: String,
    /// With a pod's name: which of its containers [default: its Ray or submitter one]
    #[arg(long, value_parser = pod_name)]
    pub container: Option<String>,
    /// List the job's pods and containers whose logs can be read, then exit
    #[arg(long, conflicts_with_all = ["follow", "tail", "offset", "container"])]
    pub pods: bool,
    /// Only the last N lines (then everything new with -f)
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Start at this byte of the log (what a previous read reached)
    #[arg(long, value_name = "BYTES", conflicts_with = "tail")]
    pub offset: Option<u64>,
    /// An earlier run's log: attempt N (0 is the first) of a job that was preempted
    /// (`forge status` lists them) [default: the current run]
    #[arg(long, value_name = "N", conflicts_with_all = ["follow", "pods"])]
    pub attempt: Option<u32>,
}

/// A Kubernetes object name (what a pod or container may be called): it goes into the
/// query string as it is.
fn pod_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if ok {
        Ok(s.to_string())
    } else {
        Err("a pod or container name: lowercase letters, digits, `-` and `.`".into())
    }
}

/// The log selection as the gateway's query takes it.
fn selector(args: &LogsArgs) -> Result<String, CliError> {
    let which = pod_selector(args)?;
    Ok(match args.attempt {
        Some(n) => format!("{which}&attempt={n}"),
        None => which,
    })
}

/// Which pod's log, as the gateway's query takes it.
fn pod_selector(args: &LogsArgs) -> Result<String, CliError> {
    match (args.pod.as_str(), &args.container) {
        ("driver" | "head", Some(_)) => Err(CliError::Usage(
            "--container goes with a pod's name (see --pods), not with driver or head".into(),
        )),
        (name @ ("driver" | "head"), None) => Ok(format!("name={name}")),
        (pod, None) => Ok(format!("pod={pod}")),
        (pod, Some(c)) => Ok(format!("pod={pod}&container={c}")),
    }
}

/// `forge logs`.
pub async fn logs(api: &Api, args: LogsArgs, format: Format) -> Result<u8, CliError> {
    if args.pods {
        return pods(api, &args.id, format).await;
    }
    let which = selector(&args)?;
    let from = match (args.tail, args.offset) {
        (Some(n), _) => Start::Tail(n),
        (None, Some(n)) => Start::Offset(n),
        (None, None) => Start::Offset(0),
    };
    let ended = detachable(
        &args.id,
        follow::logs(api, &args.id, &which, from, args.follow),
    )
    .await?;
    match ended {
        Some(ended) => super::submit::outcome(&args.id, ended),
        None => Ok(code::OK),
    }
}

/// `forge logs ID --pods`.
async fn pods(api: &Api, id: &str, format: Format) -> Result<u8, CliError> {
    let list: Value = api.get(&format!("/v1/jobs/{id}/logs/pods")).await?;
    emit(format, &list, || {
        let rows = list.as_array().into_iter().flatten().map(|p| {
            let size = match p["bytes"].as_u64() {
                Some(n) if p["truncated"].as_bool() == Some(true) => format!("{} (tail)", bytes(n)),
                Some(n) => bytes(n),
                None => "live".into(),
            };
            vec![
                field(p, "/pod"),
                field(p, "/role"),
                field(p, "/container"),
                size,
            ]
        });
        println!("{}", table(&["POD", "ROLE", "CONTAINER", "LOG"], rows));
    })?;
    Ok(code::OK)
}
