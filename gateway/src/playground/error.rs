//! [`PlaygroundError`]: why a playground request failed. `http/error.rs` turns each
//! variant into a status and a machine-readable code; backend messages are logged
//! there, never echoed.

use crate::admission::NotReady;
use crate::policy::EvalError;
use crate::store::StoreError;

/// Playground failures callers branch on.
#[derive(Debug, thiserror::Error)]
pub enum PlaygroundError {
    /// A request field is invalid.
    #[error("invalid `{field}`: {reason}")]
    Invalid {
        /// The field (camelCase, as sent).
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// No playground with this id for this caller (another team's is "not found" too).
    #[error("playground {0} not found")]
    NotFound(String),
    /// The playground has ended; it cannot be extended or called.
    #[error("playground {id} has ended ({state})")]
    Ended {
        /// The playground.
        id: String,
        /// Its state.
        state: String,
    },
    /// The playground's server is not ready yet.
    #[error("playground {0} is not ready yet")]
    NotReady(String),
    /// No inference image is configured (`FORGE_IMAGE_VLLM`).
    #[error("playgrounds are not enabled: FORGE_IMAGE_VLLM is not set")]
    Disabled,
    /// Refused by policy.
    #[error("rejected by policy: {code}: {message}")]
    Rejected {
        /// The policy's code.
        code: String,
        /// Its message.
        message: String,
        /// The field it names.
        field: Option<String>,
        /// The plugin that rejected.
        plugin: Option<String>,
    },
    /// The policy would queue it: a playground does not wait in the training queue,
    /// it is refused with the policy's reason (retry later).
    #[error("no room now: {code}: {message}")]
    NoRoom {
        /// The policy's code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The cluster view is still syncing.
    #[error(transparent)]
    ClusterNotReady(#[from] NotReady),
    /// The policy could not be evaluated.
    #[error(transparent)]
    Policy(#[from] EvalError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The API server failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
}
