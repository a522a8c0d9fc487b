//! The simulated scheduler and kubelet, through the `kube` client against a
//! `forge_kubesim::Sim` on port 0: GPU accounting, nodeSelector, cordon/uncordon,
//! NotReady nodes and taints (patched, or from the `--nodes` layout) produce the real
//! `FailedScheduling` wording, GPU-less nodes have no GPU resource; missing
//! images give ErrImagePull / ImagePullBackOff; a normal pod becomes Running + Ready.

use std::collections::BTreeSet;
use std::time::Duration;

use forge_kubesim::{ControllerConfig, NodeSpec, Sim, SimConfig};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{NS, holds_for, process_controllers, start_with, wait_for};

async fn start(nodes: Vec<NodeSpec>, failing: &[&str]) -> (Sim, kube::Client) {
    let controllers = ControllerConfig {
        failing_images: failing.iter().map(|s| (*s).to_owned()).collect(),
        ..process_controllers()
    };
    let sim = start_with(SimConfig {
        nodes,
        controllers,
        ..SimConfig::default()
    })
    .await;
    let client = sim.client().expect("client");
    (sim, client)
}

fn gpu_pod(name: &str, gpus: u32, series: Option<&str>) -> Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                 "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
    });
    if let Some(s) = series {
        v["spec"]["nodeSelector"] = json!({"starforge/gpu-series": s});
    }
    serde_json::from_value(v).expect("pod")
}

async fn node_of(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name)
        .await
        .ok()?
        .spec?
        .node_name
        .filter(|n| !n.is_empty())
}

async fn failed_scheduling(client: &kube::Client, pod: &str) -> Vec<String> {
    let evs = Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events");
    evs.items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("FailedScheduling")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
                && e.reporting_controller.as_deref() == Some("default-scheduler")
                && e.type_.as_deref() == Some("Warning")
        })
        .filter_map(|e| e.note)
        .collect()
}

