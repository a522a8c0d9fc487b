//! Durable state: jobs (with their history, decisions and the queue), capsule
//! ownership, policy state (plugin registry, versioned chains, shadow results) and
//! coordination state (the leader lease, the installation identity), playgrounds,
//! retention, console sessions and upload sessions, behind eight traits — [`JobStore`],
//! [`CapsuleStore`], [`PolicyStore`], [`CoordStore`], [`PlaygroundStore`],
//! [`RetentionStore`], [`SessionStore`] and [`UploadSessionStore`] — so the
//! backends can differ while the semantics (compare-and-set transitions and versions,
//! FIFO queue, keyset pages, per-team capsule owners, fenced writes) cannot. One
//! conformance suite (`conformance/`, tests only) holds both backends to them.
//!
//! Backends: [`sqlite`] (embedded, the default: one gateway) and [`postgres`]
//! (`FORGE_DATABASE_URL=postgres://…`: replicas sharing one database). [`Database`] is
//! the one handle a gateway opens: it owns the connection (pool) and every migration,
//! and hands out the stores over it.
//!
//! **Extending the schema**: a new numbered step at the end of *both* migration lists,
//! `sqlite/migrations.rs` and `postgres/migrations.rs`, with the same version and name
//! ([`migration`] explains; a test holds the lists against each other), then the
//! queries in each backend's file for that store, then a case in `conformance/` so both
//! backends are held to the new behaviour.

pub mod capsules;
pub mod checkpoints;
pub mod codec;
#[cfg(test)]
pub(crate) mod conformance;
pub mod coord;
pub mod dispatch_journal;
pub mod error;
pub mod job_feed;
pub mod jobs;
pub mod metered;
pub mod migration;
pub mod playgrounds;
pub mod policies;
pub mod postgres;
pub mod preemptions;
pub mod retention;
pub mod sessions;
pub mod sqlite;
pub mod upload_sessions;
pub mod usage;

use std::path::Path;
use std::sync::Arc;

pub use capsules::{CapsuleStore, Deletion};
pub use checkpoints::{Checkpoint, CheckpointOutcome};
pub use coord::{Acquire, CoordStore, Lease};
pub use error::StoreError;
pub use job_feed::StoredChange;
pub use jobs::{
    DecisionRecord, Fence, HistoryEntry, JobLife, JobRecord, JobStore, ListQuery, MAX_PAGE,
    NewDecision, NewJob, Page, Transition, new_job_id, now_ms,
};
pub use playgrounds::{NewPlayground, PlaygroundRecord, PlaygroundStore};
pub use policies::{
    LinkRef, NewVersion, PluginRecord, PolicyStore, PolicyVersion, RecentDecision, ShadowCounts,
    ShadowResult,
};
pub use preemptions::{AdmittedTerms, PreemptionRecord, PreemptionWrite};
pub use retention::RetentionStore;
pub use sessions::{SessionRecord, SessionStore};
pub use upload_sessions::{PartRecord, UploadRecord, UploadSessionStore};

/// Which backend a [`Database`] runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite file in the data directory.
    Sqlite,
    /// A PostgreSQL server (`FORGE_DATABASE_URL`).
    Postgres,
}

impl Backend {
    /// Its name, as readiness and logs show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        }
    }
}

/// The gateway's database: one connection (pool), its migrations, every store.
#[derive(Clone)]
pub struct Database {
    /// Jobs, history, decisions, queue.
    pub jobs: Arc<dyn JobStore>,
    /// Which teams uploaded which capsules.
    pub capsules: Arc<dyn CapsuleStore>,
    /// Plugins, policy versions, shadow results.
    pub policies: Arc<dyn PolicyStore>,
    /// Leases, the installation identity, liveness.
    pub coord: Arc<dyn CoordStore>,
    /// Playgrounds (inference servers) and their clocks.
    pub playgrounds: Arc<dyn PlaygroundStore>,
    /// What retention deletes and when.
    pub retention: Arc<dyn RetentionStore>,
    /// Console sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// Resumable upload sessions and their parts.
    pub uploads: Arc<dyn UploadSessionStore>,
    /// The backend.
    pub backend: Backend,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("backend", &self.backend)
            .finish()
    }
}

impl Database {
    /// Opens (creating and migrating) the SQLite database at `path`.
    pub fn open_sqlite(path: &Path) -> Result<Self, StoreError> {
        let db = Arc::new(sqlite::SqliteDatabase::open(path)?);
        Ok(Database {
            jobs: db.clone(),
            capsules: db.clone(),
            policies: db.clone(),
            playgrounds: db.clone(),
            retention: db.clone(),
            sessions: db.clone(),
            uploads: db.clone(),
            coord: db,
            backend: Backend::Sqlite,
        })
    }

    /// Connects to (and migrates) the PostgreSQL database at `url`.
    pub async fn open_postgres(url: &str) -> Result<Self, StoreError> {
        let db = Arc::new(postgres::PgDatabase::open(url).await?);
        Ok(Database {
            jobs: db.clone(),
            capsules: db.clone(),
            policies: db.clone(),
            playgrounds: db.clone(),
            retention: db.clone(),
            sessions: db.clone(),
            uploads: db.clone(),
            coord: db,
            backend: Backend::Postgres,
        })
    }

    /// PostgreSQL when `url` is set, else SQLite at `sqlite_path`.
    pub async fn open(url: Option<&str>, sqlite_path: &Path) -> Result<Self, StoreError> {
        match url {
            Some(url) => Self::open_postgres(url).await,
            None => Self::open_sqlite(sqlite_path),
        }
    }
}
