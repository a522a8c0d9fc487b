//! The batch/v1 Job controller (`kube-controller-manager` job-controller), enough for
//! KubeRay's submitter Jobs: one pod at a time (`completions`/`parallelism` 1), a new
//! pod per failure until `backoffLimit` failures are exceeded, then the conditions
//! `FailureTarget` + `Failed` (`BackoffLimitExceeded`); a succeeded pod gives
//! `SuccessCriteriaMet` + `Complete`, like Kubernetes ≥ 1.31.
//!
//! Simplifications (documented): no pod-recreation back-off delay (the real controller
//! waits 10 s × 2ⁿ), no `activeDeadlineSeconds` for the Job itself, no pod failure
//! policy, no `batch.kubernetes.io/job-tracking` finalizer on pods.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};

use super::error::ControllerError;
use super::events::{Kind, emit};
use super::names::{CONTROLLER_UID, CONTROLLER_UID_LEGACY, JOB_NAME, JOB_NAME_LEGACY};
use super::shared::Shared;
use super::status::merge_status;

const REPORTER: &str = "job-controller";

/// Runs the Job controller until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let client = shared.client.clone();
    let jobs: Api<Job> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client);
    let token = shared.shutdown.clone();
    Controller::new(jobs, watcher::Config::default())
        .watches(pods, watcher::Config::default(), |pod: Pod| {
            owner_of(&pod, "Job")
        })
        .with_config(
            kube::runtime::controller::Config::default().concurrency(shared.cfg.concurrency),
        )
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(reconcile, error_policy, shared)
        .for_each(|_| futures::future::ready(()))
        .await;
    Ok(())
}

/// Maps a child to its controller owner of `kind` (same namespace).
pub fn owner_of<K>(child: &impl ResourceExt, kind: &str) -> Option<ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
{
    let ns = child.namespace()?;
    let owner = child
        .owner_references()
        .iter()
        .find(|o| o.kind == kind && o.controller == Some(true))?;
    Some(ObjectRef::new(&owner.name).within(&ns))
}

fn error_policy(_job: Arc<Job>, err: &ControllerError, _ctx: Arc<Shared>) -> Action {
    tracing::warn!(error = %err, "job reconcile failed");
    Action::requeue(Duration::from_secs(1))
}

fn has_condition(status: Option<&JobStatus>, type_: &str) -> bool {
    status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn condition(type_: &str, reason: &str, message: &str) -> JobCondition {
    let now = Time(Timestamp::now());
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now),
    }
}

async fn reconcile(cached: Arc<Job>, ctx: Arc<Shared>) -> Result<Action, ControllerError> {
    let ns = cached.namespace().unwrap_or_default();
    // Live read: the cache may not show our last status write yet.
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(job) = jobs.get_opt(&cached.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let name = job.name_any();
    let uid = job.uid().unwrap_or_default();
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let status = job.status.as_ref();
    if has_condition(status, "Complete") || has_condition(status, "Failed") {
        return Ok(Action::await_change());
    }
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pods = pods_api
        .list(&ListParams::default().labels(&format!("{CONTROLLER_UID}={uid}")))
        .await?;
    let counts = Counts::of(&pods.items);
    let backoff_limit = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
    let start_time = status
        .and_then(|s| s.start_time.clone())
        .unwrap_or(Time(Timestamp::now()));
    let mut new_status = JobStatus {
        start_time: Some(start_time),
        active: Some(counts.active),
        ready: Some(counts.ready),
        succeeded: Some(counts.succeeded),
        failed: Some(counts.failed),
        terminating: Some(0),
        conditions: status.and_then(|s| s.conditions.clone()),
        uncounted_terminated_pods: Some(Default::default()),
        ..Default::default()
    };
    if counts.succeeded >= 1 || counts.failed > backoff_limit {
        return finish(&ctx, &job, new_status, counts.succeeded >= 1).await;
    }
    if counts.active == 0 && !job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false) {
        let pod = pod_for(&job, &uid)?;
        let created = pods_api.create(&PostParams::default(), &pod).await?;
        new_status.active = Some(1);
        emit(
            &ctx.client,
            REPORTER,
            &job.object_ref(&()),
            Kind::Normal,
            "SuccessfulCreate",
            "Create",
            &format!("Created pod: {}", created.name_any()),
        )
        .await;
    }
    let old = serde_json::to_value(status)?;
    let mut cmp = new_status.clone();
    if let Some(s) = status {
        cmp.start_time.clone_from(&s.start_time);
    }
    if serde_json::to_value(&cmp)? != old {
        patch_status(&ctx, &ns, &name, &new_status).await?;
    }
    Ok(Action::requeue(Duration::from_secs(30)))
}

