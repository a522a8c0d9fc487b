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

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::dashboard::is_terminal;
use super::events::{Kind, emit};
use super::names::{
    CREATED_BY, IDENTIFIER, JOB_SUBMISSION_MODE, NODE_TYPE, ORIGINATED_FROM_CR_NAME,
    ORIGINATED_FROM_CRD, RAY_CLUSTER, RAYJOB_FINALIZER, SUBMITTER_CONTAINER, dashboard_url,
    head_service, with_suffix,
};
use super::validation::{validate_metadata, validate_spec};
use super::{ControllerError, Shared, raycluster_resource, rayjob_resource};

const REPORTER: &str = "rayjob-controller";
const REQUEUE: Duration = Duration::from_secs(3);
/// The submitter finished this long ago but the Ray job is not terminal → FAILED.
const SUBMITTER_GRACE: SignedDuration = SignedDuration::from_secs(30);

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

fn now_str() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn parse_time(v: Option<&Value>) -> Option<Timestamp> {
    v?.as_str()?.parse().ok()
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Everything one reconcile needs about its RayJob.
struct View<'a> {
    ctx: &'a Shared,
    rj: &'a DynamicObject,
    ns: String,
    name: String,
    spec: Value,
    status: Value,
    api: Api<DynamicObject>,
}

impl View<'_> {
    fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        self.rj.object_ref(&rayjob_resource())
    }

    async fn event(&self, kind: Kind, reason: &str, action: &str, note: &str) {
        emit(
            &self.ctx.client,
            REPORTER,
            &self.reference(),
            kind,
            reason,
            action,
            note,
        )
        .await;
    }

    async fn patch_status(&self, patch: Value) -> Result<(), ControllerError> {
        self.api
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": patch })),
            )
            .await?;
        Ok(())
    }

    fn cluster(&self) -> &str {
        s(&self.status, "/rayClusterName")
    }

    fn owner_ref(&self) -> Value {
        json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "name": self.name,
               "uid": self.rj.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true})
    }

    fn i64_spec(&self, key: &str) -> Option<i64> {
        self.spec.get(key).and_then(Value::as_i64)
    }

    fn bool_spec(&self, key: &str) -> bool {
        self.spec.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    fn mode(&self) -> &str {
        self.spec
            .get("submissionMode")
            .and_then(Value::as_str)
            .unwrap_or("K8sJobMode")
    }

    /// Deadline checks shared by Initializing and Running; returns the failure patch.
    fn deadline(&self, pre_running: bool) -> Option<(String, String)> {
        let start = parse_time(self.status.get("startTime"))?;
        let now = Timestamp::now();
        if let Some(ads) = self.i64_spec("activeDeadlineSeconds")
            && now >= start + SignedDuration::from_secs(ads)
        {
            return Some((
                "DeadlineExceeded".into(),
                format!(
                    "The RayJob has passed the activeDeadlineSeconds. StartTime: {}. ActiveDeadlineSeconds: {ads}",
                    s(&self.status, "/startTime")
                ),
            ));
        }
        if pre_running
            && let Some(p) = self.i64_spec("preRunningDeadlineSeconds")
            && now >= start + SignedDuration::from_secs(p)
        {
            return Some((
                "PreRunningDeadlineExceeded".into(),
                format!(
                    "The RayJob has passed the preRunningDeadlineSeconds. StartTime: {}. PreRunningDeadlineSeconds: {p}",
                    s(&self.status, "/startTime")
                ),
            ));
        }
        None
    }
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
        return finalize(&v).await;
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
        "" | "New" => new(&v).await,
        "Initializing" => initializing(&v).await,
        "Running" => running(&v).await,
        "Complete" | "Failed" => finished(&v).await,
        "Suspending" | "Retrying" => tear_down(&v, &state).await,
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

/// Finalizer handler: stop the Ray job if it is not terminal, drop the finalizer.
async fn finalize(v: &View<'_>) -> Result<Action, ControllerError> {
    let finalizers = v.rj.finalizers();
    if !finalizers.iter().any(|f| f == RAYJOB_FINALIZER) {
        return Ok(Action::await_change());
    }
    if !is_terminal(s(&v.status, "/jobStatus")) {
        v.ctx
            .dashboard
            .stop(&v.ns, v.cluster(), s(&v.status, "/jobId"));
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

async fn new(v: &View<'_>) -> Result<Action, ControllerError> {
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
        "jobId": job_id, "rayClusterName": cluster, "jobStatus": "", "startTime": now_str(),
        "jobDeploymentStatus": "Initializing", "succeeded": v.status.get("succeeded").cloned().unwrap_or(json!(0)),
        "failed": v.status.get("failed").cloned().unwrap_or(json!(0)),
    }))
    .await?;
    Ok(Action::requeue(Duration::ZERO))
}

