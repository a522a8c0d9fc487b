//! The NetworkPolicies Forge creates, one per RayJob (built by
//! [`crate::manifests::network`]): create (adopting one that exists — the name is the
//! RayJob's, so a retried dispatch finds its own), delete, list this installation's own
//! (`forge.dev/instance`, like its RayJobs: another installation's are never touched).
//! Transient API failures are retried here, like every other call of this adapter.
//!
//! An API server that does not serve `networking.k8s.io/v1` NetworkPolicies at all (an
//! emulator without them) answers 404 for the collection: that is reported as
//! [`Applied::NotServed`] and logged once — such a cluster enforces no NetworkPolicy,
//! exactly like one whose network plugin ignores them — instead of failing every
//! dispatch. Every real Kubernetes API server serves them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, PartialObjectMeta, PostParams};
use kube::{Api, Client};

use super::api_error::{Failure, classify, with_retry};
use super::labels;

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// A new NetworkPolicy.
    New,
    /// One of that name existed (a retried dispatch): adopted.
    Adopted,
    /// The API server does not serve NetworkPolicies.
    NotServed,
}

/// NetworkPolicies in the gateway's namespace.
#[derive(Clone)]
pub struct NetworkPolicies {
    api: Api<NetworkPolicy>,
    /// The installation identity its NetworkPolicies are labelled with.
    instance: String,
    /// Set once "not served" has been logged.
    warned: Arc<AtomicBool>,
}

impl std::fmt::Debug for NetworkPolicies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetworkPolicies")
    }
}

impl NetworkPolicies {
    /// The NetworkPolicies of `namespace`, as installation `instance` sees them.
    pub fn new(client: Client, namespace: &str, instance: &str) -> Self {
        NetworkPolicies {
            api: Api::namespaced(client, namespace),
            instance: instance.to_string(),
            warned: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Creates `policy`, or adopts the one with its name (AlreadyExists).
    pub async fn create_or_adopt(&self, policy: &NetworkPolicy) -> Result<Applied, kube::Error> {
        let pp = PostParams::default();
        match with_retry(|| self.api.create(&pp, policy)).await {
            Ok(_) => Ok(Applied::New),
            Err(e) => match classify(&e) {
                Failure::AlreadyExists => Ok(Applied::Adopted),
                Failure::NotFound => {
                    if !self.warned.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            "the API server does not serve NetworkPolicies: Ray pods are not \
                             network-isolated ({e})"
                        );
                    }
                    Ok(Applied::NotServed)
                }
                _ => Err(e),
            },
        }
    }

    /// Deletes a NetworkPolicy; gone already is fine.
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams::default();
        match with_retry(|| self.api.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every NetworkPolicy this installation created, metadata only (none where they
    /// are not served).
    pub async fn list_own(&self) -> Result<Vec<PartialObjectMeta<NetworkPolicy>>, kube::Error> {
        let lp = ListParams::default().labels(&labels::instance_selector(&self.instance));
        match with_retry(|| self.api.list_metadata(&lp)).await {
            Ok(list) => Ok(list.items),
            Err(e) if classify(&e) == Failure::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}
