//! Group commit for the SQLite backend (issue 19): writes that arrive while another
//! batch is being made durable share the next transaction, so N concurrent submissions
//! (or the dispatcher's concurrent transitions) cost one `fsync`, not N.
//!
//! One writer thread per database takes every write queued so far (at most
//! [`MAX_BATCH`]), runs them in one `BEGIN IMMEDIATE` transaction, each inside its own
//! `SAVEPOINT` — a write that fails (a lost compare-and-set, a fenced epoch, a
//! duplicate id) is rolled back alone and its caller gets its own error, the others
//! still commit — and answers each caller only after `COMMIT` returned: an
//! acknowledged write is as durable as it was with one transaction per write
//! (`synchronous=FULL`). When the batch's transaction is lost (the commit fails, or
//! SQLite rolled the whole transaction back after an I/O or full-disk error inside one
//! write) every write of the batch gets an error and nothing of it is stored.
//!
//! Waiting for company, as PostgreSQL's `commit_delay`/`commit_siblings` do: the first
//! write of an idle writer (its previous batch had one write) starts at once, so a lone
//! or sequential caller pays nothing; once writes arrive concurrently (the previous
//! batch had several), a batch waits up to [`COMMIT_DELAY`] for more before it begins.
//! A commit's `fsync` costs the same whatever the commit carries, so under load fewer,
//! larger commits free CPU for the requests themselves.
//! Measured with `tests/load/drain.sh` (12 000 submissions, alternated): about half the
//! `fsync`s, 4–11 % more RayJobs created a second.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::answer::BoxError;
use crate::store::StoreError;
use crate::store::error::Cause;

/// The most writes one transaction takes (bounds how long readers wait for the lock).
pub(super) const MAX_BATCH: usize = 128;

/// How long a batch waits for more writes once writes arrive concurrently (the module
/// header says when): a little more latency for each write under load, fewer commits.
pub(super) const COMMIT_DELAY: Duration = Duration::from_millis(2);

/// A write staged in the batch's transaction: whether it succeeded, and how to answer
/// its caller once the batch's outcome is known.
struct Staged {
    ok: bool,
    answer: Box<dyn FnOnce(Option<StoreError>) + Send>,
}

/// A queued write: runs on the writer thread inside the batch's transaction, or, given
/// no connection, is staged unrun (its batch is failing) so it can be answered.
type Op = Box<dyn FnOnce(Option<&Connection>) -> Staged + Send>;

/// The sending side; the writer thread ends when every clone is dropped.
#[derive(Clone)]
pub(super) struct Writer {
    queue: mpsc::Sender<Op>,
}

impl Writer {
    /// Starts the writer thread for `conn`, waiting up to [`COMMIT_DELAY`] for company.
    pub(super) fn start(conn: Arc<Mutex<Connection>>) -> Result<Self, StoreError> {
        Self::start_with_delay(conn, COMMIT_DELAY)
    }

    /// [`Writer::start`] with another commit delay (zero: never wait).
    pub(super) fn start_with_delay(
        conn: Arc<Mutex<Connection>>,
        delay: Duration,
    ) -> Result<Self, StoreError> {
        let (queue, ops) = mpsc::channel::<Op>();
        std::thread::Builder::new()
            .name("forge-sqlite-writer".into())
            .spawn(move || run(&conn, &ops, delay))
            .map_err(|e| StoreError::task(format!("start the store writer: {e}")))?;
        Ok(Self { queue })
    }

    /// Runs `f` in the next batch; its result once the batch committed.
    pub(super) async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let op: Op = Box::new(move |conn: Option<&Connection>| {
            let result = match conn {
                Some(conn) => catch_unwind(AssertUnwindSafe(|| f(conn)))
                    .unwrap_or_else(|_| Err(StoreError::task("a store write panicked"))),
                None => Err(StoreError::task("not run")),
            };
            Staged {
                ok: result.is_ok(),
                answer: Box::new(move |lost: Option<StoreError>| {
                    let _ = tx.send(match lost {
                        Some(e) => Err(e),
                        None => result,
                    });
                }),
            }
        });
        let stopped = || StoreError::task("the store writer has stopped");
        self.queue.send(op).map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?
    }
}

