//! The children a RayJob creates (K8sJobMode): its RayCluster (labels and
//! annotations of the RayJob, the `rayClusterSpec`), the submitter batch Job running
//! `ray job submit` + `ray job logs --follow` (`job.go` BuildJobSubmitCommand), and
//! the RayJob head Service `<rayjob>-head-svc`.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::ResourceExt;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::view::{View, s};
use crate::controllers::error::ControllerError;
use crate::controllers::events::Kind;
use crate::controllers::names::{
    CREATED_BY, IDENTIFIER, JOB_SUBMISSION_MODE, NODE_TYPE, ORIGINATED_FROM_CR_NAME,
    ORIGINATED_FROM_CRD, RAY_CLUSTER, SUBMITTER_CONTAINER, head_service,
};

/// The RayCluster object of the RayJob.
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
    // KubeRay trims the entrypoint (`BuildJobSubmitCommand`): a YAML block scalar's
    // trailing newline would otherwise end the command before ` ; fi`.
    submit.push_str(&format!(" -- {}", s(v_spec, "/entrypoint").trim()));
    format!(
        "until ray job list --address {addr} >/dev/null 2>&1 ; do echo \"Waiting for Ray Dashboard GCS to become healthy at {addr} ...\" ; sleep 2 ; done ; \
         if ! ray job status --address {addr} {job_id} >/dev/null 2>&1 ; then {submit} ; fi ; \
         ray job logs --address {addr} --follow {job_id}"
    )
}

/// The submitter batch Job.
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

/// Creates the RayJob head Service unless it exists.
pub(super) async fn ensure_rayjob_service(v: &View<'_>) -> Result<(), ControllerError> {
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

/// The RayJob's RayCluster: fetched, or created unless the RayJob selects an existing
/// one (`None`: it does not exist yet; requeue).
pub(super) async fn ensure_cluster(
    v: &View<'_>,
    cluster: &str,
) -> Result<Option<DynamicObject>, ControllerError> {
    let rc_api = v.clusters();
    if let Some(rc) = rc_api.get_opt(cluster).await? {
        return Ok(Some(rc));
    }
    if v.spec.get("clusterSelector").is_some_and(|c| c.is_object()) {
        v.event(
            Kind::Warning,
            "RayClusterNotFound",
            "Create",
            &format!("RayCluster {}/{cluster} not found", v.ns),
        )
        .await;
        return Ok(None);
    }
    let obj: DynamicObject = serde_json::from_value(cluster_object(v, cluster))?;
    match rc_api.create(&PostParams::default(), &obj).await {
        Ok(rc) => {
            v.event(
                Kind::Normal,
                "CreatedRayCluster",
                "Create",
                &format!("Created RayCluster {}/{cluster}", v.ns),
            )
            .await;
            Ok(Some(rc))
        }
        Err(e) => {
            v.event(
                Kind::Warning,
                "FailedToCreateRayCluster",
                "Create",
                &format!("Failed to create RayCluster {}/{cluster}: {e}", v.ns),
            )
            .await;
            Err(e.into())
        }
    }
}

/// Creates the submitter Job (named like the RayJob) unless it exists.
pub(super) async fn ensure_submitter(v: &View<'_>, dashboard: &str) -> Result<(), ControllerError> {
    let jobs = v.jobs();
    if jobs.get_opt(&v.name).await?.is_some() {
        return Ok(());
    }
    let head_image = s(
        &v.spec,
        "/rayClusterSpec/headGroupSpec/template/spec/containers/0/image",
    )
    .to_owned();
    let job = submitter_job(v, &head_image, dashboard, s(&v.status, "/jobId"))?;
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {
            v.event(
                Kind::Normal,
                "CreatedRayJobSubmitter",
                "Create",
                &format!("Created Kubernetes Job {}/{}", v.ns, v.name),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
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
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_line_entrypoint_is_trimmed_and_the_script_parses() {
        let spec = json!({"entrypoint": "python -c \"\nprint(1)\n\"\n"});
        let cmd = submit_command(&spec, "c-head-svc:8265", "job-x");
        assert!(
            cmd.contains("-- python -c \"\nprint(1)\n\" ; fi ;"),
            "{cmd}"
        );
        let check = std::process::Command::new("bash")
            .args(["-n", "-c", &cmd])
            .output()
            .expect("bash -n");
        assert!(
            check.status.success(),
            "{}",
            String::from_utf8_lossy(&check.stderr)
        );
    }

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
