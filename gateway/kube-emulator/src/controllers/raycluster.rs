//! The RayCluster controller of the simulated KubeRay operator (`rcctrl`): the head
//! Service `<cluster>-head-svc`, the head pod and the worker pods (generateName, the
//! real labels, controller ownerReferences to the RayCluster), deletion of finished
//! pods (`shouldDeletePod`), scale up/down to clamp(replicas, min, max) × numOfHosts,
//! and `status` (`state: ready` once every desired pod is Running and Ready; never
//! reset afterwards). Events come from `raycluster-controller` (`SEMANTICS.md` §4, §5).
//!
//! Not emulated: the autoscaler sidecar and its RBAC objects, the injected
//! `wait-gcs-ready` init container of workers, GCS fault tolerance, suspend.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::events::{Kind, emit};
use super::names::{
    APP_NAME, CREATED_BY, GROUP, IDENTIFIER, IS_RAY_NODE, NODE_TYPE, RAY_CLUSTER, REPLICA_INDEX,
    head_service,
};
use super::raystart::{desired_resource, desired_worker_pods, effective_params, ray_start_command};
use super::{ControllerError, Shared, raycluster_resource};

const REPORTER: &str = "raycluster-controller";

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

fn pod_phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn pod_ready(p: &Pod) -> bool {
    pod_phase(p) == "Running"
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
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

/// Labels KubeRay puts on a Ray pod (`pod.go` labelPod): template and group labels
/// first, then the reserved keys, which cannot be overridden.
pub fn pod_labels(
    cluster: &str,
    node_type: &str,
    group: &str,
    template_labels: Option<&Value>,
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = template_labels
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    labels.insert(IS_RAY_NODE.into(), "yes".into());
    labels.insert(RAY_CLUSTER.into(), cluster.into());
    labels.insert(NODE_TYPE.into(), node_type.into());
    labels.insert(GROUP.into(), group.into());
    labels.insert(IDENTIFIER.into(), format!("{cluster}-{node_type}"));
    labels
        .entry(APP_NAME.into())
        .or_insert_with(|| "kuberay".into());
    labels
        .entry(CREATED_BY.into())
        .or_insert_with(|| "kuberay-operator".into());
    labels
}

/// Builds a Ray pod from a group (head when `group_name` is `None`).
pub fn build_pod(
    rc: &DynamicObject,
    group: &Value,
    group_name: Option<&str>,
    replica_index: Option<usize>,
) -> Value {
    let cluster = rc.name_any();
    let ns = rc.namespace().unwrap_or_default();
    let is_head = group_name.is_none();
    let node_type = if is_head { "head" } else { "worker" };
    let template = group.get("template").cloned().unwrap_or_else(|| json!({}));
    let mut tl = template
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let (Some(tl), Some(gl)) = (
        tl.as_object_mut(),
        group.get("labels").and_then(Value::as_object),
    ) {
        for (k, v) in gl {
            tl.insert(k.clone(), v.clone());
        }
    }
    let mut labels = pod_labels(
        &cluster,
        node_type,
        group_name.unwrap_or("headgroup"),
        Some(&tl),
    );
    if let Some(i) = replica_index {
        labels.insert(REPLICA_INDEX.into(), i.to_string());
    }
    let fqdn = format!("{}.{ns}.svc.cluster.local", head_service(&cluster));
    let params = effective_params(group, is_head, &fqdn);
    let cmd = ray_start_command(&params, is_head);
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if let Some(c0) = spec.pointer_mut("/containers/0") {
        let user_args: Vec<String> = c0
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let full = if user_args.is_empty() {
            cmd.clone()
        } else {
            format!("{cmd} && {}", user_args.join(" "))
        };
        c0["command"] = json!(["/bin/bash", "-c", "--"]);
        c0["args"] = json!([full]);
        let mut env = c0
            .get("env")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut add = |k: &str, v: String| {
            if !env
                .iter()
                .any(|e| e.get("name").and_then(Value::as_str) == Some(k))
            {
                env.push(json!({"name": k, "value": v}));
            }
        };
        add("RAY_CLUSTER_NAME", cluster.clone());
        add("RAY_CLOUD_INSTANCE_ID", cluster.clone());
        add(
            "RAY_NODE_TYPE_NAME",
            group_name.unwrap_or("headgroup").to_owned(),
        );
        add("KUBERAY_GEN_RAY_START_CMD", cmd.clone());
        add("RAY_PORT", "6379".into());
        add("RAY_USAGE_STATS_KUBERAY_IN_USE", "1".into());
        add(
            "RAY_USAGE_STATS_EXTRA_TAGS",
            "kuberay_version=v1.7.0;kuberay_crd=RayCluster".into(),
        );
        if is_head {
            add("RAY_ADDRESS", "127.0.0.1:6379".into());
            add("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1".into());
        } else {
            add("RAY_ADDRESS", format!("{fqdn}:6379"));
            add("FQ_RAY_IP", fqdn.clone());
            add("RAY_IP", head_service(&cluster));
        }
        c0["env"] = Value::Array(env);
    }
    let generate_name = match group_name {
        None => format!("{cluster}-head-"),
        Some(g) => format!("{cluster}-{g}-worker-"),
    };
    let mut annotations = template
        .pointer("/metadata/annotations")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        a.insert("ray.io/ft-enabled".into(), json!("false"));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate_name,
            "namespace": ns,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_ref(rc)],
        },
        "spec": spec,
    })
}

