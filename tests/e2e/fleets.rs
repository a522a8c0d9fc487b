//! Fleets (issue 42): one gateway in front of two emulated clusters (`dev --fleets 2`).
//! Jobs spread over both, each gang in exactly one cluster; capacity is shown per fleet
//! and summed; the orphan scan covers both; a policy pins a team to one fleet.

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, rayjob_names, rayjobs, zip_of};
use forge_tests::policy::{self, ALICE, BOB, PolicyClient};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_pins_a_team_to_one_fleet() {
    let gw = policy::gateway_tweaked("h100=1x8", &[], |o| o.fleets = 2).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    // pool-series pins team-b to fleet-2 (data residency); team-a may run anywhere.
    let pinned = admin
        .global_links_with(
            "pool-series",
            json!({"default_series": "h100", "allowed": ["h100", "h200"],
                   "fleets": {"team-b": ["fleet-2"]}}),
        )
        .await;
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": 1, "plugins": pinned}))
        .await;
    assert_eq!(s, 200, "{body:#}");

    let bob = JobClient::new(&gw.url, BOB);
    let code = zip_of(&[("noop.py", "")]);
    let first = bob.submit_ok(&whole_node("b1", 600), code.clone()).await;
    bob.wait_running(&first, Duration::from_secs(120)).await;
    assert_eq!(bob.job(&first).await["fleet"], "fleet-2");

    // fleet-1 has a free node, but team-b may not use it: its second job waits.
    let second = bob.submit_ok(&whole_node("b2", 1), code.clone()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let waiting = loop {
        let j = bob.job(&second).await;
        if j["state"] == "queued" && !j["queue"]["code"].is_null() {
            break j;
        }
        assert!(tokio::time::Instant::now() < deadline, "not waiting: {j:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        waiting["queue"]["code"]
            .as_str()
            .is_some_and(|c| c.starts_with("capacity.")),
        "waits for room in its fleet: {waiting:#}"
    );
    // team-a is not pinned: its job takes fleet-1's node.
    let alice = JobClient::new(&gw.url, ALICE);
    let a = alice.submit_ok(&whole_node("a", 1), code).await;
    let done = alice
        .wait_state(&a, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["fleet"], "fleet-1", "{done:#}");
    assert_eq!(
        bob.job(&second).await["state"],
        "queued",
        "team-b stays out of fleet-1"
    );

    // Once its fleet has room, the pinned job runs there.
    let (status, body) = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{first}"))
        .await;
    assert_eq!(status, 200, "{body:#}");
    let done = bob
        .wait_state(&second, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["fleet"], "fleet-2", "{done:#}");
}

/// A job holding `gpus` GPUs of one node for `secs` seconds.
fn gpus_for(name: &str, gpus: u32, secs: u32) -> Value {
    let mut spec = whole_node(name, secs);
    spec["pools"][0]["gpusPerNode"] = gpus.into();
    spec
}

/// How long fleet-2's API server stops answering the gateway (the 60 s).
const OUTAGE: Duration = Duration::from_secs(60);

/// fleet-2's API server fails every call of the gateway for [`OUTAGE`]: the fleet is
/// marked unavailable (capacity, `/readyz`, the metric) while fleet-1 keeps taking
/// jobs; the job running in fleet-2 ends there meanwhile, unseen, and is not failed;
/// when the fleet answers again it is available, and that job is reconciled to
/// `succeeded` with its log archived.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_down_for_a_minute_is_set_aside_and_its_jobs_reconciled_when_it_returns() {
    forge_tests::gateway::init_tracing("error,kube_client=off");
    let gw = TestGateway::start_tweaked("h100=1x8", &[], |o| o.fleets = 2).await;
    let client = gw.client(&gw.token);
    let code = zip_of(&[("noop.py", "")]);
    // Half of fleet-1 (the first of two empty fleets), then a whole node: fleet-2.
    let a = client.submit_ok(&gpus_for("a", 4, 900), code.clone()).await;
    client.wait_running(&a, Duration::from_secs(120)).await;
    let b = client.submit_ok(&whole_node("b", 20), code.clone()).await;
    client.wait_running(&b, Duration::from_secs(120)).await;
    assert_eq!(client.job(&b).await["fleet"], "fleet-2");

    let fleet_two = |cap: &Value| -> Value {
        cap["fleets"]
            .as_array()
            .and_then(|f| f.iter().find(|f| f["name"] == "fleet-2").cloned())
            .unwrap_or(Value::Null)
    };
    let outage = tokio::time::Instant::now();
    gw.other_fleets[0]
        .faults()
        .add_rule(forge_kubesim::faults::FailRule {
            count: u32::MAX,
            code: 500,
            retry_after_seconds: None,
            matching: forge_kubesim::faults::Matching::default()
                .path_contains("/api")
                .user_agent_contains("forge-gateway"),
        });
    // Its open watches are cut too, as a partition cuts them: they cannot resume.
    gw.other_fleets[0].faults().drop_watches();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, cap) = client.call(reqwest::Method::GET, "/v1/capacity").await;
        if fleet_two(&cap)["available"] == false {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fleet-2 not marked unavailable: {cap:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready: Value = gw
        .get("/readyz")
        .send()
        .await
        .expect("readyz")
        .json()
        .await
        .expect("json");
    assert_eq!(
        ready["ready"], true,
        "one fleet down is not a readiness failure: {ready:#}"
    );
    let detail = ready["checks"]["caches"]["detail"]
        .as_str()
        .unwrap_or_default();
    assert!(detail.contains("fleet-2"), "{ready:#}");
    assert!(
        gw.metrics()
            .await
            .contains("forge_fleet_available{fleet=\"fleet-2\"} 0")
    );

    // fleet-1 still takes jobs: its free half.
    let c = client.submit_ok(&gpus_for("c", 4, 1), code).await;
    let done = client
        .wait_state(&c, "succeeded", Duration::from_secs(120))
        .await;
    assert_eq!(done["fleet"], "fleet-1", "{done:#}");

    // The outage lasts its time (no condition ends it); b, which ended in fleet-2
    // meanwhile, is never failed for being out of sight.
    while outage.elapsed() < OUTAGE {
        let j = client.job(&b).await;
        assert!(
            matches!(
                j["state"].as_str(),
                Some("running" | "dispatched" | "initializing")
            ),
            "job b moved while its fleet was out of sight: {j:#}"
        );
        assert_eq!(j["observed"], "unknown", "{j:#}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    gw.other_fleets[0].faults().clear();

    let done = client
        .wait_state(&b, "succeeded", Duration::from_secs(120))
        .await;
    assert!(
        !forge_tests::jobs::history(&done).contains(&"failed".to_string()),
        "{done:#}"
    );
    assert!(done.get("observed").is_none(), "{done:#}");
    let (status, log) = client.logs(&b).await;
    assert_eq!(status, 200, "{log}");
    assert!(
        log.contains("up"),
        "archived from fleet-2 after it returned: {log}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, cap) = client.call(reqwest::Method::GET, "/v1/capacity").await;
        if fleet_two(&cap)["available"] == true {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "fleet-2 not back: {cap:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        gw.metrics()
            .await
            .contains("forge_fleet_available{fleet=\"fleet-2\"} 1")
    );
    let (status, body) = client
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{a}"))
        .await;
    assert_eq!(status, 200, "{body:#}");
}

/// fleet-1's API server stores a job's RayJob and then loses every answer to its
/// creates (the first create's and each retry's — the rule outlasts them): the
/// create fails in a way that proves nothing. The dispatcher looks the RayJob up by
/// its name in that fleet before the job may go anywhere else, finds it, and adopts
/// it: the job runs once, in fleet-1, and fleet-2 never sees a RayJob of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_whose_answer_is_lost_is_adopted_in_its_fleet_not_launched_again() {
    forge_tests::gateway::init_tracing("error,kube_client=off");
    let gw = TestGateway::start_tweaked("h100=1x8", &[], |o| o.fleets = 2).await;
    let client = gw.client(&gw.token);
    const LOST: u32 = 100;
    gw.sim.faults().lose_answers(forge_kubesim::LoseAnswerRule {
        count: LOST,
        matching: forge_kubesim::faults::Matching::default()
            .path_contains("/rayjobs")
            .verb("create"),
    });
    let runs = tempfile::tempdir().expect("runs dir");
    let spec = forge_tests::jobs::one_gpu_spec("lost-answer", "python3 job.py");
    let id = client
        .submit_ok(&spec, forge_tests::jobs::marker_zip(runs.path(), 0.0))
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    let job = &done[&id];
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["fleet"], "fleet-1", "{job:#}");
    let history = forge_tests::jobs::history(job);
    assert_eq!(
        history.iter().filter(|s| *s == "dispatched").count(),
        1,
        "dispatched once: {job:#}"
    );
    // No create of it was ever answered: it ran because the look-up found it.
    let left = gw.sim.faults().state().lost_answers;
    assert!(
        left.len() == 1 && left[0].count < LOST,
        "its creates' answers were lost: {left:?}"
    );
    let name = format!("forge-{id}");
    let count = |sim: &forge_kubesim::Sim| {
        sim.created("rayjobs")
            .iter()
            .filter(|c| c.name == name)
            .count()
    };
    assert_eq!(count(&gw.sim), 1, "one RayJob in fleet-1");
    assert_eq!(count(&gw.other_fleets[0]), 0, "none in fleet-2");
    assert_eq!(forge_tests::jobs::runs_of(runs.path(), &id), 1, "ran once");
}
