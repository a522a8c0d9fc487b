//! Tests of node and pod accounting: per-series aggregation with blocked and tainted
//! GPUs, free CPU and memory per node, GPU-less nodes, init containers.

use std::collections::HashMap;

use serde_json::json;

use super::*;
use crate::config::Config;

fn conventions(extra: &[(&str, &str)]) -> NodeConventions {
    let mut env: HashMap<String, String> = HashMap::from([
        ("FORGE_IMAGE_NEMO_RL".into(), "img".into()),
        ("FORGE_KUBERAY_RAY_VERSION".into(), "2.55.1".into()),
    ]);
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    let cfg = Config::from_env_map(env).expect("config");
    NodeConventions {
        gpu_label: cfg.k8s.gpu_node_label.clone(),
        pods: cfg.pods,
    }
}

fn node(name: &str, series: &str, gpus: u32, ready: bool, cordoned: bool) -> Arc<Node> {
    node_with(
        name,
        series,
        Some(gpus),
        ready,
        cordoned,
        json!([]),
        json!({}),
    )
}

fn node_with(
    name: &str,
    series: &str,
    gpus: Option<u32>,
    ready: bool,
    cordoned: bool,
    taints: serde_json::Value,
    extra_labels: serde_json::Value,
) -> Arc<Node> {
    let mut labels = json!({"starforge/gpu-series": series});
    for (k, v) in extra_labels.as_object().into_iter().flatten() {
        labels[k] = v.clone();
    }
    let mut resources = json!({"cpu": "16", "memory": "64Gi"});
    if let Some(g) = gpus {
        resources["nvidia.com/gpu"] = json!(g.to_string());
    }
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"unschedulable": cordoned, "taints": taints},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]
            }
        }))
        .expect("node"),
    )
}

fn pod(node: &str, gpus: u32, phase: &str) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": format!("p-{node}-{gpus}")},
            "spec": {"nodeName": node, "containers": [
                {"name": "ray", "resources": {
                    "limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "4", "memory": "8Gi"}}},
                {"name": "sidecar", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
            ]},
            "status": {"phase": phase}
        }))
        .expect("pod"),
    )
}

#[test]
fn aggregates_per_series_with_blocked_and_largest_block() {
    let nodes = vec![
        node("a1", "h100", 8, true, false),
        node("a2", "h100", 8, true, false),
        node("a3", "h100", 8, false, false),
        node("b1", "h200", 8, true, true),
    ];
    let pods = vec![
        pod("a1", 6, "Running"),
        pod("a2", 2, "Pending"),
        pod("a2", 8, "Succeeded"),
    ];
    let view = conventions(&[]).compute(&nodes, &pods);
    let h100 = &view.series[0];
    assert_eq!(
        (
            h100.series.as_str(),
            h100.total,
            h100.allocatable,
            h100.in_use,
            h100.blocked,
            h100.free,
            h100.tainted
        ),
        ("h100", 24, 16, 8, 8, 8, 0)
    );
    assert_eq!((h100.largest_free_block, h100.nodes), (6, 3));
    assert_eq!(
        (h100.default_cpu_millis, h100.default_memory_bytes),
        (8000, 32 << 30)
    );
    let h200 = &view.series[1];
    assert_eq!(
        (h200.total, h200.allocatable, h200.blocked, h200.free),
        (8, 0, 8, 0)
    );
}

#[test]
fn untolerated_taints_are_reported_apart_and_tolerations_lift_them() {
    let gpu_taint = json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]);
    let soft = json!([{"key": "spot", "effect": "PreferNoSchedule"}]);
    let nodes = vec![
        node_with(
            "t1",
            "h100",
            Some(8),
            true,
            false,
            gpu_taint.clone(),
            json!({}),
        ),
        node_with("t2", "h100", Some(8), true, false, gpu_taint, json!({})),
        node_with("s1", "h100", Some(8), true, false, soft, json!({})),
    ];
    let view = conventions(&[]).compute(&nodes, &[]);
    let h100 = &view.series[0];
    assert_eq!((h100.allocatable, h100.free, h100.tainted), (8, 8, 16));
    assert_eq!(h100.taints.len(), 2);
    assert_eq!(
        h100.taints[0].taint.to_string(),
        "nvidia.com/gpu=present:NoSchedule"
    );
    assert_eq!(h100.taints[0].nodes, 2);

    let tolerant = conventions(&[("FORGE_K8S_GPU_TOLERATIONS", "nvidia.com/gpu:NoSchedule")]);
    let h100 = &tolerant.compute(&nodes, &[]).series[0];
    assert_eq!((h100.allocatable, h100.tainted), (24, 0));
}

#[test]
fn rooms_have_free_gpus_cpu_and_memory_of_schedulable_nodes() {
    let mut nodes = vec![
        node("a1", "h100", 8, true, false),
        node("a2", "h100", 8, false, false),
        node("b1", "h200", 8, true, true),
    ];
    let pods = vec![pod("a1", 6, "Running"), pod("a1", 8, "Succeeded")];
    let mut cpu_node = (*node("c1", "h100", 0, true, false)).clone();
    cpu_node.metadata.labels = None;
    nodes.push(Arc::new(cpu_node));
    let rooms = conventions(&[]).rooms("default", &nodes, &pods);
    assert_eq!(rooms.len(), 2, "NotReady and cordoned nodes have no room");
    let r = &rooms[0];
    let cpu = &rooms[1];
    assert_eq!(
        (cpu.name.as_str(), cpu.series.as_str(), cpu.gpus),
        ("c1", NO_SERIES, 0),
        "a node of no series has room (for submitter pods)"
    );
    assert_eq!((r.name.as_str(), r.series.as_str()), ("a1", "h100"));
    assert_eq!(r.gpus, 2);
    assert_eq!(r.cpu_millis, 16_000 - 4_500, "limits stand in for requests");
    assert_eq!(r.memory_bytes, (64 << 30) - (9 << 30));
}

#[test]
fn gpu_less_nodes_count_the_label_or_the_per_series_setting() {
    let nodes = vec![
        node_with(
            "l1",
            "h100",
            None,
            true,
            false,
            json!([]),
            json!({"starforge/gpu-count": "4"}),
        ),
        node_with("l2", "h100", None, true, false, json!([]), json!({})),
        node_with("l3", "h200", None, true, false, json!([]), json!({})),
    ];
    let forge_pod: Arc<Pod> = Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "w", "annotations": {"forge.dev/gpus": "2"}},
            "spec": {"nodeName": "l1", "containers": [{"name": "ray"}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod"),
    );
    let c = conventions(&[("FORGE_K8S_GPUS_PER_NODE", "h100=8")]);
    let view = c.compute(&nodes, &[forge_pod]);
    let h100 = &view.series[0];
    assert_eq!((h100.total, h100.in_use, h100.free), (12, 2, 10));
    assert_eq!(view.series[1].total, 0, "no label, no setting for h200");
}

#[test]
fn init_containers_count_as_the_scheduler_counts_them() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}],
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "500m"}}}
            ]
        }
    }))
    .expect("pod");
    let held = pod_held(&p);
    assert_eq!((held.cpu_millis, held.memory_bytes), (2000, 1 << 30));
}
