//! [`JobError`]: why a job operation failed — submission, lookup, cancellation, logs,
//! dispatch — as variants callers branch on. The HTTP edge maps them to statuses and
//! stable codes (`http::error`); nothing here knows HTTP.

use crate::domain::{Digest, JobState};
use crate::jobspec::SpecErrors;
use crate::objects::ObjectStoreError;
use crate::rayjob::BuildError;
use crate::store::StoreError;

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
    Limit(#[from] super::limits::LimitError),
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
    /// The leadership term this controller acted under is over: nothing was done.
    #[error(transparent)]
    Deposed(#[from] crate::leader::Deposed),
    /// The Node/Pod caches have not synced yet (the gateway is starting).
    #[error(transparent)]
    NotReady(#[from] crate::admission::NotReady),
    /// Spooling, packing or a blocking task failed.
    #[error("{0}")]
    Io(String),
}
