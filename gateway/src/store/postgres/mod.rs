//! The PostgreSQL backend (`FORGE_DATABASE_URL=postgres://…`), for replicas sharing
//! one database: `tokio-postgres` with a `deadpool-postgres` pool, migrated at open
//! (once, under an advisory lock, however many replicas start at once).
//!
//! Same semantics as SQLite, by the same means where they exist: transitions are
//! compare-and-set `UPDATE … WHERE state = $n`; policy appends hold a per-scope
//! advisory lock, so two replicas cannot both move a scope; fenced writes read their
//! lease's epoch `FOR KEY SHARE` in their own transaction, so a takeover (which locks
//! that row `FOR UPDATE`) waits for them and every write after it sees the new epoch,
//! while the leader's renewals never wait for its own writes (`coord.rs`). Commits are
//! synchronous (the server's default), so an acknowledged submission is durable.
//!
//! Policy appends `NOTIFY forge_policy` and queued inserts `NOTIFY forge_queue` in
//! their transaction; each gateway `LISTEN`s on a dedicated connection ([`listen`]):
//! every replica re-reads the policy heads at once, and the leader's dispatcher wakes
//! for a job another replica queued — with polling as the fallback for both. Every
//! state change notifies `forge_jobs`, and each replica's job feed reads the stored
//! changes it has not seen (`store/job_feed.rs`).

mod capsules;
mod connect;
mod coord;
mod dispatch_journal;
mod job_feed;
mod jobs;
mod listen;
pub mod migrations;
mod playgrounds;
mod policies;
mod preemptions;
mod retention;
mod sessions;
mod upload_sessions;
mod usage;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::StoreError;

/// Connections a gateway keeps to the database at most.
const POOL_SIZE: usize = 16;
/// Longest a query waits for a free connection (or a new one).
const POOL_WAIT: Duration = Duration::from_secs(10);
/// The channel policy appends notify.
pub const POLICY_CHANNEL: &str = "forge_policy";
/// The channel inserts of queued jobs notify (the leader's dispatcher wakes).
pub const QUEUE_CHANNEL: &str = "forge_queue";
/// The channel every recorded state change notifies (each replica's job feed reads
/// the stored feed: `store/job_feed.rs`).
pub const JOBS_CHANNEL: &str = "forge_jobs";

/// The PostgreSQL database: both stores over one pool, and the policy-change feed.
#[derive(Clone)]
pub struct PgDatabase {
    pool: Pool,
    feeds: listen::Feeds,
}

impl std::fmt::Debug for PgDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgDatabase")
    }
}

/// Whether `e` says the database cannot be reached now rather than that it refused the
/// statement: the connection failed or closed (an I/O error underneath, including
/// `target_session_attrs=read-write` meeting a standby), or the server answered with a
/// connection exception (SQLSTATE class 08), an operator or crash shutdown, "cannot
/// connect now" (57P01–57P03), or a write refused in a read-only transaction (25006: a
/// standby).
fn unavailable(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006");
    }
    std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        if unavailable(&e) {
            StoreError::Unavailable(std::sync::Arc::new(e))
        } else {
            StoreError::backend(e)
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            // No connection within the wait, or none could be made or recycled.
            other => StoreError::Unavailable(std::sync::Arc::new(other)),
        }
    }
}

impl PgDatabase {
    /// Connects to `url`, migrates the schema and starts listening for policy changes.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let (cfg, tls) = connect::config(url)?;
        let manager = Manager::from_config(
            cfg.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .recycle_timeout(Some(POOL_WAIT))
            .build()
            .map_err(StoreError::backend)?;
        let db = PgDatabase {
            feeds: listen::spawn(cfg, tls),
            pool,
        };
        let mut client = db.pool.get().await?;
        migrations::migrate(&mut client).await?;
        Ok(db)
    }

    /// A pooled connection.
    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> Result<u32, StoreError> {
        let v: i32 = self
            .client()
            .await?
            .query_one("SELECT MAX(version) FROM schema_migrations", &[])
            .await?
            .get(0);
        Ok(u32::try_from(v).unwrap_or(0))
    }
}

/// The store's clock in Unix milliseconds, as SQL (every replica reads one clock).
const NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::Answers;
    use crate::store::JobStore;
    use crate::store::error::UNAVAILABLE_RETRY_S;

    /// A database that went away (its pooled connections closed, new ones refused) is
    /// `Unavailable` — a 503 to retry — on every call, never a backend error (a 500).
    #[tokio::test]
    async fn a_database_that_went_away_is_unavailable_not_an_internal_error() {
        let server = forge_testkit::postgres::PostgresServer::start();
        let db = PgDatabase::open(&server.database()).await.expect("open");
        assert!(db.get("nobody").await.expect("a live database").is_none());
        // Fast shutdown: the server ends every connection, then stops listening.
        drop(server);
        for call in 0..3 {
            match db.get("nobody").await {
                Err(e @ StoreError::Unavailable(_)) => {
                    let answer = e.answer();
                    assert_eq!(answer.status, http::StatusCode::SERVICE_UNAVAILABLE);
                    assert_eq!(answer.code, "store-unavailable");
                    assert_eq!(answer.retry_after, Some(UNAVAILABLE_RETRY_S));
                }
                other => panic!("call {call} to a stopped server: {other:?}"),
            }
        }
    }
}
