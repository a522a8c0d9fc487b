//! The dispatcher's copy of the records of unfinished jobs. A pass needs every queued
//! and every active job; reading them all (and parsing each spec) every pass costs more
//! than the rest of a pass over a long queue. What a pass needs of a job does not change
//! while its state does not (a queued job's spec is fixed; an active job's placement is
//! set when it is dispatched), and every change of state writes a row of the job feed
//! (`store/job_feed.rs`, read by position in commit order on both backends). So:
//! - when the store can tell that nothing was written since the last pass
//!   ([`JobStore::change_version`]), the last pass's jobs are the answer, read from
//!   nowhere;
//! - otherwise the copy reads the feed after the position it is current to
//!   ([`JobStore::changes_since`]) and re-reads the records of the jobs named there
//!   ([`JobStore::get_many`]): a pass after one change reads one feed row and one
//!   record, however long the queue (issue 39: at 10 000 queued, the reading step
//!   of such a pass went from 15 ms to 8 ms, most of the rest not the store;
//!   `tests/bench/README.md`);
//! - the first time, or when more changed than the copy holds (read from the feed in
//!   pages of [`MAX_CHANGES_READ`], at least one), it lists the ids of every
//!   unfinished job ([`JobStore::unfinished`]) and reads all their records afresh (a
//!   record kept from before may be stale even when its state is the same again: a
//!   job that went round, dispatched and back to the queue), remembering the feed's
//!   head read *before* the listing (a write in between is read again next time, which
//!   changes nothing).
//!
//! The copy lives as long as the [`Jobs`] it belongs to. The leader's dispatcher and,
//! on a replica that is not the leader, the follower's standings use it, one read at a
//! time each; around a change of leader the two may overlap, which only moves the
//! position back (the changes after it are read again).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::domain::JobState;
use crate::store::job_feed::MAX_CHANGES_READ;
use crate::store::{JobRecord, JobStore, StoreError, StoredChange};

/// The copy, and the last answer with the store's change version it was read at.
#[derive(Debug, Default)]
pub struct RecordCache {
    records: Mutex<Records>,
    /// The last answer, valid while the store's change version is the one kept.
    last: Mutex<Option<(u64, Unfinished)>>,
}

/// The unfinished jobs' records in queue order, and the feed position they are
/// current to.
#[derive(Debug, Default)]
struct Records {
    /// The feed position read before the listing or the last change applied since;
    /// `None` until the store was listed once.
    at: Option<i64>,
    /// Records by their submission sequence (queue order).
    by_seq: BTreeMap<i64, Arc<JobRecord>>,
    /// Each job's sequence.
    seq_of: rustc_hash::FxHashMap<String, i64>,
}

/// The unfinished jobs of one pass, in queue order.
#[derive(Debug, Default, Clone)]
pub struct Unfinished {
    pub queued: Vec<Arc<JobRecord>>,
    pub active: Vec<Arc<JobRecord>>,
    /// Records read from the store this time (the rest came from the copy).
    pub read: usize,
    /// Whether every unfinished job was listed this time (false: the copy was brought
    /// up to date from the feed, or nothing was written since the last pass).
    pub listed: bool,
}

impl RecordCache {
    /// The unfinished jobs now, reading only what changed since the last call. A
    /// cache is used with one store (its change version and feed are that store's).
    pub async fn unfinished(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        // Read before the data: a write between the two shows as a change next time.
        let version = store.change_version().await?;
        if let Some(version) = version
            && let Some((at, last)) = lock(&self.last).as_ref()
            && *at == version
        {
            return Ok(Unfinished {
                read: 0,
                listed: false,
                ..last.clone()
            });
        }
        let out = self.read(store).await;
        *lock(&self.last) = match (&out, version) {
            (Ok(out), Some(version)) => Some((version, out.clone())),
            _ => None,
        };
        out
    }

    /// Brings the copy up to date: from the feed when it can, by listing otherwise.
    async fn read(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        let (at, held) = {
            let copy = lock(&self.records);
            (copy.at, copy.by_seq.len())
        };
        let Some(at) = at else {
            return self.list(store).await;
        };
        // Page through the feed while it is cheaper than listing: until fewer changes
        // than the copy holds (and at least one page) have been read.
        let mut changes = Vec::new();
        loop {
            let after = changes.last().map_or(at, |c: &StoredChange| c.position);
            let page = store.changes_since(after, MAX_CHANGES_READ).await?;
            let full = page.len() >= MAX_CHANGES_READ as usize;
            changes.extend(page);
            if !full {
                return self.apply(store, at, changes).await;
            }
            if changes.len() >= held.max(MAX_CHANGES_READ as usize) {
                return self.list(store).await;
            }
        }
    }

