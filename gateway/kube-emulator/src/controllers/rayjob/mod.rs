//! The RayJob controller of the simulated KubeRay operator (`ctrl`, K8sJobMode),
//! following `SEMANTICS.md` §3: New → Initializing → Running → Complete / Failed
//! (+ ValidationFailed, Suspending/Suspended, Retrying), the finalizer, `jobId` and
//! RayCluster names with 5 random characters, the submitter batch Job, the RayJob head
//! Service, `activeDeadlineSeconds` / `preRunningDeadlineSeconds`, the 30 s submitter
//! grace period, the backoff counters, and `shutdownAfterJobFinishes` +
//! `ttlSecondsAfterFinished` deleting only the RayCluster. The "dashboard" it polls is
//! the simulated one in [`super::dashboard`].
//!
//! Requeue: every reconcile ends with a 3 s requeue (like `ctrl`), plus watch triggers
//! from the RayJob, its RayCluster and its submitter Job. No event is emitted for a
//! status transition (§5). Not emulated: HTTPMode / InteractiveMode / SidecarMode
//! (they wait in Initializing), `deletionStrategy`, batch schedulers,
//! `DELETE_RAYJOB_CR_AFTER_JOB_FINISHES`. The validation Warning event is written once
//! per entry into ValidationFailed rather than on every 3 s requeue.
//!
//! Files: `view` (what one reconcile knows about its RayJob and how it writes),
//! `children` (the RayCluster, submitter Job and head Service it creates),
//! `states` (New, Initializing, Running, the failure path and the finalizer),
//! `teardown` (TTL cleanup, Suspending / Retrying).

mod children;
mod states;
mod teardown;
mod view;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;

pub use children::submit_command;
use view::{REQUEUE, View, s};

use super::error::ControllerError;
use super::events::Kind;
use super::shared::{Shared, raycluster_resource, rayjob_resource};
use super::validation::{validate_metadata, validate_spec};

/// Runs the RayJob controller until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let ar = rayjob_resource();
    let rc_ar = raycluster_resource();
    let client = shared.client.clone();
    let token = shared.shutdown.clone();
    let (ar_a, ar_b) = (ar.clone(), ar.clone());
    let owned =
        move |o: &dyn ResourceOwners, ar: &ApiResource| -> Option<ObjectRef<DynamicObject>> {
            let (ns, owner) = o.rayjob_owner()?;
            Some(ObjectRef::new_with(&owner, ar.clone()).within(&ns))
        };
    Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        ar.clone(),
    )
    .watches_with(
        Api::<DynamicObject>::all_with(client.clone(), &rc_ar),
        rc_ar,
        watcher::Config::default(),
        move |rc: DynamicObject| owned(&rc, &ar_a),
    )
    .watches(
        Api::<Job>::all(client),
        watcher::Config::default(),
        move |j: Job| owned(&j, &ar_b),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(shared.cfg.concurrency))
    .graceful_shutdown_on(async move { token.cancelled().await })
    .run(reconcile, error_policy, shared)
    .for_each(|_| futures::future::ready(()))
    .await;
    Ok(())
}

/// Objects that may be controlled by a RayJob.
trait ResourceOwners {
    fn rayjob_owner(&self) -> Option<(String, String)>;
}

impl<K: ResourceExt> ResourceOwners for K {
    fn rayjob_owner(&self) -> Option<(String, String)> {
        let ns = self.namespace()?;
        let o = self
            .owner_references()
            .iter()
            .find(|o| o.kind == "RayJob" && o.controller == Some(true))?;
        Some((ns, o.name.clone()))
    }
}

fn error_policy(_rj: Arc<DynamicObject>, err: &ControllerError, _ctx: Arc<Shared>) -> Action {
    tracing::warn!(error = %err, "rayjob reconcile failed");
    Action::requeue(REQUEUE)
}

async fn reconcile(
    cached: Arc<DynamicObject>,
    ctx: Arc<Shared>,
) -> Result<Action, ControllerError> {
    let ar = rayjob_resource();
    let ns = cached.namespace().unwrap_or_default();
    // Read the live object: the reflector may lag behind our own status writes, and
    // acting twice on a stale "New" would mint a second jobId / cluster name.
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ar);
    let Some(rj) = api.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let v = View {
        ctx: &ctx,
        rj: &rj,
        name: rj.name_any(),
        spec: rj.data.get("spec").cloned().unwrap_or_else(|| json!({})),
        status: rj.data.get("status").cloned().unwrap_or_else(|| json!({})),
        api,
        ns,
    };
    if s(&v.spec, "/managedBy") == "kueue.x-k8s.io/multikueue" {
        return Ok(Action::await_change());
    }
    if rj.metadata.deletion_timestamp.is_some() {
        return states::finalize(&v).await;
    }
    let state = s(&v.status, "/jobDeploymentStatus").to_owned();
    if let Err(e) = validate_metadata(&v.name).and_then(|()| validate_spec(&v.spec)) {
        if state != "ValidationFailed" {
            v.event(Kind::Warning, e.event_reason(), "Validate", &e.to_string())
                .await;
            v.patch_status(
                json!({"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed",
                                  "message": e.to_string()}),
            )
            .await?;
        }
        return Ok(Action::requeue(REQUEUE));
    }
    match state.as_str() {
        "" | "New" => states::new(&v).await,
        "Initializing" => states::initializing(&v).await,
        "Running" => states::running(&v).await,
        "Complete" | "Failed" => teardown::finished(&v).await,
        "Suspending" | "Retrying" => teardown::tear_down(&v, &state).await,
        "Suspended" => {
            if !v.bool_spec("suspend") {
                v.patch_status(json!({"jobDeploymentStatus": ""})).await?;
                return Ok(Action::requeue(Duration::ZERO));
            }
            Ok(Action::await_change())
        }
        // ValidationFailed (and unknown states): no case in the switch; requeue.
        _ => Ok(Action::requeue(REQUEUE)),
    }
}
