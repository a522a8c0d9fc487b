//! The lifecycle controller: follows the gateway's RayJobs (a kube-runtime watcher on
//! the `app.kubernetes.io/managed-by=forge-gateway` label) and moves each job through
//! dispatched → initializing → running → succeeded | failed | cancelled | timed-out,
//! persisting every transition with its reason.
//!
//! KubeRay status mapping (`../shared/kuberay/SEMANTICS.md`): `""`/New, Initializing,
//! Waiting, Retrying, Suspending, Suspended → initializing; Running → running;
//! Complete → succeeded (STOPPED → cancelled); Failed with DeadlineExceeded or
//! PreRunningDeadlineExceeded → timed-out; any other Failed and ValidationFailed
//! (which never leaves that state) → failed.
//!
//! On a terminal status the driver log (the submitter pod, `batch.kubernetes.io/job-name
//! =<rayjob>`) and the head pod's log are archived to object storage beside the capsule,
//! then the RayJob is deleted at once — the operator's TTL is only the fallback (done
//! concurrently for many jobs, see [`super::cleanup`]). A
//! RayJob whose job is unknown or already over is deleted (orphans never hold GPUs).
//!
//! Calls to the API server that fail transiently (429, 5xx, connection errors) are
//! retried with a short backoff; when log archival still cannot finish, the RayJob is
//! kept (so its pods and logs survive) and a periodic resync — a LIST of the gateway's
//! RayJobs every [`RESYNC`] — tries again, as it does for a failed delete.
//!
//! After the watcher's initial list (every start and every relist) the store is
//! reconciled with what exists: a dispatched job without its RayJob (the gateway died
//! between persisting the intent and creating it) goes back to the queue; a job that
//! was initializing or running and whose RayJob vanished is failed.

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, DynamicObject, ListParams, LogParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use std::sync::Arc;

use super::cleanup::Cleanup;
use super::{JobError, rayjob_api};
use crate::app::AppState;
use crate::rayjob::{LABEL_JOB_ID, LABEL_MANAGED_BY, MANAGED_BY};
use crate::store::{JobRecord, JobState, StoreError, Transition};

/// Container of the KubeRay submitter pod that holds the driver log.
const SUBMITTER_CONTAINER: &str = "ray-job-submitter";
/// Most bytes of one archived log (the tail is kept).
const MAX_LOG_BYTES: i64 = 64 * 1024 * 1024;
/// How often every RayJob of the gateway is looked at again, events or not.
const RESYNC: std::time::Duration = std::time::Duration::from_secs(10);
/// Attempts of one API call that fails transiently.
const ATTEMPTS: u32 = 6;

/// Run the controller until the task is aborted.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api = rayjob_api(&state);
        let cfg = watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
        let mut stream = std::pin::pin!(watcher(api, cfg).default_backoff());
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let cleanup = Arc::new(Cleanup::default());
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let event = tokio::select! {
                ev = stream.next() => match ev {
                    Some(ev) => ev,
                    None => break,
                },
                _ = resync.tick() => {
                    if let Err(e) = resync_all(&state, &cleanup).await {
                        tracing::warn!("lifecycle resync: {e}");
                    }
                    continue;
                }
            };
            let result = match event {
                Ok(watcher::Event::Init) => {
                    seen.clear();
                    Ok(())
                }
                Ok(watcher::Event::InitApply(obj)) => {
                    seen.insert(obj.name_any());
                    on_rayjob(&state, &cleanup, &obj).await
                }
                Ok(watcher::Event::InitDone) => reconcile(&state, &cleanup, &seen).await,
                Ok(watcher::Event::Apply(obj)) => on_rayjob(&state, &cleanup, &obj).await,
                Ok(watcher::Event::Delete(obj)) => on_deleted(&state, &obj).await,
                Err(e) => {
                    tracing::warn!("RayJob watch error (retrying with backoff): {e}");
                    Ok(())
                }
            };
            if let Err(e) = result {
                tracing::warn!("lifecycle: {e}");
            }
        }
    })
}

/// Look at every RayJob of the gateway again (a LIST, not the watch): finishes what a
/// transient failure interrupted (archival, delete) even when no event comes.
async fn resync_all(state: &AppState, cleanup: &Arc<Cleanup>) -> Result<(), JobError> {
    let api = rayjob_api(state);
    let lp = ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"));
    let list = with_retry(|| api.list(&lp)).await?;
    for obj in &list.items {
        if let Err(e) = on_rayjob(state, cleanup, obj).await {
            tracing::warn!(rayjob = %obj.name_any(), "lifecycle resync: {e}");
        }
    }
    Ok(())
}

