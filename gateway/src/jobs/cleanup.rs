//! Concurrent clean-up of finished jobs: archive a job's logs, then delete its RayJob
//! (`lifecycle::archive_then_delete`), off the lifecycle controller's event loop.
//!
//! The controller handles watch events one at a time so that a RayJob's transitions
//! stay in order; archiving logs and deleting take several API and object-store calls,
//! and doing them inline made every finished job wait for all the ones before it. Here
//! each RayJob has at most one clean-up in flight (a second request while one runs is
//! dropped — the resync asks again if it failed) and at most [`PARALLEL`] run at once.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::DynamicObject;
use tokio::sync::Semaphore;

use super::lifecycle::archive_then_delete;
use crate::app::AppState;
use crate::store::JobRecord;

/// Clean-ups that may run at once.
const PARALLEL: usize = 16;

/// The clean-ups in flight.
#[derive(Debug)]
pub struct Cleanup {
    inflight: Mutex<HashSet<String>>,
    permits: Arc<Semaphore>,
}

impl Default for Cleanup {
    fn default() -> Self {
        Cleanup {
            inflight: Mutex::new(HashSet::new()),
            permits: Arc::new(Semaphore::new(PARALLEL)),
        }
    }
}

impl Cleanup {
    /// Archive `job`'s logs and delete its RayJob `obj` in the background, unless a
    /// clean-up of that RayJob is already running.
    pub fn start(self: &Arc<Self>, state: &AppState, job: JobRecord, obj: DynamicObject) {
        let name = obj.name_any();
        let fresh = self
            .inflight
            .lock()
            .is_ok_and(|mut set| set.insert(name.clone()));
        if !fresh {
            return;
        }
        let this = self.clone();
        let state = state.clone();
        tokio::spawn(async move {
            if let Ok(_permit) = this.permits.clone().acquire_owned().await
                && let Err(e) = archive_then_delete(&state, &job, &obj).await
            {
                tracing::warn!(job = %job.id, "clean-up (retried at the next resync): {e}");
            }
            if let Ok(mut set) = this.inflight.lock() {
                set.remove(&name);
            }
        });
    }
}
