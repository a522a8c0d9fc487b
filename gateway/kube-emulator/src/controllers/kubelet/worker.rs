//! One pod worker of the kubelet (like the kubelet's pod workers): the pod it runs,
//! its node, the node image cache, its cancellation (pod deleted or shutdown), and
//! what every step of its lifecycle uses — events about the pod, status writes through
//! `pods/status`, cancellable sleeps and the kubelet back-off.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::pod_status::PodStatus;
use crate::controllers::events::{Kind, emit_core};
use crate::controllers::shared::Shared;
use crate::controllers::status::merge_status;

const COMPONENT: &str = "kubelet";

/// Images already present per node: `(node, image)`.
pub(super) type ImageCache = Arc<Mutex<HashSet<(String, String)>>>;

/// The worker of one pod.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    pub(super) pod: Pod,
    pub(super) node: String,
    pub(super) images: ImageCache,
    pub(super) cancel: CancellationToken,
}

impl Worker {
    pub(super) fn ns(&self) -> String {
        self.pod.namespace().unwrap_or_default()
    }

    pub(super) fn name(&self) -> String {
        self.pod.name_any()
    }

    fn reference(&self, field: &str) -> ObjectReference {
        let mut r = self.pod.object_ref(&());
        r.field_path = (!field.is_empty()).then(|| field.to_owned());
        r
    }

    /// A core/v1 Event about container `field` of the pod (`""`: the pod itself),
    /// from this node's kubelet.
    pub(super) async fn event(&self, field: &str, kind: Kind, reason: &str, msg: &str) {
        emit_core(
            &self.shared.client,
            COMPONENT,
            Some(&self.node),
            &self.reference(field),
            kind,
            reason,
            msg,
        )
        .await;
    }

    /// The `Created` and `Started` events of container `name`.
    pub(super) async fn created_and_started(&self, field: &str, name: &str) {
        let created = format!("Created container: {name}");
        self.event(field, Kind::Normal, "Created", &created).await;
        let started = format!("Started container {name}");
        self.event(field, Kind::Normal, "Started", &started).await;
    }

    /// Writes `st` through `pods/status`; a pod that is gone cancels the worker.
    pub(super) async fn push(&self, st: &PodStatus) -> bool {
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &self.ns());
        match merge_status(&api, &self.name(), &st.to_json()).await {
            Ok(_) => true,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                self.cancel.cancel();
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, pod = %self.name(), "kubelet status update failed");
                false
            }
        }
    }

    /// Sleeps `d`; `false` when the worker was cancelled first.
    pub(super) async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = self.cancel.cancelled() => false,
            () = tokio::time::sleep(d) => true,
        }
    }

    /// The kubelet back-off after `attempt` failures: doubling, at most 300 s.
    pub(super) fn backoff(&self, attempt: u32) -> Duration {
        (self.shared.cfg.backoff_base * 2u32.saturating_pow(attempt)).min(Duration::from_secs(300))
    }
}