/// Whether an API error is worth retrying: throttling, a server error, or no answer.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Run an API call, retrying transient failures with a doubling backoff.
async fn with_retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = std::time::Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < ATTEMPTS && transient(&e) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(2));
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The job state a RayJob status means, with the reason to record.
pub fn target_state(status: &serde_json::Value) -> (JobState, String) {
    let s = |k: &str| status.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let deploy = s("jobDeploymentStatus");
    let reason = s("reason");
    let message = s("message");
    let detail = |code: &str| {
        if message.is_empty() {
            code.to_string()
        } else {
            format!("{code}: {message}")
        }
    };
    match deploy {
        "Running" => (JobState::Running, "kuberay.running".into()),
        "Complete" if s("jobStatus") == "STOPPED" => (
            JobState::Cancelled,
            "kuberay.stopped: the Ray job was stopped".into(),
        ),
        "Complete" => (JobState::Succeeded, "kuberay.complete".into()),
        "Failed" if matches!(reason, "DeadlineExceeded" | "PreRunningDeadlineExceeded") => {
            (JobState::TimedOut, detail(&format!("kuberay.{reason}")))
        }
        "Failed" => {
            let code = if reason.is_empty() { "Failed" } else { reason };
            (JobState::Failed, detail(&format!("kuberay.{code}")))
        }
        "ValidationFailed" => (JobState::Failed, detail("kuberay.ValidationFailed")),
        other => {
            let phase = if other.is_empty() { "New" } else { other };
            (JobState::Initializing, format!("kuberay.{phase}"))
        }
    }
}