fn owner_ref(rc: &DynamicObject) -> Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": rc.name_any(),
        "uid": rc.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true,
    })
}

/// The head Service `<cluster>-head-svc`: headless, ports from the head container
/// (plus metrics 8080) or KubeRay's defaults (`service.go`).
pub fn build_head_service(rc: &DynamicObject) -> Value {
    let cluster = rc.name_any();
    let declared: Vec<Value> = rc
        .data
        .pointer("/spec/headGroupSpec/template/spec/containers/0/ports")
        .and_then(Value::as_array)
        .map(|ports| {
            ports
                .iter()
                .filter_map(|p| {
                    Some(json!({"name": p.get("name")?.as_str()?, "port": p.get("containerPort")?, "protocol": "TCP", "appProtocol": "tcp"}))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = if declared.is_empty() {
        [
            ("client", 10001),
            ("gcs-server", 6379),
            ("dashboard", 8265),
            ("serve", 8000),
        ]
        .iter()
        .map(|(n, p)| json!({"name": n, "port": p, "protocol": "TCP", "appProtocol": "tcp"}))
        .collect()
    } else {
        declared
    };
    if !ports
        .iter()
        .any(|p| p.get("name").and_then(Value::as_str) == Some("metrics"))
    {
        ports.push(
            json!({"name": "metrics", "port": 8080, "protocol": "TCP", "appProtocol": "tcp"}),
        );
    }
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": head_service(&cluster),
            "namespace": rc.namespace(),
            "labels": {
                RAY_CLUSTER: cluster, NODE_TYPE: "head", IDENTIFIER: format!("{cluster}-head"),
                APP_NAME: "kuberay", CREATED_BY: "kuberay-operator",
            },
            "ownerReferences": [owner_ref(rc)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": {RAY_CLUSTER: cluster, NODE_TYPE: "head"},
            "ports": ports,
            "type": "ClusterIP",
        }
    })
}

async fn reconcile(rc: Arc<DynamicObject>, ctx: Arc<Shared>) -> Result<Action, ControllerError> {
    let ar = raycluster_resource();
    let ns = rc.namespace().unwrap_or_default();
    let name = rc.name_any();
    let rc_ref = rc.object_ref(&ar);
    if rc.metadata.deletion_timestamp.is_some() {
        ctx.dashboard.drop_cluster(&ns, &name);
        return Ok(Action::await_change());
    }
    let spec = rc.data.get("spec").cloned().unwrap_or(Value::Null);

    // Head Service.
    let svcs: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let svc_name = head_service(&name);
    if svcs.get_opt(&svc_name).await?.is_none() {
        let svc: Service = serde_json::from_value(build_head_service(&rc))?;
        match svcs.create(&PostParams::default(), &svc).await {
            Ok(_) => {
                let note = format!("Created service {ns}/{svc_name}");
                emit(
                    &ctx.client,
                    REPORTER,
                    &rc_ref,
                    Kind::Normal,
                    "CreatedService",
                    "Create",
                    &note,
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }

    // Pods.
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut pods = pods_api
        .list(&ListParams::default().labels(&format!("{RAY_CLUSTER}={name}")))
        .await?
        .items;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    let mut kept = Vec::with_capacity(pods.len());
    for p in pods {
        if should_delete(&p) {
            let pname = p.name_any();
            let head = p.labels().get(NODE_TYPE).map(String::as_str) == Some("head");
            pods_api.delete(&pname, &DeleteParams::default()).await?;
            let (reason, what) = if head {
                ("DeletedHeadPod", "head")
            } else {
                ("DeletedWorkerPod", "worker")
            };
            let note = format!(
                "Deleted {what} Pod {ns}/{pname}; Pod status: {}",
                pod_phase(&p)
            );
            emit(
                &ctx.client,
                REPORTER,
                &rc_ref,
                Kind::Normal,
                reason,
                "Delete",
                &note,
            )
            .await;
        } else {
            kept.push(p);
        }
    }
    let pods = kept;
    let heads: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.labels().get(NODE_TYPE).map(String::as_str) == Some("head"))
        .collect();
    let head_spec = spec.get("headGroupSpec").cloned().unwrap_or(Value::Null);
    let mut created_any = false;
    if heads.is_empty() {
        let pod: Pod = serde_json::from_value(build_pod(&rc, &head_spec, None, None))?;
        let created = pods_api.create(&PostParams::default(), &pod).await?;
        let note = format!("Created head Pod {ns}/{}", created.name_any());
        emit(
            &ctx.client,
            REPORTER,
            &rc_ref,
            Kind::Normal,
            "CreatedHeadPod",
            "Create",
            &note,
        )
        .await;
        created_any = true;
    }
    let groups: Vec<Value> = spec
        .get("workerGroupSpecs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for g in &groups {
        let gname = g
            .get("groupName")
            .and_then(Value::as_str)
            .unwrap_or("workers");
        let mine: Vec<&Pod> = pods
            .iter()
            .filter(|p| {
                p.labels().get(NODE_TYPE).map(String::as_str) == Some("worker")
                    && p.labels().get(GROUP).map(String::as_str) == Some(gname)
            })
            .collect();
        let desired = desired_worker_pods(g).max(0) as usize;
        if mine.len() < desired {
            // Multi-host groups: the numOfHosts pods of one replica share its index.
            let mut per_index: BTreeMap<usize, usize> = BTreeMap::new();
            for p in &mine {
                if let Some(i) = p.labels().get(REPLICA_INDEX).and_then(|i| i.parse().ok()) {
                    *per_index.entry(i).or_default() += 1;
                }
            }
            let hosts = g
                .get("numOfHosts")
                .and_then(Value::as_i64)
                .unwrap_or(1)
                .max(1) as usize;
            for _ in 0..(desired - mine.len()) {
                let i = (0..)
                    .find(|i| per_index.get(i).copied().unwrap_or(0) < hosts)
                    .unwrap_or(0);
                *per_index.entry(i).or_default() += 1;
                let idx = Some(i);
                let pod: Pod = serde_json::from_value(build_pod(&rc, g, Some(gname), idx))?;
                let created = pods_api.create(&PostParams::default(), &pod).await?;
                let note = format!("Created worker Pod {ns}/{}", created.name_any());
                emit(
                    &ctx.client,
                    REPORTER,
                    &rc_ref,
                    Kind::Normal,
                    "CreatedWorkerPod",
                    "Create",
                    &note,
                )
                .await;
                created_any = true;
            }
        } else if mine.len() > desired {
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
            let mut victims: Vec<&Pod> = mine.clone();
            victims.sort_by_key(|p| {
                (
                    !to_delete.contains(&p.name_any()),
                    std::cmp::Reverse(p.name_any()),
                )
            });
            for p in victims.into_iter().take(mine.len() - desired) {
                pods_api
                    .delete(&p.name_any(), &DeleteParams::default())
                    .await?;
                let note = format!("Deleted worker Pod {ns}/{}", p.name_any());
                emit(
                    &ctx.client,
                    REPORTER,
                    &rc_ref,
                    Kind::Normal,
                    "DeletedWorkerPod",
                    "Delete",
                    &note,
                )
                .await;
                created_any = true;
            }
        }
    }

    // Status (`calculateStatus`).
    let desired_workers: i64 = groups.iter().map(desired_worker_pods).sum();
    let workers: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.labels().get(NODE_TYPE).map(String::as_str) == Some("worker"))
        .collect();
    let ready_workers = workers.iter().filter(|p| pod_ready(p)).count() as i64;
    let head = pods
        .iter()
        .find(|p| p.labels().get(NODE_TYPE).map(String::as_str) == Some("head"));
    let head_ready = head.is_some_and(pod_ready);
    let all_ready = !created_any
        && head_ready
        && pods.len() as i64 == desired_workers + 1
        && pods.iter().all(pod_ready);
    let old_status = rc.data.get("status").cloned().unwrap_or_else(|| json!({}));
    let was_ready = old_status.get("state").and_then(Value::as_str) == Some("ready");
    let now = Timestamp::now().to_string();
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
    let cond = |t: &str, ok: bool, reason: &str, prev: &Value| {
        let prev_t = prev
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
            })
            .filter(|c| {
                c.get("status").and_then(Value::as_str) == Some(if ok { "True" } else { "False" })
            })
            .and_then(|c| c.get("lastTransitionTime").cloned());
        json!({"type": t, "status": if ok { "True" } else { "False" }, "reason": reason, "message": "",
               "lastTransitionTime": prev_t.unwrap_or_else(|| json!(now))})
    };
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
    let mut status = json!({
        "desiredWorkerReplicas": desired_workers,
        "availableWorkerReplicas": ready_workers,
        "readyWorkerReplicas": ready_workers,
        "minWorkerReplicas": min_workers,
        "maxWorkerReplicas": max_workers,
        "desiredCPU": quantity(desired_resource(&spec, "cpu")),
        "desiredMemory": quantity(desired_resource(&spec, "memory")),
        "desiredGPU": quantity(desired_resource(&spec, "nvidia.com/gpu")),
        "desiredTPU": "0",
        "endpoints": {"client": "10001", "dashboard": "8265", "gcs-server": "6379", "metrics": "8080"},
        "head": {
            "podName": head.map(|p| p.name_any()),
            "podIP": head.and_then(|p| p.status.as_ref()?.pod_ip.clone()),
            "serviceName": head_service(&name),
            "serviceIP": head.and_then(|p| p.status.as_ref()?.pod_ip.clone()),
        },
        "observedGeneration": rc.metadata.generation,
        "conditions": [
            cond("HeadPodReady", head_ready, if head_ready { "HeadPodRunningAndReady" } else { "HeadPodNotFound" }, &old_status),
            cond("RayClusterProvisioned", provisioned, if provisioned { "AllPodRunningAndReadyFirstTime" } else { "RayClusterPodsProvisioning" }, &old_status),
        ],
    });
    if all_ready || was_ready {
        status["state"] = json!("ready");
        status["readyTimestamp"] = old_status
            .get("readyTimestamp")
            .cloned()
            .unwrap_or_else(|| json!(now));
    }
    let mut cmp_old = old_status.clone();
    if let Some(o) = cmp_old.as_object_mut() {
        o.remove("lastUpdateTime");
    }
    if cmp_old != status {
        status["lastUpdateTime"] = json!(now);
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ar);
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await?;
    }
    Ok(Action::requeue(Duration::from_secs(
        if all_ready || was_ready { 300 } else { 5 },
    )))
}

