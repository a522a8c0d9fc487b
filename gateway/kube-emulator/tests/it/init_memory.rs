//! Init containers are held to their `limits.memory` as a node's cgroup holds them
//! (process mode): one that allocates past its limit is killed and reported
//! `terminated` / `OOMKilled` with exit code 137 (under `restartPolicy: Never` the pod
//! fails), while one that stays under its limit runs to completion and the pod goes on.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::{NS, start_process, wait_for};

/// A pod whose one init container allocates `mib` MiB (and holds it for a while)
/// under a `limit` memory limit.
fn allocating_pod(name: &str, mib: u32, limit: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never",
        "initContainers": [{"name": "alloc", "image": "busybox:1.36",
            "command": ["python3", "-c", format!(
                "import time\nb = bytearray({mib} * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated', flush=True)\ntime.sleep(1.5)\n")],
            "resources": {"limits": {"memory": limit}, "requests": {"memory": limit}}}],
        "containers": [{"name": "main", "image": "busybox:1.36"}]}}))
    .expect("pod")
}

/// The state of init container `alloc` and the pod's phase.
async fn alloc_state(pods: &Api<Pod>, name: &str) -> (Value, String) {
    let Ok(p) = pods.get(name).await else {
        return (Value::Null, String::new());
    };
    let st = serde_json::to_value(p.status.unwrap_or_default()).expect("status");
    let state = st["initContainerStatuses"][0]["state"].clone();
    (state, st["phase"].as_str().unwrap_or("").to_string())
}

#[tokio::test]
async fn an_init_container_over_its_memory_limit_is_oom_killed_and_one_under_it_runs() {
    let dir = tempfile::tempdir().expect("scratch");
    let sim = start_process("h100=1x8", dir.path()).await;
    let pods: Api<Pod> = Api::namespaced(sim.client().expect("client"), NS);
    pods.create(
        &PostParams::default(),
        &allocating_pod("greedy", 256, "64Mi"),
    )
    .await
    .expect("create greedy");
    pods.create(
        &PostParams::default(),
        &allocating_pod("modest", 16, "512Mi"),
    )
    .await
    .expect("create modest");

    let (state, phase) = wait_for(60, "the greedy pod to fail", || async {
        let (state, phase) = alloc_state(&pods, "greedy").await;
        (phase == "Failed").then_some((state, phase))
    })
    .await;
    assert_eq!(phase, "Failed");
    assert_eq!(state["terminated"]["reason"], "OOMKilled", "{state:#}");
    assert_eq!(state["terminated"]["exitCode"], 137, "{state:#}");

    let state = wait_for(60, "the modest init container to complete", || async {
        let (state, _) = alloc_state(&pods, "modest").await;
        state.get("terminated").is_some().then_some(state)
    })
    .await;
    assert_eq!(state["terminated"]["reason"], "Completed", "{state:#}");
    assert_eq!(state["terminated"]["exitCode"], 0, "{state:#}");
    let phase = wait_for(30, "the modest pod to run", || async {
        let (_, phase) = alloc_state(&pods, "modest").await;
        (phase == "Running").then_some(phase)
    })
    .await;
    assert_eq!(phase, "Running");
}
