//! [`StoreError`]: why a store operation failed, whichever backend ran it. Callers
//! branch on the variants (a lost compare-and-set, a stale policy version, a taken
//! plugin version); backend failures carry the driver's error as their source (a
//! caller may downcast it) and are never shown to users.

use std::sync::Arc;

use crate::answer::BoxError;
use crate::domain::JobState;

/// A driver's error, shared: every write of a batch that failed gets the batch's one.
pub type Cause = Arc<dyn std::error::Error + Send + Sync>;

/// Store failures callers branch on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No job with this id.
    #[error("job {0} not found")]
    NotFound(String),
    /// A job with this id exists already.
    #[error("job {0} already exists")]
    Duplicate(String),
    /// The job is not in the state the caller expected.
    #[error("job {id} is {actual}, not {expected}")]
    Conflict {
        /// The job.
        id: String,
        /// What the caller expected.
        expected: JobState,
        /// What it is.
        actual: JobState,
    },
    /// The transition is not allowed by the state machine.
    #[error("illegal transition {from} -> {to}")]
    IllegalTransition {
        /// From.
        from: JobState,
        /// To.
        to: JobState,
    },
    /// A list cursor that this store did not produce.
    #[error("invalid cursor")]
    BadCursor,
    /// Optimistic concurrency: a policy scope is not at the version the writer expected.
    #[error("policy `{scope}` is at version {current}, not {expected}")]
    VersionConflict {
        /// `global` or `team:<name>`.
        scope: String,
        /// What the writer expected.
        expected: u64,
        /// What it is.
        current: u64,
    },
    /// A plugin (owner, name, version) is registered with other bytes.
    #[error("plugin `{name}` version `{version}` already exists with digest {digest}")]
    PluginVersionExists {
        /// The plugin.
        name: String,
        /// Its version.
        version: String,
        /// The digest registered under it.
        digest: String,
    },
    /// A fenced write from a leadership that is no longer current: the lease is at a
    /// newer epoch (another replica leads now).
    #[error("lease `{lease}` is at epoch {current}; this write was made under epoch {epoch}")]
    Fenced {
        /// The lease.
        lease: String,
        /// The writer's epoch.
        epoch: u64,
        /// The lease's epoch now (0: no lease).
        current: u64,
    },
    /// The store belongs to another installation than `FORGE_INSTANCE` names.
    #[error(
        "this store belongs to installation `{stored}`, but FORGE_INSTANCE is `{wanted}`: \
         unset FORGE_INSTANCE or point the gateway at that installation's store"
    )]
    InstanceMismatch {
        /// The identity recorded in the store.
        stored: String,
        /// The configured identity.
        wanted: String,
    },
    /// Stored data cannot be read back (schema drift, manual edits).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The database failed (I/O, locking, a constraint, the connection): the driver's
    /// error.
    #[error("database: {0}")]
    Backend(#[source] Cause),
    /// The database cannot be reached now (its connection failed or closed, it is
    /// shutting down or starting, or the server reached is a read-only standby: a
    /// failover in progress). Nothing of the operation is known to be stored unless the
    /// caller looks again; a client may retry.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] Cause),
    /// The write's batch was rolled back (disk full, I/O): nothing of it was stored.
    #[error("not committed: {0}")]
    NotCommitted(#[source] Cause),
    /// `FORGE_DATABASE_URL` (or the TLS it asks for) cannot be used.
    #[error("FORGE_DATABASE_URL: {0}")]
    Config(String),
    /// The blocking task or the writer thread that ran the query failed.
    #[error("store task: {0}")]
    Task(#[source] BoxError),
}

impl StoreError {
    /// The driver failed with `e`.
    pub fn backend(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        StoreError::Backend(Arc::new(e))
    }

    /// The task or thread running the query failed (`e`: an error, or what happened).
    pub fn task(e: impl Into<BoxError>) -> Self {
        StoreError::Task(e.into())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::backend(e)
    }
}

/// Seconds a client is told to wait when the database is unavailable.
pub const UNAVAILABLE_RETRY_S: u64 = 1;

/// Optimistic-concurrency conflicts are the writer's to resolve (409); a foreign cursor
/// is the client's (400); an unreachable database is a 503 to retry; everything else is
/// internal.
impl crate::answer::Answers for StoreError {
    fn answer(&self) -> crate::answer::Answer {
        use crate::answer::Answer;
        use http::StatusCode;
        use serde_json::json;
        let message = self.to_string();
        match self {
            StoreError::VersionConflict {
                expected, current, ..
            } => Answer::new(StatusCode::CONFLICT, "policy.version-conflict", message).details(
                json!({ "field": "expectedVersion", "expected": expected, "current": current }),
            ),
            StoreError::PluginVersionExists { digest, .. } => {
                Answer::new(StatusCode::CONFLICT, "plugin.version-exists", message)
                    .details(json!({ "field": "version", "digest": digest }))
            }
            StoreError::Unavailable(_) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store-unavailable",
                "the database is unavailable for a moment (a failover, a restart); retry",
            )
            .retry_after(UNAVAILABLE_RETRY_S),
            StoreError::BadCursor => Answer::new(
                StatusCode::BAD_REQUEST,
                "invalid-query",
                "not a cursor this gateway issued",
            )
            .field("cursor"),
            _ => Answer::internal(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Answers;

    #[test]
    fn an_unreachable_database_is_a_503_to_retry_and_a_broken_one_is_internal() {
        let io = || Arc::new(std::io::Error::other("connection refused")) as Cause;
        let answer = StoreError::Unavailable(io()).answer();
        assert_eq!(answer.status, http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(answer.code, "store-unavailable");
        assert_eq!(answer.retry_after, Some(UNAVAILABLE_RETRY_S));
        assert!(
            !answer.message.contains("refused"),
            "the cause is not echoed"
        );
        let answer = StoreError::Backend(io()).answer();
        assert_eq!(answer.status, http::StatusCode::INTERNAL_SERVER_ERROR);
    }
}
