//! The RayCluster `status` (`calculateStatus`): desired / ready worker counts,
//! min / max workers, desired CPU, memory and GPU, endpoints, the head pod, the
//! `HeadPodReady` and `RayClusterProvisioned` conditions, and `state: ready` once
//! every desired pod is Running and Ready (never reset afterwards), with the time it
//! became ready in `stateTransitionTimes.ready`. Only fields the RayCluster CRD
//! defines: a real API server would prune any other.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::pods::{is, pod_ready};
use crate::controllers::names::head_service;
use crate::controllers::raystart::{desired_resource, desired_worker_pods};

fn quantity(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

/// The condition `t` (`ok` or not, for `reason`), keeping its `lastTransitionTime`
/// from `prev` while its status does not change.
fn condition(t: &str, ok: bool, reason: &str, prev: &Value, now: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    let prev_t = prev
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|c| {
            c.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
        })
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime").cloned());
    json!({"type": t, "status": status, "reason": reason, "message": "",
           "lastTransitionTime": prev_t.unwrap_or_else(|| json!(now))})
}

/// The status of `rc` given its live `pods` (`changed`: this reconcile created or
/// deleted pods), stamped `now`; and whether the cluster is (or has been) ready.
pub(super) fn cluster_status(
    rc: &DynamicObject,
    spec: &Value,
    groups: &[Value],
    pods: &[Pod],
    changed: bool,
    now: &str,
) -> (Value, bool) {
    let desired_workers: i64 = groups.iter().map(desired_worker_pods).sum();
    let ready_workers = pods
        .iter()
        .filter(|p| is(p, "worker") && pod_ready(p))
        .count() as i64;
    let head = pods.iter().find(|p| is(p, "head"));
    let head_ready = head.is_some_and(pod_ready);
    let all_ready = !changed
        && head_ready
        && pods.len() as i64 == desired_workers + 1
        && pods.iter().all(pod_ready);
    let old_status = rc.data.get("status").cloned().unwrap_or_else(|| json!({}));
    let was_ready = old_status.get("state").and_then(Value::as_str) == Some("ready");
    let sum = |f: fn(&Value) -> i64| groups.iter().map(f).sum::<i64>();
    let min_workers = sum(|g| {
        g.get("minReplicas").and_then(Value::as_i64).unwrap_or(0)
            * g.get("numOfHosts").and_then(Value::as_i64).unwrap_or(1)
    });
    let max_workers = sum(|g| {
        g.get("maxReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(i64::from(i32::MAX))
            * g.get("numOfHosts").and_then(Value::as_i64).unwrap_or(1)
    });
    let provisioned = all_ready
        || old_status
            .get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                c.get("type").and_then(Value::as_str) == Some("RayClusterProvisioned")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            });
    let name = rc.name_any();
    let head_ip = head.and_then(|p| p.status.as_ref()?.pod_ip.clone());
    let mut status = json!({
        "desiredWorkerReplicas": desired_workers,
        "availableWorkerReplicas": ready_workers,
        "readyWorkerReplicas": ready_workers,
        "minWorkerReplicas": min_workers,
        "maxWorkerReplicas": max_workers,
        "desiredCPU": quantity(desired_resource(spec, "cpu")),
        "desiredMemory": quantity(desired_resource(spec, "memory")),
        "desiredGPU": quantity(desired_resource(spec, "nvidia.com/gpu")),
        "desiredTPU": "0",
        "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
        "head": {
            "podName": head.map(|p| p.name_any()),
            "podIP": head_ip,
            "serviceName": head_service(&name),
            "serviceIP": head_ip,
        },
        "observedGeneration": rc.metadata.generation,
        "conditions": [
            condition("HeadPodReady", head_ready, if head_ready { "HeadPodRunningAndReady" } else { "HeadPodNotFound" }, &old_status, now),
            condition("RayClusterProvisioned", provisioned, if provisioned { "AllPodRunningAndReadyFirstTime" } else { "RayClusterPodsProvisioning" }, &old_status, now),
        ],
    });
    if all_ready || was_ready {
        // KubeRay records when the cluster entered each state (`stateTransitionTimes`).
        status["state"] = json!("ready");
        status["stateTransitionTimes"] = old_status
            .get("stateTransitionTimes")
            .cloned()
            .filter(|t| t.get("ready").is_some())
            .unwrap_or_else(|| json!({"ready": now}));
    }
    (status, all_ready || was_ready)
}
