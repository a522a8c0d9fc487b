//! [`StoreError`]: why a store operation failed, whichever backend ran it. Callers
//! branch on the variants (a lost compare-and-set, a stale policy version, a taken
//! plugin version); backend failures carry their message and are never shown to users.

use crate::domain::JobState;

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
    /// The database failed (I/O, locking, constraint): the backend's message.
    #[error("database: {0}")]
    Backend(String),
    /// The blocking task that ran the query failed.
    #[error("store task: {0}")]
    Task(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Backend(e.to_string())
    }
}
