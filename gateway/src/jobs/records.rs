//! The dispatcher's copy of the records of unfinished jobs. A pass needs every queued
//! and every active job; reading them all (and parsing each spec) every pass costs more
//! than the rest of a pass over a long queue. What a pass needs of a job does not change
//! while its state does not (a queued job's spec is fixed; an active job's placement is
//! set when it is dispatched), so a pass lists only ids and states
//! ([`JobStore::unfinished`]) and reads the records that are new or whose state moved
//! ([`JobStore::get_many`]). When the store can tell that nothing was written since the
//! last listing ([`JobStore::change_version`]: SQLite's `data_version`, which sees the
//! commits of every connection and process), the last pass's jobs are the answer and
//! the store is not listed at all: an idle pass over 10 000 queued jobs spent about
//! half its time listing them. The copy lives as long as the [`Jobs`] it belongs to;
//! only the dispatcher task uses it, one pass at a time.

use std::sync::{Arc, Mutex};

use crate::domain::JobState;
use crate::store::{JobRecord, JobStore, StoreError};

/// Records by id, and the last answer with the store's change version it was read at.
#[derive(Debug, Default)]
pub struct RecordCache {
    records: Mutex<rustc_hash::FxHashMap<String, Arc<JobRecord>>>,
    /// The last answer, valid while the store's change version is the one kept.
    last: Mutex<Option<(u64, Unfinished)>>,
}

/// The unfinished jobs of one pass, in queue order.
#[derive(Debug, Default, Clone)]
pub struct Unfinished {
    pub queued: Vec<Arc<JobRecord>>,
    pub active: Vec<Arc<JobRecord>>,
    /// Records read from the store this time (the rest came from the copy).
    pub read: usize,
    /// Whether the store was listed this time (false: nothing was written since the
    /// last listing, whose jobs these are).
    pub listed: bool,
}

impl RecordCache {
    /// The unfinished jobs now, reading only what changed since the last call. A
    /// cache is used with one store (its change version is that store's own).
    pub async fn unfinished(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        // Read before the listing: a write between the two shows as a change next time.
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
        let out = self.list(store).await;
        *lock(&self.last) = match (&out, version) {
            (Ok(out), Some(version)) => Some((version, out.clone())),
            _ => None,
        };
        out
    }

    /// Lists the store and reads the records that are new or moved.
    async fn list(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        let listed = store.unfinished().await?;
        let mut known = std::mem::take(&mut *lock(&self.records));
        let missing: Vec<String> = listed
            .iter()
            .filter(|(id, state)| known.get(id).is_none_or(|r| r.state != *state))
            .map(|(id, _)| id.clone())
            .collect();
        let read = missing.len();
        if !missing.is_empty() {
            for record in store.get_many(missing).await? {
                known.insert(record.id.clone(), Arc::new(record));
            }
        }
        let mut out = Unfinished {
            read,
            listed: true,
            ..Unfinished::default()
        };
        let mut kept = rustc_hash::FxHashMap::default();
        kept.reserve(listed.len());
        for (id, _) in listed {
            // A record read just now may be newer than the listing (the job moved
            // between the two reads): it goes where its own state says.
            let Some(record) = known.remove(&id) else {
                continue;
            };
            match record.state {
                JobState::Queued => out.queued.push(record.clone()),
                s if s.is_terminal() => continue,
                _ => out.active.push(record.clone()),
            }
            kept.insert(id, record);
        }
        *lock(&self.records) = kept;
        Ok(out)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Database;
    use crate::store::conformance::jobs::{new_job, t};

    fn ids(jobs: &[Arc<JobRecord>]) -> Vec<String> {
        jobs.iter().map(|j| j.id.clone()).collect()
    }

    /// Nothing written: the last pass's jobs, without listing. Anything written, by
    /// this handle or another process's: listed again, and the change is seen.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lists_again_only_after_a_write_by_anyone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("forge.sqlite3");
        let (a, b) = (
            Database::open_sqlite(&path).expect("a"),
            Database::open_sqlite(&path).expect("b"),
        );
        let first = a
            .jobs
            .insert(new_job("t", "one", "h200"), None)
            .await
            .expect("insert");
        let cache = RecordCache::default();

        let u = cache.unfinished(a.jobs.as_ref()).await.expect("unfinished");
        assert!(u.listed);
        assert_eq!((ids(&u.queued), u.read), (vec![first.id.clone()], 1));
        let u = cache.unfinished(a.jobs.as_ref()).await.expect("unfinished");
        assert!(!u.listed, "nothing was written: no listing");
        assert_eq!((ids(&u.queued), u.read), (vec![first.id.clone()], 0));

        // Another process queues a job.
        let second = b
            .jobs
            .insert(new_job("t", "two", "h200"), None)
            .await
            .expect("insert");
        let u = cache.unfinished(a.jobs.as_ref()).await.expect("unfinished");
        assert!(u.listed);
        assert_eq!(ids(&u.queued), vec![first.id.clone(), second.id.clone()]);
        assert_eq!(u.read, 1);

        // This process dispatches the first.
        a.jobs
            .transition(t(&first.id, JobState::Queued, JobState::Dispatched))
            .await
            .expect("transition");
        let u = cache.unfinished(a.jobs.as_ref()).await.expect("unfinished");
        assert!(u.listed);
        assert_eq!(ids(&u.queued), vec![second.id.clone()]);
        assert_eq!(ids(&u.active), vec![first.id]);
    }
}
