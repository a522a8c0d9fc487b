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
//! `.await`. The job store's reads go to [`READERS`] read-only connections of their
//! own: under WAL they read the last commit while the writer holds its lock through a
//! batch and its fsync, instead of queueing behind it (a read that follows an
//! acknowledged write sees it: the write was committed before it was answered). The
//! hot writes (submissions, transitions, decisions, capsule use) go through group
//! commit (`group_commit.rs`): writes that queue up behind a commit share the next
//! transaction and its fsync, and under load a batch waits a moment for more. Several processes
//! may open the same file (tests run two gateways on one data directory); SQLite's
//! locking and `IMMEDIATE` transactions keep their compare-and-sets correct.

mod capsules;
mod coord;
mod dispatch_journal;
mod group_commit;
mod job_feed;
mod jobs;
pub mod migrations;
mod playgrounds;
mod policies;
mod preemptions;
mod retention;
mod sessions;
mod upload_sessions;
mod usage;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::StoreError;

/// Read-only connections for the job store's reads (one per core here: a read holds
/// its connection only on the blocking pool).
const READERS: usize = 2;

/// Prepared statements kept per connection (the hot statements of every store fit).
const STATEMENT_CACHE: usize = 64;

/// The SQLite database: every store over one connection, the job store's reads over
/// [`READERS`] more.
#[derive(Clone)]
pub struct SqliteDatabase {
    conn: Arc<Mutex<Connection>>,
    readers: Arc<[Mutex<Connection>]>,
    /// A read-only connection that only reads the count of job writes (migration 18),
    /// so that the question never waits behind the job store's readers.
    version: Arc<Mutex<Connection>>,
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
                .map_err(|e| StoreError::task(format!("create {}: {e}", parent.display())))?;
        }
        let mut conn = Connection::open(path.as_ref())?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // Each write of a group-commit batch runs in its own SAVEPOINT, whose statement
        // journal SQLite spills to a temporary file past 64 KiB: kept in memory, a
        // batch makes no such writes (they were two thirds of the writer's `pwrite`s).
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        migrations::migrate(&mut conn)?;
        let read_only = || -> Result<Mutex<Connection>, StoreError> {
            let r = Connection::open(path.as_ref())?;
            r.pragma_update(None, "query_only", "ON")?;
            r.busy_timeout(std::time::Duration::from_secs(5))?;
            r.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            Ok(Mutex::new(r))
        };
        let readers = (0..READERS)
            .map(|_| read_only())
            .collect::<Result<Vec<_>, StoreError>>()?;
        let conn = Arc::new(Mutex::new(conn));
        Ok(Self {
            writer: group_commit::Writer::start(conn.clone())?,
            readers: readers.into(),
            version: Arc::new(read_only()?),
            conn,
        })
    }

    /// The count of committed writes to jobs and preemptions (any connection's, any
    /// process's: triggers keep it in the writing transaction, migration 18). Other
    /// tables' writes — leases, sessions, the usage ledger — do not move it.
    async fn job_writes(&self) -> Result<u64, StoreError> {
        blocking(Arc::clone(&self.version), |conn| {
            let v: i64 = conn
                .prepare_cached("SELECT count FROM job_writes WHERE id = 1")?
                .query_row([], |r| r.get(0))?;
            Ok(v.cast_unsigned())
        })
        .await
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<usize, StoreError> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| StoreError::task("store mutex poisoned"))?;
        Ok(conn.query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    /// Runs `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        blocking(Arc::clone(&self.conn), f).await
    }

    /// Runs the read `f` on a read-only connection on the blocking pool: one that is
    /// free if any, else the first.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let readers = Arc::clone(&self.readers);
        tokio::task::spawn_blocking(move || {
            let poisoned = || StoreError::task("store mutex poisoned");
            let free = readers.iter().find_map(|r| r.try_lock().ok());
            let guard = match free {
                Some(g) => g,
                None => readers[0].lock().map_err(|_| poisoned())?,
            };
            f(&guard)
        })
        .await
        .map_err(StoreError::task)?
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

/// Runs `f` with `conn` locked, on the blocking pool.
async fn blocking<T, F>(conn: Arc<Mutex<Connection>>, f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut guard = conn
            .lock()
            .map_err(|_| StoreError::task("store mutex poisoned"))?;
        f(&mut guard)
    })
    .await
    .map_err(StoreError::task)?
}