    /// Re-reads the jobs the feed's `changes` (all of them after `at`) name.
    async fn apply(
        &self,
        store: &dyn JobStore,
        at: i64,
        changes: Vec<StoredChange>,
    ) -> Result<Unfinished, StoreError> {
        let position = changes.last().map_or(at, |c| c.position);
        let mut ids: Vec<String> = changes.into_iter().map(|c| c.job_id).collect();
        ids.sort_unstable();
        ids.dedup();
        let read = ids.len();
        let records = if ids.is_empty() {
            Vec::new()
        } else {
            store.get_many(ids.clone()).await?
        };
        let mut copy = lock(&self.records);
        // A job named in the feed but gone from the store (deleted) leaves the copy.
        for id in &ids {
            copy.remove(id);
        }
        for record in records {
            copy.keep(Arc::new(record));
        }
        copy.at = Some(position);
        Ok(copy.answer(read, false))
    }

    /// Lists the store's unfinished jobs and reads all their records.
    async fn list(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        // Forget the position first: a listing cut short (an error, an aborted pass)
        // must not leave a copy the feed would go on mending.
        lock(&self.records).at = None;
        let head = store.changes_head().await?;
        let ids: Vec<String> = store
            .unfinished()
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let read = ids.len();
        let records = if ids.is_empty() {
            Vec::new()
        } else {
            store.get_many(ids).await?
        };
        let mut copy = Records {
            at: Some(head),
            ..Records::default()
        };
        // A record read just now may be newer than the listing (the job moved or
        // ended between the two reads): it goes where its own state says.
        for record in records {
            copy.keep(Arc::new(record));
        }
        let out = copy.answer(read, true);
        *lock(&self.records) = copy;
        Ok(out)
    }
}

