//! The jobs whose dispatch is in flight in this process: their intent (queued →
//! dispatched, with the RayJob's name) is stored or about to be, and the RayJob create
//! has not returned yet.
//!
//! The lifecycle controller's reconcile after a (re)list queues again a `dispatched`
//! job whose RayJob does not exist — the intent of a leader that died before its create.
//! The same leader's own dispatch in flight looks exactly like that (a create that has
//! not reached the API server yet), so reconcile skips the jobs listed here: their
//! create's own outcome decides (a failed create puts the job back in the queue).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

/// Job ids with a dispatch in flight.
#[derive(Debug, Default)]
pub struct Creating {
    ids: Mutex<HashSet<String>>,
}

/// Holds a job's place in [`Creating`] until dropped (the create returned, failed, or
/// the task was cancelled).
#[derive(Debug)]
pub struct CreatingGuard {
    set: Arc<Creating>,
    id: String,
}

impl Creating {
    /// Marks `id` in flight until the guard is dropped.
    pub fn begin(self: &Arc<Self>, id: &str) -> CreatingGuard {
        self.lock().insert(id.to_string());
        CreatingGuard {
            set: self.clone(),
            id: id.to_string(),
        }
    }

    /// Whether `id`'s dispatch is in flight in this process.
    pub fn contains(&self, id: &str) -> bool {
        self.lock().contains(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for CreatingGuard {
    fn drop(&mut self) {
        self.set.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_in_flight_while_its_guard_lives() {
        let set = Arc::new(Creating::default());
        let a = set.begin("job-a");
        let b = set.begin("job-b");
        assert!(set.contains("job-a") && set.contains("job-b"));
        drop(a);
        assert!(!set.contains("job-a"));
        assert!(set.contains("job-b"));
        drop(b);
        assert!(!set.contains("job-b"));
    }
}