fn quantity(milli: i128) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_labels_win_over_template_labels() {
        let tl = json!({"ray.io/cluster": "evil", "ray.io/node-type": "x", "team": "a", APP_NAME: "custom"});
        let l = pod_labels("c1", "worker", "gpu", Some(&tl));
        assert_eq!(l[RAY_CLUSTER], "c1");
        assert_eq!(l[NODE_TYPE], "worker");
        assert_eq!(l[GROUP], "gpu");
        assert_eq!(l[IDENTIFIER], "c1-worker");
        assert_eq!(l[IS_RAY_NODE], "yes");
        assert_eq!(l["team"], "a");
        assert_eq!(l[CREATED_BY], "kuberay-operator");
    }

    #[test]
    fn head_pod_shape() {
        let rc: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "job-abcde", "namespace": "ns", "uid": "u1"},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [
                {"name": "ray-head", "image": "rayproject/ray:2.46.0", "ports": [{"name": "dashboard", "containerPort": 8265}]}]}}}}
        }))
        .expect("rc");
        let head = rc
            .data
            .pointer("/spec/headGroupSpec")
            .cloned()
            .expect("head");
        let pod = build_pod(&rc, &head, None, None);
        assert_eq!(pod["metadata"]["generateName"], "job-abcde-head-");
        assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(pod["metadata"]["labels"][GROUP], "headgroup");
        let args = pod["spec"]["containers"][0]["args"][0]
            .as_str()
            .expect("args");
        assert!(
            args.starts_with("ulimit -n 65536; ray start --head"),
            "{args}"
        );
        let svc = build_head_service(&rc);
        assert_eq!(svc["metadata"]["name"], "job-abcde-head-svc");
        let names: Vec<&str> = svc["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["dashboard", "metrics"]);
    }
}