impl Records {
    /// Keeps a record if its job has not ended (in place of the one it had).
    fn keep(&mut self, record: Arc<JobRecord>) {
        self.remove(&record.id);
        if !record.state.is_terminal() {
            self.seq_of.insert(record.id.clone(), record.seq);
            self.by_seq.insert(record.seq, record);
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(seq) = self.seq_of.remove(id) {
            self.by_seq.remove(&seq);
        }
    }

    /// The queued and the active jobs, each in queue order.
    fn answer(&self, read: usize, listed: bool) -> Unfinished {
        let mut out = Unfinished {
            read,
            listed,
            ..Unfinished::default()
        };
        for record in self.by_seq.values() {
            match record.state {
                JobState::Queued => out.queued.push(record.clone()),
                _ => out.active.push(record.clone()),
            }
        }
        out
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::jobs::{new_job, t};
    use crate::store::conformance::{Harness, postgres, sqlite};

    /// Runs each case on both backends (`<case>::sqlite`, `<case>::postgres`).
    macro_rules! on_both {
        ($($case:ident),* $(,)?) => {$(
            mod $case {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$case(&super::sqlite()).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$case(&super::postgres()).await;
                }
            }
        )*};
    }

    on_both!(
        reads_only_what_the_feed_names_after_a_write_by_anyone,
        more_than_a_page_of_changes_is_read_from_the_feed_in_pages,
        a_job_back_in_the_queue_keeps_its_place,
        many_changes_list_and_read_everything_again,
    );
    use crate::store::{Database, Transition};

    fn ids(jobs: &[Arc<JobRecord>]) -> Vec<String> {
        jobs.iter().map(|j| j.id.clone()).collect()
    }

    async fn read(cache: &RecordCache, db: &Database) -> Unfinished {
        cache
            .unfinished(db.jobs.as_ref())
            .await
            .expect("unfinished")
    }

    async fn queue(db: &Database, name: &str) -> String {
        let job = new_job("t", name, "h200");
        db.jobs.insert(job, None).await.expect("insert").id
    }

    async fn moved(db: &Database, id: &str, from: JobState, to: JobState) {
        db.jobs
            .transition(t(id, from, to))
            .await
            .expect("transition");
    }

    /// Nothing written: the last pass's jobs, without reading. Anything written, by
    /// this handle or another replica's: the feed is read from where the copy was,
    /// only the jobs it names are read, and the change is seen; nothing is listed.
    async fn reads_only_what_the_feed_names_after_a_write_by_anyone(h: &dyn Harness) {
        let (a, b) = (h.open().await, h.open().await);
        let first = queue(&a, "one").await;
        let cache = RecordCache::default();

        let u = read(&cache, &a).await;
        assert!(u.listed, "the first time, every unfinished job is listed");
        assert_eq!((ids(&u.queued), u.read), (vec![first.clone()], 1));
        let u = read(&cache, &a).await;
        assert!(!u.listed, "nothing was written: no listing");
        assert_eq!((ids(&u.queued), u.read), (vec![first.clone()], 0));

        // Another process queues a job.
        let second = queue(&b, "two").await;
        let u = read(&cache, &a).await;
        assert!(!u.listed, "one change: read from the feed");
        assert_eq!(ids(&u.queued), vec![first.clone(), second.clone()]);
        assert_eq!(u.read, 1, "only the new job's record is read");

        // This process dispatches the first; another ends the second.
        moved(&a, &first, JobState::Queued, JobState::Dispatched).await;
        moved(&b, &second, JobState::Queued, JobState::Cancelled).await;
        let u = read(&cache, &a).await;
        assert!(!u.listed);
        assert_eq!((ids(&u.queued), ids(&u.active)), (vec![], vec![first]));
        assert_eq!(u.read, 2);
    }

    /// A job that goes back to the queue (its create failed, or it was preempted)
    /// takes its old place, ahead of jobs submitted after it.
    async fn a_job_back_in_the_queue_keeps_its_place(h: &dyn Harness) {
        let db = h.open().await;
        let cache = RecordCache::default();
        let mut queued = Vec::new();
        for name in ["one", "two", "three"] {
            queued.push(queue(&db, name).await);
        }
        assert!(read(&cache, &db).await.listed);
        moved(&db, &queued[0], JobState::Queued, JobState::Dispatched).await;
        assert_eq!(ids(&read(&cache, &db).await.queued), queued[1..].to_vec());
        moved(&db, &queued[0], JobState::Dispatched, JobState::Queued).await;
        let u = read(&cache, &db).await;
        assert!(!u.listed);
        assert_eq!((ids(&u.queued), u.active.len()), (queued, 0));
    }

    /// More than a page of changes, but fewer than the copy holds: still read from
    /// the feed, page after page, and only the jobs named there.
    async fn more_than_a_page_of_changes_is_read_from_the_feed_in_pages(h: &dyn Harness) {
        let db = h.open().await;
        let cache = RecordCache::default();
        let held = MAX_CHANGES_READ as usize + 100;
        for i in 0..held {
            queue(&db, &format!("held-{i}")).await;
        }
        assert!(read(&cache, &db).await.listed);
        for i in 0..MAX_CHANGES_READ + 50 {
            queue(&db, &format!("new-{i}")).await;
        }
        let u = read(&cache, &db).await;
        let changed = MAX_CHANGES_READ as usize + 50;
        assert_eq!(
            (u.listed, u.read),
            (false, changed),
            "two pages of the feed"
        );
        assert_eq!(u.queued.len(), held + changed);
        let fresh = read(&RecordCache::default(), &db).await;
        assert_eq!(ids(&u.queued), ids(&fresh.queued));
    }

    /// More changes than the copy holds (and than one page of the feed): every
    /// unfinished job is listed and read again, and the answer is a fresh copy's — a
    /// job that went round to the same state meanwhile included.
    async fn many_changes_list_and_read_everything_again(h: &dyn Harness) {
        let db = h.open().await;
        let cache = RecordCache::default();
        let first = queue(&db, "first").await;
        assert!(read(&cache, &db).await.listed);
        // Dispatched, its create failed, queued again: the same state, a new reason.
        moved(&db, &first, JobState::Queued, JobState::Dispatched).await;
        let back = Transition::new(
            &first,
            JobState::Dispatched,
            JobState::Queued,
            Some("again".into()),
        );
        db.jobs.transition(back).await.expect("requeue");
        for i in 1..MAX_CHANGES_READ {
            queue(&db, &format!("j{i}")).await;
        }
        let u = read(&cache, &db).await;
        assert!(u.listed, "{} changes: listed", MAX_CHANGES_READ + 1);
        assert_eq!(u.queued[0].reason.as_deref(), Some("again"), "read afresh");
        let fresh = read(&RecordCache::default(), &db).await;
        assert_eq!(ids(&u.queued), ids(&fresh.queued));
        assert_eq!(u.queued.len(), MAX_CHANGES_READ as usize);
        // And from there on, the feed again.
        queue(&db, "last").await;
        let u = read(&cache, &db).await;
        let size = MAX_CHANGES_READ as usize + 1;
        assert_eq!((u.listed, u.read, u.queued.len()), (false, 1, size));
    }
}
