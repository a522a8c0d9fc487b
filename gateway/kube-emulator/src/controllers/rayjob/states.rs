//! The RayJob state machine's forward path (`SEMANTICS.md` §3): New (finalizer,
//! `jobId`, RayCluster name, `startTime`) → Initializing (RayCluster ready, submitter
//! Job created) → Running (Ray job status from the dashboard, the submitter's end and
//! its 30 s grace period) → Complete, or Failed / Retrying through `backoffLimit`
//! (§3.5); the deadlines; and the finalizer handler that stops a Ray job still
//! running when its RayJob is deleted.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::children::{ensure_cluster, ensure_rayjob_service, ensure_submitter};
use super::view::{REQUEUE, View, s};
use crate::controllers::dashboard::{RayJobInfo, is_terminal};
use crate::controllers::error::ControllerError;
use crate::controllers::names::{RAYJOB_FINALIZER, dashboard_url, with_suffix};
use crate::controllers::status::now;

/// The submitter finished this long ago but the Ray job is not terminal → FAILED.
const SUBMITTER_GRACE: SignedDuration = SignedDuration::from_secs(30);

/// Finalizer handler: stop the Ray job if it is not terminal, drop the finalizer.
pub(super) async fn finalize(v: &View<'_>) -> Result<Action, ControllerError> {
    let finalizers = v.rj.finalizers();
    if !finalizers.iter().any(|f| f == RAYJOB_FINALIZER) {
        return Ok(Action::await_change());
    }
    if !is_terminal(s(&v.status, "/jobStatus")) {
        v.ctx
            .dashboard
            .stop_job(&v.ns, v.cluster(), s(&v.status, "/jobId"))
            .await;
    }
    let rest: Vec<&String> = finalizers
        .iter()
        .filter(|f| *f != RAYJOB_FINALIZER)
        .collect();
    let patch =
        json!({"metadata": {"finalizers": rest, "resourceVersion": v.rj.resource_version()}});
    v.api
        .patch(&v.name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(Action::await_change())
}

/// New: the finalizer, then `jobId`, the RayCluster name and `startTime`.
pub(super) async fn new(v: &View<'_>) -> Result<Action, ControllerError> {
    if !v.rj.finalizers().iter().any(|f| f == RAYJOB_FINALIZER) {
        let mut f: Vec<String> = v.rj.finalizers().to_vec();
        f.push(RAYJOB_FINALIZER.into());
        let patch =
            json!({"metadata": {"finalizers": f, "resourceVersion": v.rj.resource_version()}});
        v.api
            .patch(&v.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    let job_id = match v.spec.get("jobId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ if v.mode() == "InteractiveMode" => String::new(),
        _ => with_suffix(&v.name),
    };
    let cluster = match v
        .spec
        .pointer("/clusterSelector/ray.io~1cluster")
        .and_then(Value::as_str)
    {
        Some(c) => c.to_owned(),
        None => with_suffix(&v.name),
    };
    v.patch_status(json!({
        "jobId": job_id, "rayClusterName": cluster, "jobStatus": "", "startTime": now(),
        "jobDeploymentStatus": "Initializing", "succeeded": v.status.get("succeeded").cloned().unwrap_or(json!(0)),
        "failed": v.status.get("failed").cloned().unwrap_or(json!(0)),
    }))
    .await?;
    Ok(Action::requeue(Duration::ZERO))
}

/// Moves to Failed (or Retrying when `backoffLimit` allows, §3.5); sets `endTime`.
pub(super) async fn fail(
    v: &View<'_>,
    reason: &str,
    message: &str,
    extra: Value,
) -> Result<Action, ControllerError> {
    let failed = v.status.get("failed").and_then(Value::as_i64).unwrap_or(0) + 1;
    let limit = v.i64_spec("backoffLimit").unwrap_or(0);
    let mut patch = json!({"reason": reason, "message": message, "failed": failed});
    if let (Some(p), Some(e)) = (patch.as_object_mut(), extra.as_object()) {
        for (k, val) in e {
            p.insert(k.clone(), val.clone());
        }
    }
    if failed < limit + 1 && !matches!(reason, "DeadlineExceeded" | "JobStatusCheckTimeoutExceeded")
    {
        patch["jobDeploymentStatus"] = json!("Retrying");
    } else {
        patch["jobDeploymentStatus"] = json!("Failed");
        patch["endTime"] = json!(now());
    }
    v.patch_status(patch).await?;
    Ok(Action::requeue(Duration::ZERO))
}

/// Initializing: wait for the RayCluster to be ready, then create the submitter.
pub(super) async fn initializing(v: &View<'_>) -> Result<Action, ControllerError> {
    if v.bool_spec("suspend") {
        v.patch_status(json!({"jobDeploymentStatus": "Suspending"}))
            .await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    if let Some((reason, msg)) = v.deadline(true) {
        return fail(v, &reason, &msg, json!({})).await;
    }
    let cluster = v.cluster().to_owned();
    let Some(rc) = ensure_cluster(v, &cluster).await? else {
        return Ok(Action::requeue(REQUEUE));
    };
    let rc_status = rc.data.get("status").cloned().unwrap_or(Value::Null);
    if s(&rc_status, "/state") != "ready" {
        if v.status.get("rayClusterStatus") != Some(&rc_status) && !rc_status.is_null() {
            v.patch_status(json!({"rayClusterStatus": rc_status}))
                .await?;
        }
        return Ok(Action::requeue(REQUEUE));
    }
    let dashboard = dashboard_url(&cluster, &v.ns);
    match v.mode() {
        "K8sJobMode" => {}
        other => {
            tracing::warn!(mode = other, rayjob = %v.name, "submission mode not emulated; waiting in Initializing");
            return Ok(Action::requeue(REQUEUE));
        }
    }
    ensure_submitter(v, &dashboard).await?;
    v.patch_status(json!({"jobDeploymentStatus": "Running", "dashboardURL": dashboard, "rayClusterStatus": rc_status}))
        .await?;
    Ok(Action::requeue(Duration::ZERO))
}

/// The submitter Job's finished condition: (`Complete`|`Failed`, lastTransitionTime).
fn submitter_finished(job: Option<&Job>) -> Option<(String, Option<Timestamp>)> {
    let conds = job?.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| {
            (
                c.type_.clone(),
                c.last_transition_time.as_ref().map(|t| t.0),
            )
        })
}

/// Running: follow the Ray job and the submitter until both are done.
pub(super) async fn running(v: &View<'_>) -> Result<Action, ControllerError> {
    if v.bool_spec("suspend") {
        v.patch_status(json!({"jobDeploymentStatus": "Suspending"}))
            .await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    if let Some((reason, msg)) = v.deadline(false) {
        return fail(v, &reason, &msg, json!({})).await;
    }
    ensure_rayjob_service(v).await?;
    let job = v.jobs().get_opt(&v.name).await?;
    let finished = submitter_finished(job.as_ref());
    let mut job_status = s(&v.status, "/jobStatus").to_owned();
    if let Some((kind, _)) = &finished
        && kind == "Failed"
    {
        let reason = if job_status == "FAILED" {
            "AppFailed"
        } else {
            "SubmissionFailed"
        };
        let msg = "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit";
        return fail(v, reason, msg, json!({})).await;
    }
    let info = match v
        .ctx
        .dashboard
        .job_info(&v.ns, v.cluster(), s(&v.status, "/jobId"))
        .await
    {
        Ok(info) => info,
        // An unreachable dashboard changes nothing; KubeRay logs it and requeues.
        Err(e) => {
            tracing::debug!(error = %e, rayjob = %v.name, "Ray job status unavailable");
            return Ok(Action::requeue(REQUEUE));
        }
    };
    if let Some((_, Some(at))) = &finished
        && Timestamp::now() > *at + SUBMITTER_GRACE
        && !is_terminal(
            info.as_ref()
                .map_or(job_status.as_str(), |i| i.status.as_str()),
        )
    {
        return fail(
            v,
            "JobDeploymentStatusTransitionGracePeriodExceeded",
            "The RayJob submitter finished 30 seconds ago but the Ray job is still not terminal",
            json!({"jobStatus": "FAILED"}),
        )
        .await;
    }
    let patch = match &info {
        None if finished.is_some() => {
            return fail(
                v,
                "AppFailed",
                "Submitter completed but Ray job not found",
                json!({}),
            )
            .await;
        }
        None => json!({}),
        Some(i) => {
            job_status.clone_from(&i.status);
            info_patch(i)
        }
    };
    if is_terminal(&job_status) && finished.is_some() {
        return complete(v, &job_status, patch).await;
    }
    let changed = patch
        .as_object()
        .is_some_and(|p| p.iter().any(|(k, val)| v.status.get(k) != Some(val)));
    if changed {
        v.patch_status(patch).await?;
    }
    Ok(Action::requeue(REQUEUE))
}

/// `jobStatus`, `message` and `rayJobInfo` from the dashboard's job entry.
fn info_patch(i: &RayJobInfo) -> Value {
    let ms = |m: i64| {
        Timestamp::from_millisecond(m)
            .ok()
            .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
    };
    let mut ri = json!({});
    if i.start_ms > 0 {
        ri["startTime"] = json!(ms(i.start_ms));
    }
    if i.end_ms > 0 {
        ri["endTime"] = json!(ms(i.end_ms));
    }
    json!({"jobStatus": i.status, "message": i.message, "rayJobInfo": ri})
}

/// The Ray job is terminal and the submitter done: Complete (counting a success),
/// or the failure path for a FAILED job.
async fn complete(
    v: &View<'_>,
    job_status: &str,
    mut patch: Value,
) -> Result<Action, ControllerError> {
    if job_status == "FAILED" {
        return fail(v, "AppFailed", s(&patch, "/message"), patch.clone()).await;
    }
    patch["jobDeploymentStatus"] = json!("Complete");
    patch["endTime"] = json!(now());
    if job_status == "SUCCEEDED" {
        patch["succeeded"] = json!(
            v.status
                .get("succeeded")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1
        );
    }
    v.patch_status(patch).await?;
    Ok(Action::requeue(Duration::ZERO))
}
