//! The RayCluster controller of the simulated KubeRay operator (`rcctrl`): the head
//! Service `<cluster>-head-svc`, the head pod and the worker pods (generateName, the
//! real labels, controller ownerReferences to the RayCluster), deletion of finished
//! pods (`shouldDeletePod`), scale up/down to clamp(replicas, min, max) × numOfHosts,
//! and `status` (`state: ready` once every desired pod is Running and Ready; never
//! reset afterwards). Events come from `raycluster-controller` (`SEMANTICS.md` §4, §5).
//!
//! Not emulated: the autoscaler sidecar and its RBAC objects, the injected
//! `wait-gcs-ready` init container of workers, GCS fault tolerance, suspend.
//!
//! Files: `objects` (pod and Service builders), `pods` (the reconcile's actions on
//! the children), `status` (the status it computes).

mod objects;
mod pods;
mod status;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

pub use objects::{build_head_service, build_pod, pod_labels};
use pods::Children;
use status::cluster_status;

use super::error::ControllerError;
use super::shared::{Shared, raycluster_resource};
use super::status::merge_status;

/// Runs the RayCluster controller until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let ar = raycluster_resource();
    let client = shared.client.clone();
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let token = shared.shutdown.clone();
    let ar2 = ar.clone();
    let mapper = move |pod: Pod| -> Option<ObjectRef<DynamicObject>> {
        let ns = pod.namespace()?;
        let owner = pod
            .owner_references()
            .iter()
            .find(|o| o.kind == "RayCluster")?;
        Some(ObjectRef::new_with(&owner.name, ar2.clone()).within(&ns))
    };
    Controller::new_with(clusters, watcher::Config::default(), ar)
        .watches(Api::<Pod>::all(client), watcher::Config::default(), mapper)
        .with_config(
            kube::runtime::controller::Config::default().concurrency(shared.cfg.concurrency),
        )
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(reconcile, error_policy, shared)
        .for_each(|_| futures::future::ready(()))
        .await;
    Ok(())
}

fn error_policy(_rc: Arc<DynamicObject>, err: &ControllerError, _ctx: Arc<Shared>) -> Action {
    tracing::warn!(error = %err, "raycluster reconcile failed");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(rc: Arc<DynamicObject>, ctx: Arc<Shared>) -> Result<Action, ControllerError> {
    let ns = rc.namespace().unwrap_or_default();
    let name = rc.name_any();
    if rc.metadata.deletion_timestamp.is_some() {
        ctx.dashboard.drop_cluster(&ns, &name);
        return Ok(Action::await_change());
    }
    let spec = rc.data.get("spec").cloned().unwrap_or(Value::Null);
    let children = Children::new(&ctx, &rc);
    children.ensure_head_service().await?;
    let pods = children.live_pods().await?;
    let groups: Vec<Value> = spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let changed = children.scale(&spec, &groups, &pods).await?;

    let now = Timestamp::now().to_string();
    let (mut status, ready) = cluster_status(&rc, &spec, &groups, &pods, changed, &now);
    let mut cmp_old = rc.data.get("status").cloned().unwrap_or_else(|| json!({}));
    if let Some(o) = cmp_old.as_object_mut() {
        o.remove("lastUpdateTime");
    }
    if cmp_old != status {
        status["lastUpdateTime"] = json!(now);
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &ns, &raycluster_resource());
        merge_status(&api, &name, &status).await?;
    }
    Ok(Action::requeue(Duration::from_secs(if ready {
        300
    } else {
        5
    })))
}
