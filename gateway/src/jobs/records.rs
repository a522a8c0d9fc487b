//! The dispatcher's copy of the records of unfinished jobs. A pass needs every queued
//! and every active job; reading them all (and parsing each spec) every pass costs more
//! than the rest of a pass over a long queue. What a pass needs of a job does not change
//! while its state does not (a queued job's spec is fixed; an active job's placement is
//! set when it is dispatched), so a pass lists only ids and states
//! ([`JobStore::unfinished`]) and reads the records that are new or whose state moved
//! ([`JobStore::get_many`]). The copy lives as long as the [`Jobs`] it belongs to; only
//! the dispatcher task uses it, one pass at a time.

use std::sync::{Arc, Mutex};

use crate::domain::JobState;
use crate::store::{JobRecord, JobStore, StoreError};

/// Records by id.
#[derive(Debug, Default)]
pub struct RecordCache {
    records: Mutex<rustc_hash::FxHashMap<String, Arc<JobRecord>>>,
}

/// The unfinished jobs of one pass, in queue order.
#[derive(Debug, Default)]
pub struct Unfinished {
    pub queued: Vec<Arc<JobRecord>>,
    pub active: Vec<Arc<JobRecord>>,
    /// Records read from the store this time (the rest came from the copy).
    pub read: usize,
}

impl RecordCache {
    /// The unfinished jobs now, reading only what changed since the last call.
    pub async fn unfinished(&self, store: &dyn JobStore) -> Result<Unfinished, StoreError> {
        let listed = store.unfinished().await?;
        let mut known = std::mem::take(&mut *self.lock());
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
        *self.lock() = kept;
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, rustc_hash::FxHashMap<String, Arc<JobRecord>>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}
