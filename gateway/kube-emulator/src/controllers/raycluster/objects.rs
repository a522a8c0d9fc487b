//! The objects the RayCluster controller creates, as pure builders: a Ray pod of the
//! head or a worker group (`pod.go`: the reserved labels, `ray start` command and env,
//! generateName, the controller owner reference) and the headless head Service
//! `<cluster>-head-svc` (`service.go`).

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::controllers::names::{
    APP_NAME, CREATED_BY, GROUP, IDENTIFIER, IS_RAY_NODE, NODE_TYPE, RAY_CLUSTER, REPLICA_INDEX,
    head_service,
};
use crate::controllers::raystart::{effective_params, ray_start_command};

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
