//! [`PlaygroundError`]: why a playground request failed, and what each variant answers
//! ([`Answers`]); backend failures are logged by the edge, never echoed.

use http::StatusCode;
use serde_json::json;

use crate::admission::NotReady;
use crate::answer::{Answer, Answers};
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
    /// An extension past the longest life a playground may have: how much it may still
    /// be extended (its age decides, so the request conflicts with its state).
    #[error(
        "playground {id} lives at most {lifetime_seconds} s in all; it can be extended by at \
         most {max_seconds} s"
    )]
    LifetimeExceeded {
        id: String,
        lifetime_seconds: u64,
        max_seconds: u64,
    },
    /// The playground's server is not ready yet.
    #[error("playground {0} is not ready yet")]
    NotReady(String),
    /// No inference image is configured (`FORGE_IMAGE_VLLM`): 409, this installation's
    /// configuration refuses the request.
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

/// `Retry-After` of a playground the policy would queue.
const PLAYGROUND_RETRY_S: u64 = 30;

impl Answers for PlaygroundError {
    fn answer(&self) -> Answer {
        let message = self.to_string();
        match self {
            PlaygroundError::Invalid { field, .. } => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-playground",
                message,
            )
            .field(*field),
            PlaygroundError::NotFound(_) => {
                Answer::new(StatusCode::NOT_FOUND, "not-found", message)
            }
            PlaygroundError::Ended { state, .. } => {
                Answer::new(StatusCode::CONFLICT, "playground-ended", message)
                    .details(json!({ "state": state }))
            }
            PlaygroundError::LifetimeExceeded { max_seconds, .. } => {
                Answer::new(StatusCode::CONFLICT, "playground-lifetime", message)
                    .details(json!({ "field": "seconds", "maxSeconds": max_seconds }))
            }
            PlaygroundError::NotReady(_) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "playground-not-ready",
                message,
            ),
            PlaygroundError::Disabled => {
                Answer::new(StatusCode::CONFLICT, "playgrounds-disabled", message)
            }
            PlaygroundError::Rejected {
                code,
                message,
                field,
                plugin,
            } => Answer::new(StatusCode::FORBIDDEN, "policy-rejected", message.clone())
                .details(json!({ "reason": code, "field": field, "plugin": plugin })),
            // Playgrounds do not wait in the training queue: try again once the team's
            // GPUs (or the cluster's) are free.
            PlaygroundError::NoRoom { code, message } => Answer::new(
                StatusCode::TOO_MANY_REQUESTS,
                "policy-queued",
                message.clone(),
            )
            .details(json!({ "reason": code }))
            .retry_after(PLAYGROUND_RETRY_S),
            PlaygroundError::ClusterNotReady(_) => {
                Answer::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", message)
            }
            PlaygroundError::Policy(e) => e.answer(),
            PlaygroundError::Store(e) => crate::answer::Answers::answer(e),
            PlaygroundError::Kube(_) => Answer::internal(),
        }
    }
}
