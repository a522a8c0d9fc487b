//! The exit-code contract of `forge`, and [`CliError`], every way a command fails,
//! each mapped to one code (so scripts can branch on the outcome):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; with `--wait`/`--follow`: the job succeeded |
//! | 1 | any other error (a file, the gateway's answer, an internal error) |
//! | 2 | usage: the command line is wrong |
//! | 3 | the job failed |
//! | 4 | the job was cancelled |
//! | 5 | the job timed out |
//! | 6 | rejected by policy (submission or review) |
//! | 7 | not found (job, upload, plugin, version) |
//! | 8 | packing or uploading the code failed |
//! | 9 | not logged in, or the token was refused |
//! | 10 | the gateway is unreachable or unavailable |
//! | 130 | detached (Ctrl-C during `--wait`, `--follow`, `status -w`, `logs -f`); the job keeps running |

use std::process::ExitCode;

/// Exit codes.
pub mod code {
    pub const OK: u8 = 0;
    pub const ERROR: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const FAILED: u8 = 3;
    pub const CANCELLED: u8 = 4;
    pub const TIMED_OUT: u8 = 5;
    pub const REJECTED: u8 = 6;
    pub const NOT_FOUND: u8 = 7;
    pub const UPLOAD: u8 = 8;
    pub const AUTH: u8 = 9;
    pub const UNAVAILABLE: u8 = 10;
    pub const DETACHED: u8 = 130;
}

/// The exit code of a job that ended in `state` (`succeeded`, `failed`, …).
pub fn for_state(state: &str) -> u8 {
    match state {
        "succeeded" => code::OK,
        "cancelled" => code::CANCELLED,
        "timed-out" => code::TIMED_OUT,
        "rejected" => code::REJECTED,
        _ => code::FAILED,
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line, or a file it names, is not usable.
    #[error("{0}")]
    Usage(String),
    /// No gateway URL or token.
    #[error("not logged in: run `forge login <URL>` or set FORGE_URL and FORGE_TOKEN")]
    NotLoggedIn,
    /// The gateway answered with an error.
    #[error("{message} ({code})")]
    Api {
        /// HTTP status.
        status: u16,
        /// The gateway's stable code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The gateway could not be reached.
    #[error("cannot reach the gateway at {url}: {detail}")]
    Unreachable {
        /// Where.
        url: String,
        /// Why.
        detail: String,
    },
    /// Packing or uploading failed.
    #[error("{0}")]
    Upload(String),
    /// A local file, or the plugin host, failed.
    #[error("{0}")]
    Local(String),
    /// A job ended in a state other than `succeeded`.
    #[error("job {id} {state}{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    JobEnded {
        /// The job.
        id: String,
        /// Its final state.
        state: String,
        /// Why, if the gateway says.
        reason: Option<String>,
    },
    /// The user pressed Ctrl-C while following a job.
    #[error("detached from job {0}; it keeps running (see `forge status {0}`)")]
    Detached(String),
    /// A policy decision that rejects (review, local plugin run).
    #[error("rejected: {0}")]
    Rejected(String),
}

impl CliError {
    /// The exit code.
    pub fn code(&self) -> u8 {
        match self {
            CliError::Usage(_) => code::USAGE,
            CliError::NotLoggedIn => code::AUTH,
            CliError::Api {
                status, code: c, ..
            } => match (*status, c.as_str()) {
                (_, "policy-rejected") => code::REJECTED,
                (_, c) if c.starts_with("upload.") || c.starts_with("capsule.") => code::UPLOAD,
                (401, _) => code::AUTH,
                (404, _) => code::NOT_FOUND,
                (502..=504, _) => code::UNAVAILABLE,
                _ => code::ERROR,
            },
            CliError::Unreachable { .. } => code::UNAVAILABLE,
            CliError::Upload(_) => code::UPLOAD,
            CliError::Local(_) => code::ERROR,
            CliError::JobEnded { state, .. } => for_state(state),
            CliError::Detached(_) => code::DETACHED,
            CliError::Rejected(_) => code::REJECTED,
        }
    }

    /// The process exit code.
    pub fn exit(&self) -> ExitCode {
        ExitCode::from(self.code())
    }

    /// A local failure with context.
    pub fn local(what: impl std::fmt::Display, e: impl std::fmt::Display) -> Self {
        CliError::Local(format!("{what}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_have_distinct_codes() {
        let codes = [
            code::OK,
            code::ERROR,
            code::USAGE,
            code::FAILED,
            code::CANCELLED,
            code::TIMED_OUT,
            code::REJECTED,
            code::NOT_FOUND,
            code::UPLOAD,
            code::AUTH,
            code::UNAVAILABLE,
            code::DETACHED,
        ];
        let mut sorted = codes.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), codes.len());
        assert_eq!(for_state("succeeded"), 0);
        assert_eq!(for_state("failed"), 3);
        assert_eq!(for_state("timed-out"), 5);
        let rejected = CliError::Api {
            status: 403,
            code: "policy-rejected".into(),
            message: "no".into(),
        };
        assert_eq!(rejected.code(), code::REJECTED);
        let missing = CliError::Api {
            status: 404,
            code: "not-found".into(),
            message: "no".into(),
        };
        assert_eq!(missing.code(), code::NOT_FOUND);
    }
}
