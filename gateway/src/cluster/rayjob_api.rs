//! The one place Forge talks to the API server about RayJobs: create (adopting one that
//! exists — names are deterministic per job), delete, read, list this installation's
//! own (`forge.dev/instance` = the store's identity) or every Forge-managed one (to
//! report foreign ones; metadata only). Transient API failures are retried here, so callers only see
//! lasting ones — but a create that may have taken effect is looked up, not resent
//! blindly (`create_or_adopt`): a resent create of a RayJob that already ran and was
//! deleted would run its job twice.

use kube::api::{DeleteParams, ListParams, PartialObjectMeta, PostParams};
use kube::{Api, Client};

use super::api_error::{Backoff, Failure, classify, throttled, with_retry};
use super::labels;
use super::rayjob_crd::RayJob;

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
    instance: String,
}

impl std::fmt::Debug for RayJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RayJobs")
    }
}

impl RayJobs {
    /// The RayJobs of `namespace`, as installation `instance` sees them.
    pub fn new(client: Client, namespace: &str, instance: &str) -> Self {
        RayJobs {
            api: Api::namespaced(client, namespace),
            instance: instance.to_string(),
        }
    }

    /// The installation identity this gateway labels its RayJobs with.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Whether `rayjob` carries this installation's identity.
    pub fn is_own(&self, rayjob: &RayJob) -> bool {
        labels::instance_of(rayjob) == Some(self.instance.as_str())
    }

    /// Selector of this installation's RayJobs (the lifecycle controller's watch).
    pub fn own_selector(&self) -> String {
        labels::instance_selector(&self.instance)
    }

    /// The typed API (for watchers).
    pub fn api(&self) -> &Api<RayJob> {
        &self.api
    }

    /// Creates `rayjob`, or adopts the one with its name (AlreadyExists).
    ///
    /// A create that fails without proof of its outcome (a server error, a lost
    /// connection) may have taken effect, so it is never simply sent again: the
    /// RayJob is first looked up by name. Found: adopted. Absent: sent again only
    /// while `unseen()` says no RayJob of the job has been seen — one an earlier
    /// attempt created may have run and been deleted since, and a new one would run
    /// the job twice (then it counts as adopted). A throttled create (429) took no
    /// effect and is sent again as it is. Lasting failures are returned; a lookup
    /// that cannot answer returns the create's error.
    pub async fn create_or_adopt<F, Fut>(
        &self,
        rayjob: &RayJob,
        mut unseen: F,
    ) -> Result<Created, kube::Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let pp = PostParams::default();
        let name = rayjob.metadata.name.clone().unwrap_or_default();
        let mut backoff = Backoff::default();
        loop {
            let e = match self.api.create(&pp, rayjob).await {
                Ok(_) => return Ok(Created::New),
                Err(e) if classify(&e) == Failure::AlreadyExists => return Ok(Created::Adopted),
                Err(e) => e,
            };
            if classify(&e) != Failure::Transient {
                return Err(e);
            }
            if !throttled(&e) {
                match self.get(&name).await {
                    Ok(Some(_)) => return Ok(Created::Adopted),
                    Ok(None) if !unseen().await => return Ok(Created::Adopted),
                    Ok(None) => {}
                    Err(_) => return Err(e),
                }
            }
            if !backoff.next().await {
                return Err(e);
            }
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

    /// Every RayJob this installation created.
    pub async fn list_own(&self) -> Result<Vec<RayJob>, kube::Error> {
        let lp = ListParams::default().labels(&self.own_selector());
        Ok(with_retry(|| self.api.list(&lp)).await?.items)
    }

    /// Every RayJob any Forge installation manages (this one's included), metadata
    /// only: names and labels are all a scan of them needs, and a whole RayJob is
    /// large.
    pub async fn list_managed(&self) -> Result<Vec<PartialObjectMeta<RayJob>>, kube::Error> {
        let lp = ListParams::default().labels(&labels::managed_selector());
        Ok(with_retry(|| self.api.list_metadata(&lp)).await?.items)
    }
}
