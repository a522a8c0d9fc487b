//! Control-plane latency of the job lifecycle (issue 6): submit acknowledged → RayJob
//! created, and RayJob terminal → RayJob deleted (the gateway's log archival and
//! delete), p50/p99, for jobs running through the real gateway and the emulator
//! (process mode). A RayJob watch records when each RayJob appeared, first showed a
//! terminal `jobDeploymentStatus` and was deleted; the job's stored history gives its
//! acknowledgement time (all on this machine's clock).
//!
//! Asserts that every job got exactly its RayJob, ended `succeeded`, and had its
//! RayJob deleted; prints the latencies. CI runs 20 jobs; for the note, a release run:
//! `FORGE_LATENCY_JOBS=100 cargo test --release -p forge-tests --test e2e latency -- --nocapture`

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{
    JobClient, RayJobRecorder, one_gpu_spec, rayjobs, wait_no_rayjobs, zip_of,
};
use forge_tests::policy::PolicyClient;
use forge_tests::wait::{eventually, not_yet};
use serde_json::Value;

fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return -1;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Unix ms of the first history entry reaching `state`.
fn reached(job: &Value, state: &str) -> Option<i64> {
    job["history"]
        .as_array()?
        .iter()
        .find(|h| h["to"] == state)
        .and_then(|h| h["atMs"].as_i64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_to_rayjob_created_and_terminal_to_rayjob_deleted() {
    let jobs: usize = std::env::var("FORGE_LATENCY_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    // Room for every job at once, and the dev chain's 16-GPU team quota lifted (a new
    // global policy version), so the numbers are the control plane's, not queueing.
    let nodes = format!("h100={}x8", jobs.div_ceil(8).max(1));
    let gw = TestGateway::start(&nodes, &[]).await;
    let client = JobClient::new(&gw.url, &gw.token);
    let admin = PolicyClient::new(&gw, &gw.token);
    let unlimited = admin
        .global_links_with("team-quota", serde_json::json!({"default": {"*": 100000}}))
        .await;
    let (status, body) = admin
        .put_policy(
            None,
            &serde_json::json!({"expectedVersion": 1, "plugins": unlimited}),
        )
        .await;
    assert_eq!(status, 200, "{body:#}");
    let api = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let (recorder, task) = RayJobRecorder::start(api.clone());
    recorder.wait_listed().await;

    let code = zip_of(&[("job.py", "print('latency probe', flush=True)\n")]);
    let mut ids = Vec::with_capacity(jobs);
    for i in 0..jobs {
        let spec = one_gpu_spec(&format!("lat-{i}"), "python3 job.py");
        ids.push(client.submit_ok(&spec, code.clone()).await);
    }
    let done = client.wait_terminal(&ids, Duration::from_secs(600)).await;
    wait_no_rayjobs(&api, Duration::from_secs(120)).await;
    // The recorder's watch delivers the last deletions after the list shows none.
    let names: Vec<String> = ids.iter().map(|id| format!("forge-{id}")).collect();
    let times = eventually(
        "every deletion seen by the watch",
        Duration::from_secs(30),
        || {
            let times = recorder.times();
            let missing: Vec<String> = names
                .iter()
                .filter(|n| times.get(*n).and_then(|t| t.deleted).is_none())
                .cloned()
                .collect();
            async move {
                if missing.is_empty() {
                    Ok(times)
                } else {
                    Err(not_yet(missing))
                }
            }
        },
    )
    .await;
    task.abort();

    let mut created = Vec::new();
    let mut deleted = Vec::new();
    for id in &ids {
        let job = &done[id];
        assert_eq!(job["state"], "succeeded", "{job:#}");
        let name = format!("forge-{id}");
        let t = times
            .get(&name)
            .copied()
            .unwrap_or_else(|| panic!("no RayJob {name} was seen"));
        let seen = t.created.unwrap_or_else(|| panic!("{name} never appeared"));
        let terminal = t
            .terminal
            .unwrap_or_else(|| panic!("{name} never terminal"));
        let gone = t
            .deleted
            .unwrap_or_else(|| panic!("{name} was never deleted"));
        let acked = reached(job, "queued").expect("queued time");
        created.push(seen - acked);
        deleted.push(gone - terminal);
    }
    created.sort_unstable();
    deleted.sort_unstable();
    println!(
        "{jobs} jobs: submit acknowledged → RayJob created p50 {} ms, p99 {} ms, max {} ms; \
         RayJob terminal → RayJob deleted p50 {} ms, p99 {} ms, max {} ms",
        percentile(&created, 0.5),
        percentile(&created, 0.99),
        created.last().copied().unwrap_or(-1),
        percentile(&deleted, 0.5),
        percentile(&deleted, 0.99),
        deleted.last().copied().unwrap_or(-1),
    );
}
