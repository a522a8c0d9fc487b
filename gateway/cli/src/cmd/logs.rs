//! `forge logs ID [-f] [--pod driver|head] [--tail N]`: the archived log once the job
//! ended, the live one before; `-f` follows it to the end of the job (reconnecting
//! from the last byte received) and exits with the job's outcome.

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::follow::{self, Start, detachable};

/// Which log.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Pod {
    /// The driver (the entrypoint's output)
    Driver,
    /// The Ray head
    Head,
}

/// Arguments of `forge logs`.
#[derive(Debug, clap::Args)]
pub struct LogsArgs {
    /// The job's id
    pub id: String,
    /// Follow the log until the job ends; exit with its outcome
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Which pod's log
    #[arg(long, value_enum, default_value = "driver")]
    pub pod: Pod,
    /// Only the last N lines (then everything new with -f)
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Start at this byte of the log (what a previous read reached)
    #[arg(long, value_name = "BYTES", conflicts_with = "tail")]
    pub offset: Option<u64>,
}

/// `forge logs`.
pub async fn logs(api: &Api, args: LogsArgs) -> Result<u8, CliError> {
    let pod = match args.pod {
        Pod::Driver => "driver",
        Pod::Head => "head",
    };
    let from = match (args.tail, args.offset) {
        (Some(n), _) => Start::Tail(n),
        (None, Some(n)) => Start::Offset(n),
        (None, None) => Start::Offset(0),
    };
    let ended = detachable(
        &args.id,
        follow::logs(api, &args.id, pod, from, args.follow),
    )
    .await?;
    match ended {
        Some(ended) => super::submit::outcome(&args.id, ended),
        None => Ok(code::OK),
    }
}