fn scheduled_condition(p: &Pod) -> Option<(String, String, String)> {
    let c = p
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?
        .clone();
    Some((
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfittable_pod_stays_pending_with_the_real_message() {
    let (sim, client) = start(
        NodeSpec::parse_layout("h100=2x8,a100=2x8").expect("layout"),
        &[],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &gpu_pod("too-big", 16, Some("a100")),
    )
    .await
    .expect("create");
    let expected = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. \
                    preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, \
                    2 Preemption is not helpful for scheduling.";
    let notes = wait_for(10, "FailedScheduling", || async {
        let n = failed_scheduling(&client, "too-big").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(notes[0], expected);
    let p = pods.get("too-big").await.expect("pod");
    assert_eq!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        scheduled_condition(&p),
        Some(("False".into(), "Unschedulable".into(), expected.into()))
    );
    assert_eq!(node_of(&pods, "too-big").await, None);

    // A pod that fits binds to a matching node, and runs.
    pods.create(&PostParams::default(), &gpu_pod("fits", 8, Some("a100")))
        .await
        .expect("create");
    let node = wait_for(10, "bound", || node_of(&pods, "fits")).await;
    assert!(node.starts_with("a100-"), "{node}");
    let p = wait_for(10, "running+ready", || async {
        let p = pods.get("fits").await.ok()?;
        let ready = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (p.status.as_ref()?.phase.as_deref() == Some("Running") && ready).then_some(p)
    })
    .await;
    let cs = &p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .expect("statuses")[0];
    assert!(cs.ready && cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    let kubelet: BTreeSet<String> = Api::<CoreEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some("fits"))
        .filter(|e| e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet"))
        .filter_map(|e| e.reason)
        .collect();
    for r in ["Pulling", "Pulled", "Created", "Started"] {
        assert!(
            kubelet.contains(r),
            "missing kubelet event {r}: {kubelet:?}"
        );
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_held_by_bound_pods_count_until_they_go() {
    let (sim, client) = start(NodeSpec::parse_layout("h100=1x8").expect("layout"), &[]).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &gpu_pod("first", 6, None))
        .await
        .expect("create");
    wait_for(10, "first bound", || node_of(&pods, "first")).await;
    pods.create(&PostParams::default(), &gpu_pod("second", 6, None))
        .await
        .expect("create");
    let notes = wait_for(10, "second unschedulable", || async {
        let n = failed_scheduling(&client, "second").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert!(
        notes[0].starts_with("0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
        "{}",
        notes[0]
    );
    pods.delete("first", &DeleteParams::default())
        .await
        .expect("delete");
    let node = wait_for(15, "second bound after first left", || {
        node_of(&pods, "second")
    })
    .await;
    assert_eq!(node, "h100-0");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_and_uncordon_change_what_schedules() {
    let (sim, client) = start(NodeSpec::parse_layout("a100=1x8").expect("layout"), &[]).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    // `kubectl cordon` is a patch of spec.unschedulable.
    nodes
        .patch(
            "a100-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon");
    pods.create(&PostParams::default(), &gpu_pod("waits", 1, Some("a100")))
        .await
        .expect("create");
    let notes = wait_for(10, "unschedulable", || async {
        let n = failed_scheduling(&client, "waits").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(
        notes[0],
        "0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    );
    holds_for(
        Duration::from_millis(500),
        "waits unbound while cordoned",
        || async { node_of(&pods, "waits").await.is_none() },
    )
    .await;
    nodes
        .patch(
            "a100-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": null}})),
        )
        .await
        .expect("uncordon");
    assert_eq!(
        wait_for(10, "bound after uncordon", || node_of(&pods, "waits")).await,
        "a100-0"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_nodes_and_taints_are_filtered_with_their_reasons() {
    let mut nodes = NodeSpec::parse_layout("h100=3x8").expect("layout");
    nodes[0].ready = false;
    let (sim, client) = start(nodes, &[]).await;
    let node_api: Api<Node> = Api::all(client.clone());
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}});
    for n in ["h100-1", "h100-2"] {
        node_api
            .patch(n, &PatchParams::default(), &Patch::Merge(taint.clone()))
            .await
            .expect("taint");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &gpu_pod("plain", 1, None))
        .await
        .expect("create");
    let notes = wait_for(10, "unschedulable", || async {
        let n = failed_scheduling(&client, "plain").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(
        notes[0],
        "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         2 node(s) had untolerated taint {dedicated: infra}. preemption: 0/3 nodes are available: \
         3 Preemption is not helpful for scheduling."
    );
    // A pod tolerating the taint schedules on a tainted node.
    let mut tolerant = gpu_pod("tolerant", 1, None);
    tolerant.spec.as_mut().expect("spec").tolerations = Some(vec![serde_json::from_value(
        json!({"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}),
    )
    .expect("toleration")]);
    pods.create(&PostParams::default(), &tolerant)
        .await
        .expect("create");
    let node = wait_for(10, "tolerant bound", || node_of(&pods, "tolerant")).await;
    assert!(node == "h100-1" || node == "h100-2", "{node}");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_shows_err_image_pull_then_back_off() {
    let (sim, client) = start(
        NodeSpec::parse_layout("h100=1x8").expect("layout"),
        &["ghcr.io/forge/missing:1"],
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "badimage"},
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/forge/missing:1"}]},
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), NS);
    let msgs = wait_for(15, "pull failure events", || async {
        let evs = core.list(&ListParams::default()).await.ok()?.items;
        let mine: Vec<(String, String)> = evs
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("badimage"))
            .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect();
        mine.iter().any(|(r, _)| r == "BackOff").then_some(mine)
    })
    .await;
    assert!(
        msgs.iter().any(|(r, m)| r == "Failed"
            && m.starts_with("Failed to pull image \"ghcr.io/forge/missing:1\": ")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|(r, m)| r == "Failed" && m == "Error: ErrImagePull"),
        "{msgs:?}"
    );
    assert!(
        msgs.iter()
            .any(|(r, m)| r == "BackOff"
                && m == "Back-off pulling image \"ghcr.io/forge/missing:1\""),
        "{msgs:?}"
    );
    let reason = wait_for(10, "ImagePullBackOff state", || async {
        let p = pods.get("badimage").await.ok()?;
        let cs = p.status?.container_statuses?.into_iter().next()?;
        let r = cs.state?.waiting?.reason?;
        (r == "ImagePullBackOff").then_some(r)
    })
    .await;
    assert_eq!(reason, "ImagePullBackOff");
    let p = pods.get("badimage").await.expect("pod");
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    let v: Value = serde_json::to_value(&p.metadata).expect("meta");
    assert!(v.get("deletionTimestamp").is_none());
    sim.shutdown().await;
}

/// A `--nodes` layout with tainted GPU nodes (the common setup) and GPU-less nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_taints_gpu_nodes_and_makes_gpu_less_nodes() {
    let nodes = NodeSpec::parse_layout("h100=1x8@nvidia.com/gpu=present:NoSchedule,cpu=1x0")
        .expect("layout");
    let (sim, client) = start(nodes, &[]).await;
    let cpu_node = Api::<Node>::all(client.clone())
        .get("cpu-0")
        .await
        .expect("node");
    let allocatable = cpu_node
        .status
        .and_then(|s| s.allocatable)
        .expect("allocatable");
    assert!(!allocatable.contains_key("nvidia.com/gpu"));
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &gpu_pod("untolerated", 1, None))
        .await
        .expect("create");
    let notes = wait_for(10, "unschedulable", || async {
        let n = failed_scheduling(&client, "untolerated").await;
        (!n.is_empty()).then_some(n)
    })
    .await;
    assert_eq!(
        notes[0],
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint \
         {nvidia.com/gpu: present}. preemption: 0/2 nodes are available: 1 No preemption victims \
         found for incoming pod, 1 Preemption is not helpful for scheduling."
    );
    let mut tolerant = gpu_pod("tolerant", 1, None);
    tolerant.spec.as_mut().expect("spec").tolerations = Some(vec![
        serde_json::from_value(
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}),
        )
        .expect("toleration"),
    ]);
    pods.create(&PostParams::default(), &tolerant)
        .await
        .expect("create");
    let node = wait_for(10, "tolerant bound", || node_of(&pods, "tolerant")).await;
    assert_eq!(node, "h100-0");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(crate::support::pod("cpu-only", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    let node = wait_for(10, "cpu-only bound", || node_of(&pods, "cpu-only")).await;
    assert_eq!(node, "cpu-0", "the tainted GPU node is not for it");
    sim.shutdown().await;
}
