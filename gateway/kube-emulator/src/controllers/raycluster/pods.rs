//! What one RayCluster reconcile does to the cluster's children: the head Service,
//! deletion of finished pods (`shouldDeletePod`), the head pod, and each worker group
//! scaled to clamp(replicas, min, max) × numOfHosts (new pods fill the lowest replica
//! indexes; scale-down deletes `workersToDelete` first), each step with its
//! `raycluster-controller` event.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::Value;

use super::objects::{build_head_service, build_pod};
use crate::controllers::error::ControllerError;
use crate::controllers::events::{Kind, emit};
use crate::controllers::names::{GROUP, NODE_TYPE, RAY_CLUSTER, REPLICA_INDEX, head_service};
use crate::controllers::raystart::desired_worker_pods;
use crate::controllers::shared::{Shared, raycluster_resource};

const REPORTER: &str = "raycluster-controller";

pub(super) fn pod_phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

pub(super) fn pod_ready(p: &Pod) -> bool {
    pod_phase(p) == "Running"
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pod's `ray.io/node-type` is `node_type`.
pub(super) fn is(p: &Pod, node_type: &str) -> bool {
    p.labels().get(NODE_TYPE).map(String::as_str) == Some(node_type)
}

/// `shouldDeletePod`: finished pods, or a Running pod whose Ray container terminated
/// under `restartPolicy: Never`.
fn should_delete(p: &Pod) -> bool {
    if matches!(pod_phase(p), "Failed" | "Succeeded") {
        return true;
    }
    let never = p.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never");
    let ray_terminated = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.terminated.is_some());
    never && ray_terminated && pod_phase(p) == "Running"
}

/// One reconcile's handle on a RayCluster's children.
pub(super) struct Children<'a> {
    ctx: &'a Shared,
    rc: &'a DynamicObject,
    ns: String,
    name: String,
    rc_ref: ObjectReference,
    pods: Api<Pod>,
}

impl<'a> Children<'a> {
    pub(super) fn new(ctx: &'a Shared, rc: &'a DynamicObject) -> Self {
        let ns = rc.namespace().unwrap_or_default();
        Self {
            ctx,
            rc,
            name: rc.name_any(),
            rc_ref: rc.object_ref(&raycluster_resource()),
            pods: Api::namespaced(ctx.client.clone(), &ns),
            ns,
        }
    }

    /// A `Normal` event about the RayCluster.
    async fn event(&self, reason: &str, action: &str, note: &str) {
        emit(
            &self.ctx.client,
            REPORTER,
            &self.rc_ref,
            Kind::Normal,
            reason,
            action,
            note,
        )
        .await;
    }

