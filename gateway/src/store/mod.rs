//! Durable state: jobs (with their history, decisions and the queue), capsule
//! ownership and policy state (plugin registry, versioned chains, shadow results),
//! behind three traits — [`JobStore`], [`CapsuleStore`] and [`PolicyStore`] — so the
//! backends can differ while the semantics (compare-and-set transitions and versions,
//! FIFO queue, keyset pages, per-team capsule owners) cannot.
//!
//! [`Database`] is the one handle a gateway opens: it owns the connection and every
//! migration, and hands out the stores over it.

pub mod capsules;
pub mod error;
pub mod jobs;
pub mod policies;
pub mod sqlite;

use std::path::Path;
use std::sync::Arc;

pub use capsules::CapsuleStore;
pub use error::StoreError;
pub use jobs::{
    DecisionRecord, HistoryEntry, JobRecord, JobStore, ListQuery, MAX_PAGE, NewDecision, NewJob,
    Page, Transition, new_job_id, now_ms,
};
pub use policies::{
    LinkRef, NewVersion, PluginRecord, PolicyStore, PolicyVersion, RecentDecision, ShadowCounts,
    ShadowResult,
};

/// The gateway's database: one connection (pool), its migrations, every store.
#[derive(Clone)]
pub struct Database {
    /// Jobs, history, decisions, queue.
    pub jobs: Arc<dyn JobStore>,
    /// Which teams uploaded which capsules.
    pub capsules: Arc<dyn CapsuleStore>,
    /// Plugins, policy versions, shadow results.
    pub policies: Arc<dyn PolicyStore>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Database")
    }
}

impl Database {
    /// Opens (creating and migrating) the SQLite database at `path`.
    pub fn open_sqlite(path: &Path) -> Result<Self, StoreError> {
        let db = Arc::new(sqlite::SqliteDatabase::open(path)?);
        Ok(Database {
            jobs: db.clone(),
            capsules: db.clone(),
            policies: db,
        })
    }
}
