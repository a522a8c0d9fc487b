//! Fleets (issue 42): one gateway in front of two emulated clusters (`dev --fleets 2`).
//! Jobs spread over both, each gang in exactly one cluster; capacity is shown per fleet
//! and summed; the orphan scan covers both.

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{rayjob_names, rayjobs, zip_of};
use forge_tests::procs::NAMESPACE;
use serde_json::{Value, json};

/// A job holding one whole 8-GPU node for `secs` seconds.
fn whole_node(name: &str, secs: u32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": format!("python3 -c \"import time; print('up', flush=True); time.sleep({secs})\""),
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_spread_over_two_fleets_each_launched_in_exactly_one() {
    // Each fleet has one 8-GPU node: two whole-node jobs fit only one per fleet.
    let gw = TestGateway::start_tweaked("h100=1x8", &[], |o| o.fleets = 2).await;
    assert_eq!(gw.other_fleets.len(), 1);
    let client = gw.client(&gw.token);

    // Capacity: each fleet with its own node, the series summed over both (once both
    // fleets' caches have listed).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let cap = loop {
        let (_, cap) = client.call(reqwest::Method::GET, "/v1/capacity").await;
        let listed = cap["fleets"].as_array().is_some_and(|f| {
            f.iter()
                .all(|f| f["series"].as_array().is_some_and(|s| !s.is_empty()))
        });
        if listed || tokio::time::Instant::now() > deadline {
            break cap;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let names: Vec<&str> = cap["fleets"]
        .as_array()
        .expect("fleets")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(names, ["fleet-1", "fleet-2"], "{cap:#}");
    let h100 = cap["series"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["series"] == "h100"))
        .unwrap_or_else(|| panic!("no h100 in {cap:#}"));
    assert_eq!(h100["total"], 16, "two fleets of 8 GPUs: {cap:#}");
    assert_eq!(
        h100["largestFreeBlock"], 8,
        "a node is in one fleet: {cap:#}"
    );

    let code = zip_of(&[("noop.py", "")]);
    let a = client.submit_ok(&whole_node("a", 600), code.clone()).await;
    let b = client.submit_ok(&whole_node("b", 600), code.clone()).await;
    client.wait_running(&a, Duration::from_secs(120)).await;
    client.wait_running(&b, Duration::from_secs(120)).await;

    // Each job names its fleet; the two fleets differ (one node each).
    let (ja, jb) = (client.job(&a).await, client.job(&b).await);
    let fleets = [ja["fleet"].clone(), jb["fleet"].clone()];
    let mut sorted: Vec<&str> = fleets.iter().filter_map(Value::as_str).collect();
    sorted.sort_unstable();
    assert_eq!(sorted, ["fleet-1", "fleet-2"], "{ja:#}\n{jb:#}");

    // Each RayJob exists in its job's fleet and in no other.
    let one = rayjobs(gw.sim.client().expect("fleet-1"), NAMESPACE);
    let two = rayjobs(gw.other_fleets[0].client().expect("fleet-2"), NAMESPACE);
    let (in_one, in_two) = (rayjob_names(&one).await, rayjob_names(&two).await);
    for job in [&ja, &jb] {
        let name = job["rayjobName"].as_str().expect("rayjobName");
        let (here, there) = match job["fleet"].as_str() {
            Some("fleet-1") => (&in_one, &in_two),
            _ => (&in_two, &in_one),
        };
        assert!(
            here.iter().any(|n| n == name),
            "{name} not in its fleet: {here:?}"
        );
        assert!(
            !there.iter().any(|n| n == name),
            "{name} also in the other fleet: {there:?}"
        );
    }
    assert_eq!(
        (in_one.len(), in_two.len()),
        (1, 1),
        "{in_one:?} {in_two:?}"
    );

    // Nothing is foreign in either fleet.
    let (status, orphans) = client.call(reqwest::Method::GET, "/v1/admin/orphans").await;
    assert_eq!(status, 200, "{orphans:#}");
    assert_eq!(orphans["managed"], 2, "{orphans:#}");
    assert_eq!(orphans["orphans"], json!([]), "{orphans:#}");

    // A third whole-node job waits: the team's quota (16 GPUs of h100) is global,
    // held by the two jobs in two fleets.
    let c = client.submit_ok(&whole_node("c", 1), code).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let j = client.job(&c).await;
        if j["state"] == "queued" && j["queue"]["code"] == "quota.exceeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job c not waiting on the global quota: {j:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Cancelling a job in the second fleet deletes its RayJob there; the waiting job
    // then runs in that fleet and ends, and is cleaned up there.
    let in_second = if ja["fleet"] == "fleet-2" { &a } else { &b };
    let (status, body) = client
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{in_second}"))
        .await;
    assert_eq!(status, 200, "{body:#}");
    let done = client
        .wait_state(&c, "succeeded", Duration::from_secs(180))
        .await;
    assert_eq!(done["fleet"], "fleet-2", "{done:#}");
    let log = client.logs(&c).await;
    assert!(
        log.1.contains("up"),
        "the job's log, archived from fleet-2: {log:?}"
    );
    forge_tests::jobs::wait_no_rayjobs(&two, Duration::from_secs(60)).await;
    assert_eq!(
        rayjob_names(&one).await.len(),
        1,
        "fleet-1's job still runs"
    );
}