    /// Creates the head Service unless it exists.
    pub(super) async fn ensure_head_service(&self) -> Result<(), ControllerError> {
        let svcs: Api<Service> = Api::namespaced(self.ctx.client.clone(), &self.ns);
        let svc_name = head_service(&self.name);
        if svcs.get_opt(&svc_name).await?.is_some() {
            return Ok(());
        }
        let svc: Service = serde_json::from_value(build_head_service(self.rc))?;
        match svcs.create(&PostParams::default(), &svc).await {
            Ok(_) => {
                let note = format!("Created service {}/{svc_name}", self.ns);
                self.event("CreatedService", "Create", &note).await;
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The cluster's pods that are not being deleted, after deleting the finished ones.
    pub(super) async fn live_pods(&self) -> Result<Vec<Pod>, ControllerError> {
        let mut pods = self
            .pods
            .list(&ListParams::default().labels(&format!("{RAY_CLUSTER}={}", self.name)))
            .await?
            .items;
        pods.retain(|p| p.metadata.deletion_timestamp.is_none());
        let mut kept = Vec::with_capacity(pods.len());
        for p in pods {
            if !should_delete(&p) {
                kept.push(p);
                continue;
            }
            let pname = p.name_any();
            self.pods.delete(&pname, &DeleteParams::default()).await?;
            let (reason, what) = if is(&p, "head") {
                ("DeletedHeadPod", "head")
            } else {
                ("DeletedWorkerPod", "worker")
            };
            let note = format!(
                "Deleted {what} Pod {}/{pname}; Pod status: {}",
                self.ns,
                pod_phase(&p)
            );
            self.event(reason, "Delete", &note).await;
        }
        Ok(kept)
    }

    /// Creates a missing head pod and scales every worker group; `true` when it
    /// created or deleted any pod.
    pub(super) async fn scale(
        &self,
        spec: &Value,
        groups: &[Value],
        pods: &[Pod],
    ) -> Result<bool, ControllerError> {
        let mut changed = false;
        if !pods.iter().any(|p| is(p, "head")) {
            let head_spec = spec.get("headGroupSpec").cloned().unwrap_or(Value::Null);
            let pod: Pod = serde_json::from_value(build_pod(self.rc, &head_spec, None, None))?;
            let created = self.pods.create(&PostParams::default(), &pod).await?;
            let note = format!("Created head Pod {}/{}", self.ns, created.name_any());
            self.event("CreatedHeadPod", "Create", &note).await;
            changed = true;
        }
        for g in groups {
            let gname = g
                .get("groupName")
                .and_then(Value::as_str)
                .unwrap_or("workers");
            let mine: Vec<&Pod> = pods
                .iter()
                .filter(|p| {
                    is(p, "worker") && p.labels().get(GROUP).map(String::as_str) == Some(gname)
                })
                .collect();
            let desired = desired_worker_pods(g).max(0) as usize;
            if mine.len() < desired {
                self.scale_up(g, gname, &mine, desired - mine.len()).await?;
                changed = true;
            } else if mine.len() > desired {
                self.scale_down(g, &mine, mine.len() - desired).await?;
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Creates `count` worker pods of group `g`. Multi-host groups: the numOfHosts
    /// pods of one replica share its index.
    async fn scale_up(
        &self,
        g: &Value,
        gname: &str,
        mine: &[&Pod],
        count: usize,
    ) -> Result<(), ControllerError> {
        let mut per_index: BTreeMap<usize, usize> = BTreeMap::new();
        for p in mine {
            if let Some(i) = p.labels().get(REPLICA_INDEX).and_then(|i| i.parse().ok()) {
                *per_index.entry(i).or_default() += 1;
            }
        }
        let hosts = g
            .get("numOfHosts")
            .and_then(Value::as_i64)
            .unwrap_or(1)
            .max(1) as usize;
        for _ in 0..count {
            let i = (0..)
                .find(|i| per_index.get(i).copied().unwrap_or(0) < hosts)
                .unwrap_or(0);
            *per_index.entry(i).or_default() += 1;
            let pod: Pod = serde_json::from_value(build_pod(self.rc, g, Some(gname), Some(i)))?;
            let created = self.pods.create(&PostParams::default(), &pod).await?;
            let note = format!("Created worker Pod {}/{}", self.ns, created.name_any());
            self.event("CreatedWorkerPod", "Create", &note).await;
        }
        Ok(())
    }

    /// Deletes `count` worker pods of group `g`: `workersToDelete` first, then by name
    /// from the end.
    async fn scale_down(
        &self,
        g: &Value,
        mine: &[&Pod],
        count: usize,
    ) -> Result<(), ControllerError> {
        let to_delete: BTreeSet<String> = g
            .pointer("/scaleStrategy/workersToDelete")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let mut victims: Vec<&Pod> = mine.to_vec();
        victims.sort_by_key(|p| {
            (
                !to_delete.contains(&p.name_any()),
                std::cmp::Reverse(p.name_any()),
            )
        });
        for p in victims.into_iter().take(count) {
            self.pods
                .delete(&p.name_any(), &DeleteParams::default())
                .await?;
            let note = format!("Deleted worker Pod {}/{}", self.ns, p.name_any());
            self.event("DeletedWorkerPod", "Delete", &note).await;
        }
        Ok(())
    }
}
