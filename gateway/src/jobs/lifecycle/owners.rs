//! The jobs that own a list of Kubernetes objects (by their `forge.dev/job-id` label),
//! read from the store in one batch.
//!
//! The periodic scans (the lifecycle resync, the orphan scan, the NetworkPolicy sweep)
//! look at every object of the installation. Reading each object's job on its own made
//! a scan of 12 000 RayJobs 12 000 store reads every 10 s; one batched read per scan
//! (`JobStore::get_many`, chunked by the store) costs a few queries.

use kube::ResourceExt;
use rustc_hash::FxHashMap;

use super::Lifecycle;
use crate::cluster::labels::LABEL_JOB_ID;
use crate::store::{JobRecord, StoreError};

/// The job id an object names in its label.
pub(crate) fn job_id_of<K: ResourceExt>(obj: &K) -> Option<&str> {
    obj.labels().get(LABEL_JOB_ID).map(String::as_str)
}

impl Lifecycle {
    /// The store's record of each job `objects` name, by job id (jobs the store does
    /// not know are absent).
    pub(crate) async fn owners_of<K: ResourceExt>(
        &self,
        objects: &[K],
    ) -> Result<FxHashMap<String, JobRecord>, StoreError> {
        let mut ids: Vec<String> = objects
            .iter()
            .filter_map(job_id_of)
            .map(str::to_string)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            return Ok(FxHashMap::default());
        }
        Ok(self
            .core
            .store
            .get_many(ids)
            .await?
            .into_iter()
            .map(|j| (j.id.clone(), j))
            .collect())
    }
}