/// The writer thread: one batch per turn until every sender is gone.
fn run(conn: &Mutex<Connection>, ops: &mpsc::Receiver<Op>, delay: Duration) {
    // Whether the previous batch had company (writes are arriving concurrently).
    let mut busy = false;
    while let Ok(first) = ops.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match ops.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        if busy && !delay.is_zero() {
            let until = Instant::now() + delay;
            while batch.len() < MAX_BATCH {
                let left = until.saturating_duration_since(Instant::now());
                match ops.recv_timeout(left) {
                    Ok(op) => batch.push(op),
                    Err(_) => break,
                }
            }
        }
        busy = batch.len() > 1;
        match conn.lock() {
            Ok(guard) => commit_batch(&guard, batch),
            Err(_) => fail_unrun(batch, || StoreError::task("store mutex poisoned")),
        }
    }
}

/// Answers every write of a batch that did not run with the same error.
fn fail_unrun(batch: Vec<Op>, error: impl Fn() -> StoreError) {
    for op in batch {
        (op(None).answer)(Some(error()));
    }
}

/// Runs one batch in one transaction and answers each caller.
fn commit_batch(conn: &Connection, batch: Vec<Op>) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let cause: Cause = Arc::new(e);
        fail_unrun(batch, || StoreError::Backend(cause.clone()));
        return;
    }
    let mut staged = Vec::with_capacity(batch.len());
    let mut lost: Option<Cause> = None;
    for op in batch {
        if lost.is_some() {
            staged.push(op(None));
            continue;
        }
        if let Err(e) = conn
            .prepare_cached("SAVEPOINT forge_write")
            .and_then(|mut st| st.execute([]))
        {
            lost = Some(Arc::new(e));
            staged.push(op(None));
            continue;
        }
        let s = op(Some(conn));
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (I/O error, disk full,
            // interrupted): what the batch wrote before is gone too.
            lost = Some(Arc::from(BoxError::from(
                "the transaction was rolled back by the database",
            )));
        } else {
            let end = if s.ok {
                conn.prepare_cached("RELEASE forge_write")
                    .and_then(|mut st| st.execute([]))
                    .map(drop)
            } else {
                conn.execute_batch("ROLLBACK TO forge_write; RELEASE forge_write")
            };
            if let Err(e) = end {
                lost = Some(Arc::new(e));
            }
        }
        staged.push(s);
    }
    if lost.is_none()
        && let Err(e) = conn.execute_batch("COMMIT")
    {
        lost = Some(Arc::new(e));
    }
    if let Some(why) = lost {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        tracing::warn!(
            writes = staged.len(),
            "a store batch was not committed: {why}"
        );
        for s in staged {
            (s.answer)(Some(StoreError::NotCommitted(why.clone())));
        }
        return;
    }
    for s in staged {
        (s.answer)(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> (tempfile::TempDir, Arc<Mutex<Connection>>, Writer) {
        db_with_delay(COMMIT_DELAY)
    }

    fn db_with_delay(delay: Duration) -> (tempfile::TempDir, Arc<Mutex<Connection>>, Writer) {
        let dir = tempfile::tempdir().expect("tempdir");
        let conn = Connection::open(dir.path().join("t.db")).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
        )
        .expect("schema");
        let conn = Arc::new(Mutex::new(conn));
        let writer = Writer::start_with_delay(conn.clone(), delay).expect("writer");
        (dir, conn, writer)
    }

    fn insert(writer: &Writer, k: &str) -> impl Future<Output = Result<(), StoreError>> + use<> {
        let k = k.to_string();
        let writer = writer.clone();
        async move {
            writer
                .write(move |c| {
                    c.execute("INSERT INTO t (k, v) VALUES (?1, 1)", [&k])?;
                    // A second statement, so a failed write has something to undo.
                    c.execute("UPDATE t SET v = v + 1 WHERE k = ?1", [&k])?;
                    Ok(())
                })
                .await
        }
    }

    fn rows(conn: &Mutex<Connection>) -> Vec<(String, i64)> {
        let c = conn.lock().expect("lock");
        let mut st = c.prepare("SELECT k, v FROM t ORDER BY k").expect("prepare");
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_all_commit_and_a_failing_one_fails_alone() {
        let (_dir, conn, writer) = db();
        // 200 concurrent writes, one of each pair a duplicate key: the duplicates fail
        // with their own error, every other write commits (whatever batches they share).
        let mut handles = Vec::new();
        for i in 0..200 {
            let key = format!("k{}", i / 2);
            handles.push(tokio::spawn(insert(&writer, &key)));
        }
        let mut ok = 0;
        let mut duplicate = 0;
        for h in handles {
            match h.await.expect("join") {
                Ok(()) => ok += 1,
                Err(StoreError::Backend(e))
                    if e.downcast_ref::<rusqlite::Error>()
                        .and_then(|e| e.sqlite_error_code())
                        == Some(rusqlite::ErrorCode::ConstraintViolation) =>
                {
                    duplicate += 1
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!((ok, duplicate), (100, 100));
        let rows = rows(&conn);
        assert_eq!(rows.len(), 100);
        // Each committed write ran both statements; no failed one left a trace.
        assert!(rows.iter().all(|(_, v)| *v == 2), "{rows:?}");
    }

    #[tokio::test]
    async fn a_write_that_panics_is_an_error_and_the_writer_goes_on() {
        let (_dir, conn, writer) = db();
        let panicked = writer
            .write(|c| -> Result<(), StoreError> {
                c.execute("INSERT INTO t (k, v) VALUES ('p', 1)", [])?;
                panic!("boom")
            })
            .await;
        assert!(matches!(panicked, Err(StoreError::Task(_))), "{panicked:?}");
        insert(&writer, "after")
            .await
            .expect("the writer still works");
        assert_eq!(rows(&conn), vec![("after".to_string(), 2)]);
    }

    #[tokio::test]
    async fn a_lost_transaction_fails_every_write_of_its_batch() {
        let (_dir, conn, writer) = db();
        // A write that ends the transaction itself stands in for SQLite rolling it back
        // (disk full, I/O error): the batch is lost and every caller is told so.
        let lost = writer
            .write(|c| {
                c.execute("INSERT INTO t (k, v) VALUES ('gone', 1)", [])?;
                c.execute_batch("ROLLBACK")?;
                Ok(())
            })
            .await;
        assert!(
            matches!(&lost, Err(StoreError::NotCommitted(_))),
            "{lost:?}"
        );
        assert!(rows(&conn).is_empty());
        insert(&writer, "next")
            .await
            .expect("the next batch commits");
        assert_eq!(rows(&conn).len(), 1);
    }

    /// Makes the writer busy: a write held open on the writer thread while two more
    /// queue behind it, so the next batch carries two.
    async fn make_busy(writer: &Writer, tag: &str) {
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::spawn({
            let writer = writer.clone();
            async move {
                writer
                    .write(move |_| {
                        let _ = started_tx.send(());
                        let _ = go_rx.recv();
                        Ok(())
                    })
                    .await
            }
        });
        tokio::task::spawn_blocking(move || started_rx.recv())
            .await
            .expect("join")
            .expect("the held write started");
        // Polled once, each write is sent: both queue behind the held one (the channel
        // is FIFO), so once it finishes they share the next batch.
        let mut a = Box::pin(insert(writer, &format!("{tag}-a")));
        let mut b = Box::pin(insert(writer, &format!("{tag}-b")));
        assert!(futures::poll!(&mut a).is_pending());
        assert!(futures::poll!(&mut b).is_pending());
        go_tx.send(()).expect("release");
        held.await.expect("join").expect("held write");
        a.await.expect("a");
        b.await.expect("b");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_concurrency_a_batch_waits_for_company() {
        let (dir, conn, writer) = db_with_delay(Duration::from_secs(1));
        make_busy(&writer, "warm").await;
        let first = tokio::spawn(insert(&writer, "first"));
        // Later than an immediate commit of the first write would take, well within
        // the delay: the second write still joins the first one's transaction, so
        // another connection does not see the first row yet while the second runs.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let reader = Connection::open(dir.path().join("t.db")).expect("reader");
        let second = writer.write(move |c| {
            c.execute("INSERT INTO t (k, v) VALUES ('second', 2)", [])?;
            let committed: i64 =
                reader.query_row("SELECT count(*) FROM t WHERE k = 'first'", [], |r| r.get(0))?;
            Ok(committed)
        });
        let committed_before = second.await.expect("second");
        first.await.expect("join").expect("first");
        assert_eq!(
            committed_before, 0,
            "a write that arrives within the delay shares the busy writer's next transaction"
        );
        assert_eq!(rows(&conn).len(), 4);
    }

    #[tokio::test]
    async fn an_idle_writer_commits_a_lone_write_without_waiting() {
        // A delay no test would wait out: a lone write after a lone write never waits.
        let (_dir, _conn, writer) = db_with_delay(Duration::from_secs(3600));
        for k in ["one", "two", "three"] {
            tokio::time::timeout(Duration::from_secs(30), insert(&writer, k))
                .await
                .expect("a lone write on an idle writer waited for company")
                .expect("insert");
        }
    }
}
