//! The error of the simulated controllers (a failed reconcile is requeued; a failed
//! controller task stops its siblings).

/// Errors of the controllers.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Kubernetes API error.
    #[error("kubernetes api: {0}")]
    Kube(#[from] kube::Error),
    /// An object did not have the shape the controller needs.
    #[error("malformed {kind} {name}: {reason}")]
    Malformed {
        /// Kind of the object.
        kind: &'static str,
        /// namespace/name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// (De)serialising an object failed.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A controller task panicked or was aborted.
    #[error("controller task failed: {0}")]
    Task(String),
}