/// Moves a job towards `to`, re-reading on a lost compare-and-set. Returns the job as
/// it ends up.
pub async fn advance(
    state: &AppState,
    mut job: JobRecord,
    to: JobState,
    reason: String,
) -> Result<JobRecord, JobError> {
    for _ in 0..3 {
        if job.state == to || job.state.is_terminal() || !job.state.can_transition_to(to) {
            return Ok(job);
        }
        let t = Transition::new(&job.id, job.state, to, Some(reason.clone()));
        match state.store.transition(t).await {
            Ok(j) => {
                state.metrics.transition(to);
                if to.is_terminal() {
                    state.queue.wake();
                }
                return Ok(j);
            }
            Err(StoreError::Conflict { .. }) => {
                job = state
                    .store
                    .get(&job.id)
                    .await?
                    .ok_or_else(|| JobError::NotFound(job.id.clone()))?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(job)
}

async fn on_rayjob(
    state: &AppState,
    cleanup: &Arc<Cleanup>,
    obj: &DynamicObject,
) -> Result<(), JobError> {
    let name = obj.name_any();
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let job = match obj.labels().get(LABEL_JOB_ID) {
        Some(id) => state.store.get(id).await?,
        None => None,
    };
    let Some(job) = job else {
        tracing::warn!(rayjob = %name, "deleting an orphan RayJob (no job owns it)");
        return delete_rayjob(state, &name).await;
    };
    if job.state.is_terminal() {
        // Cancelled, or finished but not yet cleaned up (e.g. a crash before the delete).
        cleanup.start(state, job, obj.clone());
        return Ok(());
    }
    let status = obj.data.get("status").cloned().unwrap_or_default();
    let (to, reason) = target_state(&status);
    let job = if to.is_terminal() && job.state == JobState::Dispatched {
        // Record the passage through initializing for a job that ended before we saw it run.
        advance(state, job, JobState::Initializing, "kuberay.New".into()).await?
    } else {
        job
    };
    let job = if to == JobState::Succeeded && job.state == JobState::Initializing {
        // A job that completed ran, even when the watch missed its Running status (a
        // dropped watch, a restart): record the passage so no transition is lost.
        let reason = "kuberay.running: inferred, the job completed before Running was seen";
        advance(state, job, JobState::Running, reason.into()).await?
    } else {
        job
    };
    let job = advance(state, job, to, reason).await?;
    if job.state.is_terminal() {
        cleanup.start(state, job, obj.clone());
    }
    Ok(())
}

/// Archive a finished job's logs, then delete its RayJob — but keep the RayJob (and
/// with it the pods holding the logs) when archival failed transiently; the resync
/// tries again.
pub(crate) async fn archive_then_delete(
    state: &AppState,
    job: &JobRecord,
    obj: &DynamicObject,
) -> Result<(), JobError> {
    let name = obj.name_any();
    if !archive_logs(state, job, obj).await {
        return Err(JobError::Io(format!(
            "archiving the logs of job {} failed; RayJob {name} kept for a retry",
            job.id
        )));
    }
    delete_rayjob(state, &name).await
}

async fn on_deleted(state: &AppState, obj: &DynamicObject) -> Result<(), JobError> {
    let Some(id) = obj.labels().get(LABEL_JOB_ID) else {
        return Ok(());
    };
    let Some(job) = state.store.get(id).await? else {
        return Ok(());
    };
    if job.state.holds_gpus() {
        let reason = "rayjob.deleted: the RayJob was deleted outside Forge".to_string();
        advance(state, job, JobState::Failed, reason).await?;
    }
    Ok(())
}

/// After a (re)list: fix jobs whose RayJob is missing.
async fn reconcile(
    state: &AppState,
    cleanup: &Arc<Cleanup>,
    seen: &BTreeSet<String>,
) -> Result<(), JobError> {
    for job in state.store.active().await? {
        let Some(name) = job.rayjob_name.clone() else {
            continue;
        };
        if seen.contains(&name) {
            continue;
        }
        // The watcher's list may predate a create that just happened: ask directly.
        match rayjob_api(state).get_opt(&name).await? {
            Some(obj) => on_rayjob(state, cleanup, &obj).await?,
            None if job.state == JobState::Dispatched => {
                let t = Transition::new(
                    &job.id,
                    JobState::Dispatched,
                    JobState::Queued,
                    Some("dispatch.retry: the RayJob was never created; queued again".into()),
                );
                match state.store.transition(t).await {
                    Ok(_) => state.queue.wake(),
                    Err(StoreError::Conflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            None => {
                let reason = "rayjob.vanished: the RayJob disappeared".to_string();
                advance(state, job, JobState::Failed, reason).await?;
            }
        }
    }
    Ok(())
}

/// Delete a RayJob (background propagation; the operator's finalizer and the garbage
/// collector remove its RayCluster, submitter Job and pods). Gone already is fine.
pub async fn delete_rayjob(state: &AppState, name: &str) -> Result<(), JobError> {
    let api = rayjob_api(state);
    let dp = DeleteParams::background();
    match with_retry(|| api.delete(name, &dp)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Archive the driver and head logs of a job's RayJob. A pod that does not exist (the
/// job never got that far) is not an error. Returns false when a log that exists could
/// not be archived (the API server or the storage kept failing): the caller keeps the
/// RayJob and tries again later.
pub async fn archive_logs(state: &AppState, job: &JobRecord, obj: &DynamicObject) -> bool {
    let mut complete = true;
    let pods: Api<Pod> = Api::namespaced(state.kube.clone(), &state.config.k8s.namespace);
    let rayjob = obj.name_any();
    let cluster = obj
        .data
        .pointer("/status/rayClusterName")
        .and_then(|v| v.as_str())
        .map(str::to_string);
    let mut sources = vec![(
        "driver",
        format!("batch.kubernetes.io/job-name={rayjob}"),
        Some(SUBMITTER_CONTAINER),
    )];
    if let Some(cluster) = cluster {
        sources.push((
            "head",
            format!("ray.io/cluster={cluster},ray.io/node-type=head"),
            None,
        ));
    }
    for (name, selector, container) in sources {
        let Ok(key) = forge_object_store::log_key(&job.id, name) else {
            continue;
        };
        if state.capsules.get_object(&key).await.is_ok() {
            continue; // archived before (e.g. by a previous run of this controller)
        }
        let lp = ListParams::default().labels(&selector);
        let list = match with_retry(|| pods.list(&lp)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(job = %job.id, "listing {name} pods: {e}");
                complete = false;
                continue;
            }
        };
        // The newest pod (a retried submitter leaves several).
        let Some(pod) = list
            .items
            .iter()
            .max_by_key(|p| p.metadata.creation_timestamp.clone())
        else {
            continue;
        };
        let params = LogParams {
            container: container.map(str::to_string),
            limit_bytes: Some(MAX_LOG_BYTES),
            ..LogParams::default()
        };
        let pod_name = pod.name_any();
        let text = match with_retry(|| pods.logs(&pod_name, &params)).await {
            Ok(t) => t,
            Err(kube::Error::Api(s)) if s.code == 404 => continue, // the pod is gone
            // 400: the container never started ("is waiting to start") — there is no
            // log to archive, and waiting will not make one appear.
            Err(kube::Error::Api(s)) if s.code == 400 => {
                tracing::debug!(job = %job.id, pod = %pod_name, "no {name} log: {}", s.message);
                continue;
            }
            Err(e) => {
                tracing::warn!(job = %job.id, pod = %pod_name, "reading the {name} log: {e}");
                complete = false;
                continue;
            }
        };
        match state
            .capsules
            .put_object(&key, text.into_bytes().into())
            .await
        {
            Ok(()) => state.metrics.log_archived(),
            Err(e) => {
                tracing::warn!(job = %job.id, "archiving the {name} log: {e}");
                complete = false;
            }
        }
    }
    complete
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn maps_kuberay_status_to_job_states() {
        let cases = [
            (json!({}), JobState::Initializing),
            (
                json!({"jobDeploymentStatus": "Initializing"}),
                JobState::Initializing,
            ),
            (
                json!({"jobDeploymentStatus": "Suspended"}),
                JobState::Initializing,
            ),
            (
                json!({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}),
                JobState::Running,
            ),
            (
                json!({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
                JobState::Succeeded,
            ),
            (
                json!({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}),
                JobState::Cancelled,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "AppFailed"}),
                JobState::Failed,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}),
                JobState::TimedOut,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "PreRunningDeadlineExceeded"}),
                JobState::TimedOut,
            ),
            (
                json!({"jobDeploymentStatus": "ValidationFailed"}),
                JobState::Failed,
            ),
        ];
        for (status, want) in cases {
            assert_eq!(target_state(&status).0, want, "{status}");
        }
        let (_, reason) = target_state(&json!({
            "jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "exit 1"
        }));
        assert_eq!(reason, "kuberay.AppFailed: exit 1");
    }
}
