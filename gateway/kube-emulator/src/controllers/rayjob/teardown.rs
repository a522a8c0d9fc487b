//! Taking a RayJob's children down: after the job finished,
//! `shutdownAfterJobFinishes` + `ttlSecondsAfterFinished` delete only the RayCluster;
//! Suspending / Retrying delete the RayCluster and the submitter Job, wait until both
//! are gone and clear the per-attempt status fields (§3.6).

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, PropagationPolicy};
use kube::runtime::controller::Action;
use serde_json::json;

use super::view::{REQUEUE, View, parse_time};
use crate::controllers::error::ControllerError;
use crate::controllers::events::Kind;

fn background() -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    }
}

/// Deletes the RayCluster (its dashboard goes with it) and says so in an event.
async fn delete_cluster(v: &View<'_>, cluster: &str) -> Result<(), kube::Error> {
    v.clusters().delete(cluster, &background()).await?;
    v.ctx.dashboard.drop_cluster(&v.ns, cluster);
    v.event(
        Kind::Normal,
        "DeletedRayCluster",
        "Delete",
        &format!("Deleted RayCluster {}/{cluster}", v.ns),
    )
    .await;
    Ok(())
}

/// Complete / Failed: delete the RayCluster `ttlSecondsAfterFinished` after `endTime`
/// when `shutdownAfterJobFinishes` is set (and the cluster is the RayJob's own).
pub(super) async fn finished(v: &View<'_>) -> Result<Action, ControllerError> {
    if v.spec.get("clusterSelector").is_some_and(|c| c.is_object())
        || !v.bool_spec("shutdownAfterJobFinishes")
    {
        return Ok(Action::await_change());
    }
    let Some(end) = parse_time(v.status.get("endTime")) else {
        return Ok(Action::await_change());
    };
    let ttl = v.i64_spec("ttlSecondsAfterFinished").unwrap_or(0).max(0);
    let due = end + SignedDuration::from_secs(ttl);
    let now = Timestamp::now();
    if now < due {
        let wait = due.duration_since(now).unsigned_abs();
        return Ok(Action::requeue(wait + Duration::from_millis(50)));
    }
    let cluster = v.cluster().to_owned();
    if cluster.is_empty() {
        return Ok(Action::await_change());
    }
    if let Some(rc) = v.clusters().get_opt(&cluster).await?
        && rc.metadata.deletion_timestamp.is_none()
    {
        match delete_cluster(v, &cluster).await {
            Ok(()) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                v.event(
                    Kind::Warning,
                    "FailedToDeleteRayCluster",
                    "Delete",
                    &format!("Failed to delete cluster {}/{cluster}: {e}", v.ns),
                )
                .await;
                return Err(e.into());
            }
        }
    }
    Ok(Action::await_change())
}

/// Suspending / Retrying: delete the RayCluster and the submitter Job, wait until
/// both are gone, clear the per-attempt fields (§3.6).
pub(super) async fn tear_down(v: &View<'_>, state: &str) -> Result<Action, ControllerError> {
    let jobs = v.jobs();
    let cluster = v.cluster().to_owned();
    let mut pending = false;
    if !cluster.is_empty()
        && let Some(rc) = v.clusters().get_opt(&cluster).await?
    {
        pending = true;
        if rc.metadata.deletion_timestamp.is_none() {
            delete_cluster(v, &cluster).await?;
        }
    }
    if let Some(job) = jobs.get_opt(&v.name).await? {
        pending = true;
        if job.metadata.deletion_timestamp.is_none() {
            jobs.delete(&v.name, &background()).await?;
            v.event(
                Kind::Normal,
                "DeletedRayJobSubmitter",
                "Delete",
                &format!("Deleted Kubernetes Job {}/{}", v.ns, v.name),
            )
            .await;
        }
    }
    if pending {
        return Ok(Action::requeue(REQUEUE));
    }
    let next = if state == "Suspending" {
        "Suspended"
    } else {
        ""
    };
    v.patch_status(json!({
        "jobDeploymentStatus": next, "rayClusterStatus": null, "rayClusterName": null, "dashboardURL": null,
        "jobId": null, "message": null, "reason": null, "rayJobInfo": null, "jobStatus": null,
    }))
    .await?;
    Ok(Action::requeue(Duration::ZERO))
}
