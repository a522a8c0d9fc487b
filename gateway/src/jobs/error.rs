//! Failures of job submission, lookup and cancellation that callers branch on. The
//! HTTP mapping (status, stable code, field) lives in [`crate::api_error`].

use crate::jobspec::SpecErrors;
use crate::rayjob::BuildError;
use crate::store::{JobState, StoreError};

/// Why a job operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// No such job visible to the caller (another team's job is "not found" too).
    #[error("job {0} not found")]
    NotFound(String),
    /// The request is malformed (not the spec itself): missing part, bad field.
    #[error("{field}: {message}")]
    BadRequest {
        /// Stable code.
        code: &'static str,
        /// The request field.
        field: &'static str,
        /// Why.
        message: String,
    },
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
    /// The uploaded code is not acceptable (hostile or oversize archive).
    #[error(transparent)]
    Capsule(#[from] forge_capsule::CapsuleError),
    /// A named capsule does not exist.
    #[error("capsule {0} is not stored")]
    UnknownCapsule(String),
    /// The job cannot be cancelled in its state.
    #[error("job {id} is {state} and cannot be cancelled")]
    NotCancellable {
        /// The job.
        id: String,
        /// Its state.
        state: JobState,
    },
    /// The RayJob manifest cannot be built.
    #[error("building the RayJob: {0}")]
    Build(#[from] BuildError),
    /// The job store failed.
    #[error("job store: {0}")]
    Store(#[from] StoreError),
    /// The object store failed.
    #[error("object store: {0}")]
    ObjectStore(#[from] forge_object_store::StoreError),
    /// The Kubernetes API failed.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The policy could not be evaluated (fails closed).
    #[error(transparent)]
    Policy(#[from] crate::policy::RunError),
    /// Spooling or a blocking task failed.
    #[error("{0}")]
    Io(String),
}
