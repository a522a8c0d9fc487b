//! The SQLite backend (bundled SQLite through `rusqlite`), the embedded default for a
//! single gateway: one connection shared by the job, capsule-ownership, policy and
//! coordination stores, migrated at open, every query on the blocking pool so the async
//! runtime never waits on disk. Policy changes of other processes are found by polling
//! (no notifications).
//!
//! Durability: WAL journal with `synchronous=FULL`, so each commit's WAL frames are
//! fsynced before a write returns — an acknowledged submission survives a process
//! crash *and* a power loss. One connection behind a mutex serializes writers; the lock
//! is only taken inside `spawn_blocking` or the writer thread, never across an
//! `.await`. The hot writes (submissions, transitions, decisions, capsule use) go
//! through group commit (`group_commit.rs`): writes that queue up behind a commit share
//! the next transaction and its fsync. Several processes
//! may open the same file (tests run two gateways on one data directory); SQLite's
//! locking and `IMMEDIATE` transactions keep their compare-and-sets correct.

mod capsules;
mod coord;
mod group_commit;
mod jobs;
pub mod migrations;
mod playgrounds;
mod policies;
mod retention;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::StoreError;

/// The SQLite database: both stores over one connection.
#[derive(Clone)]
pub struct SqliteDatabase {
    conn: Arc<Mutex<Connection>>,
    writer: group_commit::Writer,
}

impl std::fmt::Debug for SqliteDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SqliteDatabase")
    }
}

impl SqliteDatabase {
    /// Opens (creating if needed) the database file and migrates it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        if let Some(parent) = path.as_ref().parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Task(format!("create {}: {e}", parent.display())))?;
        }
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::migrate(&mut conn)?;
        let conn = Arc::new(Mutex::new(conn));
        Ok(Self {
            writer: group_commit::Writer::start(conn.clone())?,
            conn,
        })
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::Task("store mutex poisoned".into()))?;
        Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| StoreError::Task("store mutex poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Runs the write `f` in the next group-commit batch (inside a transaction of its
    /// own savepoint: `f` must not begin one); answered once the batch committed.
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.writer.write(f).await
    }
}
