//! [`JobError`]: why a job operation failed — submission, lookup, cancellation, logs,
//! dispatch — as variants callers branch on, and what each answers a client
//! ([`Answers`]: status, stable code, details).

use http::StatusCode;
use serde_json::json;

use crate::answer::{Answer, Answers, BoxError, Failed};
use crate::domain::{Digest, JobState};
use crate::jobspec::SpecErrors;
use crate::manifests::BuildError;
use crate::objects::ObjectStoreError;
use crate::store::StoreError;

/// Longest the Kubernetes API may take to answer what a job's page shows from the
/// cluster (its events and pods, its dashboard address). Past it the read fails with
/// [`JobError::ClusterSlow`] rather than hold the page (an API server that does not
/// answer, a partition): `GET /v1/jobs/{id}` leaves those details out, `…/events`
/// answers 503 `cluster-unavailable`. Bounded reads are `logs::within`.
pub const CLUSTER_READ_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Why a job operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// No such job visible to the caller (another team's job is "not found" too).
    #[error("job {0} not found")]
    NotFound(String),
    /// The spec is invalid.
    #[error(transparent)]
    InvalidSpec(#[from] SpecErrors),
    /// The policy refused the job.
    #[error("rejected by policy: {code}: {message}")]
    Rejected {
        /// The job id the rejection is recorded under.
        job_id: String,
        /// The policy's stable code.
        code: String,
        /// The policy's message.
        message: String,
        /// The spec field concerned, if any.
        field: Option<String>,
        /// The plugin that rejected.
        plugin: Option<String>,
    },
    /// The policy could not be evaluated (admission fails closed).
    #[error(transparent)]
    Policy(#[from] crate::policy::EvalError),
    /// The team went over a submission limit (nothing was stored).
    #[error(transparent)]
    Limit(#[from] super::submit::limits::LimitError),
    /// The uploaded code is not acceptable (hostile or oversize archive).
    #[error(transparent)]
    Capsule(#[from] forge_capsule::CapsuleError),
    /// A capsule reference that is not a digest.
    #[error("a capsule is named by its SHA-256: 64 lowercase hex digits")]
    InvalidCapsuleRef,
    /// A named capsule does not exist.
    #[error("capsule {0} is not stored; submit the code as a multipart upload")]
    UnknownCapsule(Digest),
    /// The job cannot be cancelled in its state.
    #[error("job {id} is {state} and cannot be cancelled")]
    NotCancellable {
        /// The job.
        id: String,
        /// Its state.
        state: JobState,
    },
    /// A capsule link whose signature does not verify (or names no job's capsule).
    #[error("the capsule link's signature does not verify")]
    BadCapsuleLink,
    /// A capsule link of a job that has ended: it authorizes nothing any more.
    #[error("job {id} is {state}: its capsule link has expired with it")]
    CapsuleLinkEnded {
        /// The job.
        id: String,
        /// Its (terminal) state.
        state: JobState,
    },
    /// The job's archived logs were deleted by retention (`FORGE_RETENTION_LOGS_S`).
    #[error("the logs of job {id} were deleted when their retention ended")]
    LogsExpired {
        /// The job.
        id: String,
        /// When (Unix ms).
        deleted_at_ms: i64,
    },
    /// A log that is neither archived nor readable from a live pod.
    #[error("no {log} log for job {id} (state {state}): not archived and no live pod")]
    LogNotAvailable {
        /// The job.
        id: String,
        /// Which log (`driver`, `head`, `pod <name>`).
        log: String,
        /// The job's state.
        state: JobState,
    },
    /// A job has had no such attempt (its attempts are `0..=last`).
    #[error("job {id} has had attempts 0..={last}, not {attempt}")]
    NoSuchAttempt {
        /// The job.
        id: String,
        /// The attempt asked for.
        attempt: u32,
        /// Its current attempt.
        last: u32,
    },
    /// The RayJob cannot be built.
    #[error("building the RayJob: {0}")]
    Build(#[from] BuildError),
    /// The job store failed.
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    /// The object store failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] ObjectStoreError),
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The Kubernetes API did not answer a read of a job's details in time
    /// ([`CLUSTER_READ_WITHIN`]).
    #[error(
        "the Kubernetes API did not answer for {what} within {}s; retry",
        CLUSTER_READ_WITHIN.as_secs()
    )]
    ClusterSlow {
        /// What was being read.
        what: &'static str,
    },
    /// The job ran in a fleet no longer configured: its objects cannot be reached.
    #[error("job {id} was dispatched to fleet {fleet:?}, which is no longer configured")]
    FleetGone { id: String, fleet: String },
    /// The leadership term this controller acted under is over: nothing was done.
    #[error(transparent)]
    Deposed(#[from] crate::leader::Deposed),
    /// The Node/Pod caches have not synced yet (the gateway is starting).
    #[error(transparent)]
    NotReady(#[from] crate::admission::NotReady),
    /// Spooling, packing, reading a log or a blocking task failed.
    #[error(transparent)]
    Io(#[from] Failed),
    /// A broken invariant (a bug): what was found.
    #[error("{0}")]
    Invariant(String),
}

impl JobError {
    /// `what` failed with `e`.
    pub(crate) fn io(what: impl Into<String>, e: impl Into<BoxError>) -> Self {
        JobError::Io(Failed::new(what, e))
    }
}

impl Answers for JobError {
    fn answer(&self) -> Answer {
        let message = self.to_string();
        match self {
            JobError::NotFound(_) => Answer::new(StatusCode::NOT_FOUND, "not-found", message),
            JobError::Rejected {
                job_id,
                code,
                message,
                field,
                plugin,
            } => Answer::new(StatusCode::FORBIDDEN, "policy-rejected", message.clone()).details(
                json!({ "reason": code, "field": field, "plugin": plugin, "jobId": job_id }),
            ),
            JobError::InvalidSpec(e) => e.answer(),
            JobError::Policy(e) => e.answer(),
            JobError::Limit(e) => e.answer(),
            JobError::Capsule(e) => e.answer(),
            JobError::InvalidCapsuleRef => {
                Answer::new(StatusCode::BAD_REQUEST, "invalid-capsule", message).field("capsule")
            }
            JobError::UnknownCapsule(_) => {
                Answer::new(StatusCode::UNPROCESSABLE_ENTITY, "unknown-capsule", message)
                    .field("capsule")
            }
            JobError::NotCancellable { state, .. } => {
                Answer::new(StatusCode::CONFLICT, "not-cancellable", message)
                    .details(json!({ "state": state }))
            }
            JobError::LogNotAvailable { log, .. } => {
                let field = if log.starts_with("pod ") {
                    "pod"
                } else {
                    "name"
                };
                Answer::new(StatusCode::NOT_FOUND, "logs-not-archived", message).field(field)
            }
            JobError::NoSuchAttempt { .. } => {
                Answer::new(StatusCode::NOT_FOUND, "attempt-not-found", message).field("attempt")
            }
            JobError::BadCapsuleLink => {
                Answer::new(StatusCode::FORBIDDEN, "bad-signature", message).field("sig")
            }
            JobError::CapsuleLinkEnded { state, .. } => {
                Answer::new(StatusCode::GONE, "job-ended", message)
                    .details(json!({ "state": state }))
            }
            JobError::LogsExpired { deleted_at_ms, .. } => {
                Answer::new(StatusCode::GONE, "logs-expired", message)
                    .details(json!({ "deletedAtMs": deleted_at_ms }))
            }
            JobError::ObjectStore(_) => Answer::storage_unavailable("stored"),
            // A starting gateway's caches, or an API server failing its lists: soon.
            JobError::NotReady(_) => {
                Answer::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", message).retry_after(2)
            }
            JobError::FleetGone { .. } => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "fleet-unavailable",
                message,
            ),
            JobError::ClusterSlow { .. } => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "cluster-unavailable",
                message,
            )
            .retry_after(CLUSTER_READ_WITHIN.as_secs()),
            // An unreachable database is a 503 to retry (`StoreError`'s answer).
            JobError::Store(e) => crate::answer::Answers::answer(e),
            JobError::Build(_)
            | JobError::Kube(_)
            | JobError::Io(_)
            | JobError::Invariant(_)
            | JobError::Deposed(_) => Answer::internal(),
        }
    }
}
