//! The one place Forge talks to the API server about RayJobs: create (adopting one that
//! exists — names are deterministic per job), delete, read, list the gateway's own.
//! Transient API failures are retried here, so callers only see lasting ones.

use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};

use super::api_error::{Failure, classify, with_retry};
use super::labels;
use super::rayjob::RayJob;

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// A new RayJob.
    New,
    /// One of that name existed (a retry or a restart): adopted.
    Adopted,
}

/// RayJobs in the gateway's namespace.
#[derive(Clone)]
pub struct RayJobs {
    api: Api<RayJob>,
}

impl std::fmt::Debug for RayJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RayJobs")
    }
}

impl RayJobs {
    /// The RayJobs of `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        RayJobs {
            api: Api::namespaced(client, namespace),
        }
    }

    /// The typed API (for watchers).
    pub fn api(&self) -> &Api<RayJob> {
        &self.api
    }

    /// Creates `rayjob`, or adopts the one with its name (AlreadyExists).
    pub async fn create_or_adopt(&self, rayjob: &RayJob) -> Result<Created, kube::Error> {
        let pp = PostParams::default();
        match with_retry(|| self.api.create(&pp, rayjob)).await {
            Ok(_) => Ok(Created::New),
            Err(e) if classify(&e) == Failure::AlreadyExists => Ok(Created::Adopted),
            Err(e) => Err(e),
        }
    }

    /// Deletes a RayJob (background propagation: the operator's finalizer and the
    /// garbage collector remove its RayCluster, submitter Job and pods). Gone already
    /// is fine.
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams::background();
        match with_retry(|| self.api.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A RayJob by name, if it exists.
    pub async fn get(&self, name: &str) -> Result<Option<RayJob>, kube::Error> {
        with_retry(|| self.api.get_opt(name)).await
    }

    /// Every RayJob this gateway manages.
    pub async fn list_managed(&self) -> Result<Vec<RayJob>, kube::Error> {
        let lp = ListParams::default().labels(&labels::managed_selector());
        Ok(with_retry(|| self.api.list(&lp)).await?.items)
    }
}