/// Moves to Failed (or Retrying when `backoffLimit` allows, §3.5); sets `endTime`.
async fn fail(
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
        patch["endTime"] = json!(now_str());
    }
    v.patch_status(patch).await?;
    Ok(Action::requeue(Duration::ZERO))
}

fn cluster_object(v: &View<'_>, cluster: &str) -> Value {
    let mut labels = v.rj.labels().clone();
    labels.insert(ORIGINATED_FROM_CR_NAME.into(), v.name.clone());
    labels.insert(ORIGINATED_FROM_CRD.into(), "RayJob".into());
    labels.insert(JOB_SUBMISSION_MODE.into(), v.mode().into());
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": cluster, "namespace": v.ns, "labels": labels,
                     "annotations": v.rj.annotations(), "ownerReferences": [v.owner_ref()]},
        "spec": v.spec.get("rayClusterSpec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// The submitter command (`job.go` BuildJobSubmitCommand).
pub fn submit_command(v_spec: &Value, dashboard: &str, job_id: &str) -> String {
    let addr = format!("http://{dashboard}");
    let mut submit = format!("ray job submit --address {addr} --no-wait");
    if let Some(yaml) = v_spec.get("runtimeEnvYAML").and_then(Value::as_str)
        && let Ok(env) = serde_yaml::from_str::<Value>(yaml)
    {
        submit.push_str(&format!(" --runtime-env-json '{env}'"));
    }
    if let Some(m) = v_spec.get("metadata").filter(|m| m.is_object()) {
        submit.push_str(&format!(" --metadata-json '{m}'"));
    }
    submit.push_str(&format!(" --submission-id {job_id}"));
    for (k, flag) in [
        ("entrypointNumCpus", "--entrypoint-num-cpus"),
        ("entrypointNumGpus", "--entrypoint-num-gpus"),
        ("entrypointResources", "--entrypoint-resources"),
    ] {
        if let Some(val) = v_spec.get(k).filter(|x| !x.is_null()) {
            let val = val
                .as_str()
                .map_or_else(|| val.to_string(), |s| format!("'{s}'"));
            submit.push_str(&format!(" {flag} {val}"));
        }
    }
    submit.push_str(&format!(" -- {}", s(v_spec, "/entrypoint")));
    format!(
        "until ray job list --address {addr} >/dev/null 2>&1 ; do echo \"Waiting for Ray Dashboard GCS to become healthy at {addr} ...\" ; sleep 2 ; done ; \
         if ! ray job status --address {addr} {job_id} >/dev/null 2>&1 ; then {submit} ; fi ; \
         ray job logs --address {addr} --follow {job_id}"
    )
}

fn submitter_job(
    v: &View<'_>,
    head_image: &str,
    dashboard: &str,
    job_id: &str,
) -> Result<Job, ControllerError> {
    let labels = json!({ORIGINATED_FROM_CR_NAME: v.name, ORIGINATED_FROM_CRD: "RayJob", CREATED_BY: "kuberay-operator"});
    let env = json!([
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "RAY_DASHBOARD_ADDRESS", "value": dashboard},
        {"name": "RAY_JOB_SUBMISSION_ID", "value": job_id},
    ]);
    let cmd = submit_command(&v.spec, dashboard, job_id);
    let mut template = v.spec.get("submitterPodTemplate").cloned().filter(|t| t.is_object()).unwrap_or_else(|| {
        json!({"spec": {"restartPolicy": "Never", "containers": [{
            "name": SUBMITTER_CONTAINER, "image": head_image,
            "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        }]}})
    });
    if let Some(m) = template.as_object_mut() {
        let meta = m.entry("metadata").or_insert_with(|| json!({}));
        let l = meta
            .as_object_mut()
            .map(|o| o.entry("labels").or_insert_with(|| json!({})));
        if let (Some(Value::Object(l)), Some(add)) = (l, labels.as_object()) {
            for (k, val) in add {
                l.insert(k.clone(), val.clone());
            }
        }
    }
    if let Some(c0) = template.pointer_mut("/spec/containers/0") {
        if c0.get("command").is_none() {
            c0["command"] = json!(["/bin/bash", "-ce", "--"]);
            c0["args"] = json!([cmd]);
        }
        let mut all = c0
            .get("env")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        all.extend(env.as_array().cloned().unwrap_or_default());
        c0["env"] = Value::Array(all);
    }
    if template.pointer("/spec/restartPolicy").is_none() {
        template["spec"]["restartPolicy"] = json!("Never");
    }
    let backoff = v
        .spec
        .pointer("/submitterConfig/backoffLimit")
        .and_then(Value::as_i64)
        .unwrap_or(2);
    Ok(serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": v.name, "namespace": v.ns, "labels": labels, "ownerReferences": [v.owner_ref()]},
        "spec": {"backoffLimit": backoff, "template": template},
    }))?)
}

async fn initializing(v: &View<'_>) -> Result<Action, ControllerError> {
    if v.bool_spec("suspend") {
        v.patch_status(json!({"jobDeploymentStatus": "Suspending"}))
            .await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    if let Some((reason, msg)) = v.deadline(true) {
        return fail(v, &reason, &msg, json!({})).await;
    }
    let rc_api: Api<DynamicObject> =
        Api::namespaced_with(v.ctx.client.clone(), &v.ns, &raycluster_resource());
    let cluster = v.cluster().to_owned();
    let rc = match rc_api.get_opt(&cluster).await? {
        Some(rc) => rc,
        None if v.spec.get("clusterSelector").is_some_and(|c| c.is_object()) => {
            v.event(
                Kind::Warning,
                "RayClusterNotFound",
                "Create",
                &format!("RayCluster {}/{cluster} not found", v.ns),
            )
            .await;
            return Ok(Action::requeue(REQUEUE));
        }
        None => {
            let obj: DynamicObject = serde_json::from_value(cluster_object(v, &cluster))?;
            match rc_api.create(&PostParams::default(), &obj).await {
                Ok(rc) => {
                    v.event(
                        Kind::Normal,
                        "CreatedRayCluster",
                        "Create",
                        &format!("Created RayCluster {}/{cluster}", v.ns),
                    )
                    .await;
                    rc
                }
                Err(e) => {
                    v.event(
                        Kind::Warning,
                        "FailedToCreateRayCluster",
                        "Create",
                        &format!("Failed to create RayCluster {}/{cluster}: {e}", v.ns),
                    )
                    .await;
                    return Err(e.into());
                }
            }
        }
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
    let jobs: Api<Job> = Api::namespaced(v.ctx.client.clone(), &v.ns);
    if jobs.get_opt(&v.name).await?.is_none() {
        let head_image = s(
            &v.spec,
            "/rayClusterSpec/headGroupSpec/template/spec/containers/0/image",
        )
        .to_owned();
        let job = submitter_job(v, &head_image, &dashboard, s(&v.status, "/jobId"))?;
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {
                v.event(
                    Kind::Normal,
                    "CreatedRayJobSubmitter",
                    "Create",
                    &format!("Created Kubernetes Job {}/{}", v.ns, v.name),
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                v.event(
                    Kind::Warning,
                    "FailedToCreateRayJobSubmitter",
                    "Create",
                    &format!(
                        "Failed to create new Kubernetes Job {}/{}: {e}",
                        v.ns, v.name
                    ),
                )
                .await;
                return Err(e.into());
            }
        }
    }
    v.patch_status(json!({"jobDeploymentStatus": "Running", "dashboardURL": dashboard, "rayClusterStatus": rc_status}))
        .await?;
    Ok(Action::requeue(Duration::ZERO))
}

async fn ensure_rayjob_service(v: &View<'_>) -> Result<(), ControllerError> {
    let svcs: Api<Service> = Api::namespaced(v.ctx.client.clone(), &v.ns);
    let name = head_service(&v.name);
    if svcs.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let svc: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": v.ns, "ownerReferences": [v.owner_ref()], "labels": {
            ORIGINATED_FROM_CR_NAME: v.name, ORIGINATED_FROM_CRD: "RayJob", NODE_TYPE: "head",
            IDENTIFIER: format!("{}-head", v.name)}},
        "spec": {"selector": {RAY_CLUSTER: v.cluster(), NODE_TYPE: "head"}, "type": "ClusterIP",
                 "ports": [{"name": "dashboard", "port": 8265, "protocol": "TCP"}, {"name": "client", "port": 10001, "protocol": "TCP"}]},
    }))?;
    match svcs.create(&PostParams::default(), &svc).await {
        Ok(_) => {
            v.event(
                Kind::Normal,
                "CreatedService",
                "Create",
                &format!("Created service {}/{name}", v.ns),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
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

async fn running(v: &View<'_>) -> Result<Action, ControllerError> {
    if v.bool_spec("suspend") {
        v.patch_status(json!({"jobDeploymentStatus": "Suspending"}))
            .await?;
        return Ok(Action::requeue(Duration::ZERO));
    }
    if let Some((reason, msg)) = v.deadline(false) {
        return fail(v, &reason, &msg, json!({})).await;
    }
    ensure_rayjob_service(v).await?;
    let jobs: Api<Job> = Api::namespaced(v.ctx.client.clone(), &v.ns);
    let job = jobs.get_opt(&v.name).await?;
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
    let info = v
        .ctx
        .dashboard
        .get(&v.ns, v.cluster(), s(&v.status, "/jobId"));
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
    let mut patch = json!({});
    match &info {
        None if finished.is_some() => {
            return fail(
                v,
                "AppFailed",
                "Submitter completed but Ray job not found",
                json!({}),
            )
            .await;
        }
        None => {}
        Some(i) => {
            job_status.clone_from(&i.status);
            patch["jobStatus"] = json!(i.status);
            patch["message"] = json!(i.message);
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
            patch["rayJobInfo"] = ri;
        }
    }
    if is_terminal(&job_status) && finished.is_some() {
        if job_status == "FAILED" {
            return fail(v, "AppFailed", s(&patch, "/message"), patch.clone()).await;
        }
        patch["jobDeploymentStatus"] = json!("Complete");
        patch["endTime"] = json!(now_str());
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
        return Ok(Action::requeue(Duration::ZERO));
    }
    let changed = patch
        .as_object()
        .is_some_and(|p| p.iter().any(|(k, val)| v.status.get(k) != Some(val)));
    if changed {
        v.patch_status(patch).await?;
    }
    Ok(Action::requeue(REQUEUE))
}

async fn finished(v: &View<'_>) -> Result<Action, ControllerError> {
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
    let rc_api: Api<DynamicObject> =
        Api::namespaced_with(v.ctx.client.clone(), &v.ns, &raycluster_resource());
    if let Some(rc) = rc_api.get_opt(&cluster).await?
        && rc.metadata.deletion_timestamp.is_none()
    {
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
        match rc_api.delete(&cluster, &dp).await {
            Ok(_) => {
                v.ctx.dashboard.drop_cluster(&v.ns, &cluster);
                v.event(
                    Kind::Normal,
                    "DeletedRayCluster",
                    "Delete",
                    &format!("Deleted RayCluster {}/{cluster}", v.ns),
                )
                .await;
            }
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
async fn tear_down(v: &View<'_>, state: &str) -> Result<Action, ControllerError> {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let rc_api: Api<DynamicObject> =
        Api::namespaced_with(v.ctx.client.clone(), &v.ns, &raycluster_resource());
    let jobs: Api<Job> = Api::namespaced(v.ctx.client.clone(), &v.ns);
    let cluster = v.cluster().to_owned();
    let mut pending = false;
    if !cluster.is_empty()
        && let Some(rc) = rc_api.get_opt(&cluster).await?
    {
        pending = true;
        if rc.metadata.deletion_timestamp.is_none() {
            rc_api.delete(&cluster, &dp).await?;
            v.ctx.dashboard.drop_cluster(&v.ns, &cluster);
            v.event(
                Kind::Normal,
                "DeletedRayCluster",
                "Delete",
                &format!("Deleted RayCluster {}/{cluster}", v.ns),
            )
            .await;
        }
    }
    if let Some(job) = jobs.get_opt(&v.name).await? {
        pending = true;
        if job.metadata.deletion_timestamp.is_none() {
            jobs.delete(&v.name, &dp).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_command_has_the_real_shape() {
        let spec = json!({"entrypoint": "python /home/ray/samples/sample_code.py",
                          "runtimeEnvYAML": "pip:\n  - requests==2.26.0\nenv_vars:\n  counter_name: test_counter\n"});
        let cmd = submit_command(&spec, "c-head-svc.ns.svc.cluster.local:8265", "job-x");
        assert!(
            cmd.contains(
                "ray job submit --address http://c-head-svc.ns.svc.cluster.local:8265 --no-wait"
            ),
            "{cmd}"
        );
        assert!(
            cmd.contains("--runtime-env-json '{\"env_vars\":{\"counter_name\":\"test_counter\"}"),
            "{cmd}"
        );
        assert!(
            cmd.contains("--submission-id job-x -- python /home/ray/samples/sample_code.py"),
            "{cmd}"
        );
        assert!(cmd.ends_with(
            "ray job logs --address http://c-head-svc.ns.svc.cluster.local:8265 --follow job-x"
        ));
    }
}