/// What the Job's pods add up to.
struct Counts {
    succeeded: i32,
    failed: i32,
    /// Neither finished nor being deleted.
    active: i32,
    /// Active and Ready.
    ready: i32,
}

impl Counts {
    fn of(pods: &[Pod]) -> Self {
        let phase = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        };
        let active: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                !matches!(phase(p).as_str(), "Succeeded" | "Failed")
                    && p.metadata.deletion_timestamp.is_none()
            })
            .collect();
        let ready = active
            .iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .count() as i32;
        Self {
            succeeded: pods.iter().filter(|p| phase(p) == "Succeeded").count() as i32,
            failed: pods.iter().filter(|p| phase(p) == "Failed").count() as i32,
            active: active.len() as i32,
            ready,
        }
    }
}

/// Ends the Job: Complete (a pod succeeded) or Failed (more failed pods than
/// `backoffLimit`), with the real conditions and event.
async fn finish(
    ctx: &Shared,
    job: &Job,
    mut status: JobStatus,
    complete: bool,
) -> Result<Action, ControllerError> {
    const COMPLETED: &str = "Reached expected number of succeeded pods";
    const BACKOFF: &str = "Job has reached the specified backoff limit";
    status.active = Some(0);
    let (kind, reason, note) = if complete {
        status.completion_time = Some(Time(Timestamp::now()));
        status.conditions = Some(vec![
            condition("SuccessCriteriaMet", "CompletionsReached", COMPLETED),
            condition("Complete", "CompletionsReached", COMPLETED),
        ]);
        (Kind::Normal, "Completed", "Job completed")
    } else {
        status.conditions = Some(vec![
            condition("FailureTarget", "BackoffLimitExceeded", BACKOFF),
            condition("Failed", "BackoffLimitExceeded", BACKOFF),
        ]);
        (Kind::Warning, "BackoffLimitExceeded", BACKOFF)
    };
    let ns = job.namespace().unwrap_or_default();
    patch_status(ctx, &ns, &job.name_any(), &status).await?;
    emit(
        &ctx.client,
        REPORTER,
        &job.object_ref(&()),
        kind,
        reason,
        reason,
        note,
    )
    .await;
    Ok(Action::await_change())
}

async fn patch_status(
    ctx: &Shared,
    ns: &str,
    name: &str,
    status: &JobStatus,
) -> Result<(), ControllerError> {
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns);
    merge_status(&api, name, status).await?;
    Ok(())
}

/// The pod the job controller creates from the Job's template.
fn pod_for(job: &Job, uid: &str) -> Result<Pod, ControllerError> {
    let name = job.name_any();
    let template = job
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = meta.labels.unwrap_or_default();
    labels.insert(CONTROLLER_UID.into(), uid.into());
    labels.insert(CONTROLLER_UID_LEGACY.into(), uid.into());
    labels.insert(JOB_NAME.into(), name.clone());
    labels.insert(JOB_NAME_LEGACY.into(), name.clone());
    let spec = template.spec.ok_or_else(|| ControllerError::Malformed {
        kind: "Job",
        name: name.clone(),
        reason: "spec.template.spec is missing".into(),
    })?;
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: job.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                name,
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}
