//! Fleets (issue 42): one gateway in front of two emulated clusters (`dev --fleets 2`).
//! Jobs spread over both, each gang in exactly one cluster; capacity is shown per fleet
//! and summed; the orphan scan covers both; a policy pins a team to one fleet.

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, rayjob_names, rayjobs, zip_of};
use forge_tests::policy::{self, ALICE, BOB, PolicyClient};
use forge_tests::procs::NAMESPACE;
use forge_tests::wait::{eventually, not_yet};
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
    let cap = eventually(
        "both fleets' capacity listed",
        Duration::from_secs(30),
        || async {
            let (_, cap) = client.call(reqwest::Method::GET, "/v1/capacity").await;
            let listed = cap["fleets"].as_array().is_some_and(|f| {
                f.iter()
                    .all(|f| f["series"].as_array().is_some_and(|s| !s.is_empty()))
            });
            if listed { Ok(cap) } else { Err(not_yet(cap)) }
        },
    )
    .await;
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
    eventually(
        "job c waiting on the global quota",
        Duration::from_secs(30),
        || async {
            let j = client.job(&c).await;
            if j["state"] == "queued" && j["queue"]["code"] == "quota.exceeded" {
                Ok(())
            } else {
                Err(not_yet(j))
            }
        },
    )
    .await;

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
    let waiting = eventually(
        "team-b's second job waiting",
        Duration::from_secs(30),
        || async {
            let j = bob.job(&second).await;
            if j["state"] == "queued" && !j["queue"]["code"].is_null() {
                Ok(j)
            } else {
                Err(not_yet(j))
            }
        },
    )
    .await;
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

/// How many jobs the two-fleet fault test runs (`FORGE_FAULT_JOBS` overrides; the issue
/// asks for 200, a release-build run).
const FAULT_JOBS: usize = 40;

/// Faults on both fleets' API servers (500s and 429s on RayJob creates, deletes and
/// lists, pods, logs and events; dropped watches; compactions — the single-cluster
/// fault test's rounds, on each cluster), and every RayJob create held for a while, on
/// one fleet then the other: every job ends `succeeded`, its code ran once, and the
/// API servers' audit trails show exactly one RayJob create per job, in the fleet the
/// job records and in no other. No job is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_faults_on_both_fleets_every_job_is_launched_exactly_once() {
    forge_tests::gateway::init_tracing("error,kube_client=off");
    // Two 4-GPU nodes per fleet and the team's quota of 16: both fleets run jobs, at
    // most 4 on a node. (One 8-GPU node per fleet once stalled this test: 8 heads of
    // 8 CPUs filled a node's 64 and left no room for the submitters. The gang now
    // counts its submitter pod; `jobs::heads_never_take_the_cpu_their_drivers_need`.)
    let gw =
        std::sync::Arc::new(TestGateway::start_tweaked("h100=2x4", &[], |o| o.fleets = 2).await);
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let injector = {
        let (gw, stop) = (gw.clone(), stop.clone());
        tokio::spawn(async move {
            let mut round = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && round < 30 {
                crate::faults::inject(gw.sim.faults(), round);
                crate::faults::inject(gw.other_fleets[0].faults(), round + 1);
                // Every few rounds one fleet's creates are held for two seconds, in
                // turn: those jobs wait on their create, in that fleet.
                let creates = || {
                    forge_kubesim::faults::HoldRule::default()
                        .path_contains("/rayjobs")
                        .verb("create")
                };
                match round % 5 {
                    1 => gw.sim.faults().hold(creates()),
                    3 => {
                        gw.sim.faults().release();
                        gw.other_fleets[0].faults().hold(creates());
                    }
                    0 => gw.other_fleets[0].faults().release(),
                    _ => {}
                }
                round += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            gw.sim.faults().clear();
            gw.other_fleets[0].faults().clear();
            round
        })
    };
    let jobs = std::env::var("FORGE_FAULT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(FAULT_JOBS);
    let mut ids = Vec::new();
    for i in 0..jobs {
        let spec = forge_tests::jobs::one_gpu_spec(&format!("fault-{i}"), "python3 job.py");
        let code = forge_tests::jobs::marker_zip(runs.path(), 0.0);
        ids.push(client.submit_ok(&spec, code).await);
    }
    // About 3 s a job in a debug build under these faults (40 in 123 s); bounded
    // with room to spare.
    let within = Duration::from_secs(200 + 10 * u64::try_from(jobs).expect("jobs"));
    let done = client.wait_terminal(&ids, within).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = injector.await.expect("injector");

    let listed = client.list_ids().await;
    let want: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(listed, want, "jobs lost or invented");
    let creates = |sim: &forge_kubesim::Sim| {
        let mut n: std::collections::BTreeMap<String, usize> = Default::default();
        for c in sim.created("rayjobs") {
            *n.entry(c.name).or_default() += 1;
        }
        n
    };
    let (one, two) = (creates(&gw.sim), creates(&gw.other_fleets[0]));
    let mut per_fleet = [0usize; 2];
    for id in &ids {
        let j = &done[id];
        assert_eq!(j["state"], "succeeded", "{j:#}");
        assert_eq!(
            forge_tests::jobs::runs_of(runs.path(), id),
            1,
            "job {id} ran more than once"
        );
        let name = format!("forge-{id}");
        let (a, b) = (one.get(&name).copied(), two.get(&name).copied());
        let (mine, other, ix) = match j["fleet"].as_str() {
            Some("fleet-1") => (a, b, 0),
            Some("fleet-2") => (b, a, 1),
            other => panic!("job {id} records fleet {other:?}: {j:#}"),
        };
        assert_eq!(
            mine,
            Some(1),
            "job {id}: RayJob creates in its fleet: {j:#}"
        );
        assert_eq!(
            other, None,
            "job {id}: a RayJob in the other fleet too: {j:#}"
        );
        per_fleet[ix] += 1;
    }
    assert!(rounds >= 3, "faults were injected only {rounds} rounds");
    println!(
        "{jobs} jobs under faults on two fleets: {} in fleet-1, {} in fleet-2, {rounds} rounds",
        per_fleet[0], per_fleet[1]
    );
    assert!(
        per_fleet.iter().all(|n| *n > 0),
        "both fleets ran jobs: {per_fleet:?}"
    );
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
    fleet_two_available(&client, false).await;
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
    fleet_two_available(&client, true).await;
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

/// fleet-2's entry in a `/v1/capacity` answer (null when absent).
fn fleet_two(cap: &Value) -> Value {
    cap["fleets"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "fleet-2").cloned())
        .unwrap_or(Value::Null)
}

/// Waits until `/v1/capacity` shows fleet-2 `available` (or not).
async fn fleet_two_available(client: &JobClient, available: bool) {
    let what = if available {
        "fleet-2 available again"
    } else {
        "fleet-2 marked unavailable"
    };
    eventually(what, Duration::from_secs(30), || async {
        let (_, cap) = client.call(reqwest::Method::GET, "/v1/capacity").await;
        if fleet_two(&cap)["available"] == available {
            Ok(())
        } else {
            Err(not_yet(cap))
        }
    })
    .await;
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

/// How long fleet-1's API server stays down after it is killed mid-create: past the
/// three failed probes (6 s) that set a fleet aside.
const KILLED_FOR: Duration = Duration::from_secs(10);

/// Fleet-1's API server is killed right after it stores a job's RayJob, before it
/// answers: the create's connection closes unanswered, every call to it is refused
/// for [`KILLED_FOR`], then it serves again with what it had stored (etcd survives a
/// kube-apiserver restart). The job is not launched anywhere else meanwhile: it
/// stays dispatched in fleet-1, its RayJob is found there once the fleet answers,
/// and it runs once, from exactly one RayJob in exactly one fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_killed_mid_create_launches_the_job_in_exactly_one_fleet() {
    forge_tests::gateway::init_tracing("error,kube_client=off");
    let gw = TestGateway::start_tweaked("h100=1x8", &[], |o| o.fleets = 2).await;
    let client = gw.client(&gw.token);
    gw.sim.faults().crash(forge_kubesim::CrashRule {
        down_ms: u64::try_from(KILLED_FOR.as_millis()).expect("ms"),
        matching: forge_kubesim::faults::Matching::default()
            .path_contains("/rayjobs")
            .verb("create"),
    });
    let runs = tempfile::tempdir().expect("runs dir");
    // The whole node of fleet-1 (first of two empty fleets).
    let mut spec = forge_tests::jobs::one_gpu_spec("killed-mid-create", "python3 job.py");
    spec["pools"][0]["gpusPerNode"] = 8.into();
    let id = client
        .submit_ok(&spec, forge_tests::jobs::marker_zip(runs.path(), 0.0))
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(180))
        .await;
    let job = &done[&id];
    assert_eq!(gw.sim.faults().state().crashed, 1, "fleet-1 was killed");
    assert_eq!(job["state"], "succeeded", "{job:#}");
    assert_eq!(job["fleet"], "fleet-1", "{job:#}");
    let history = forge_tests::jobs::history(job);
    assert_eq!(
        history.iter().filter(|s| *s == "dispatched").count(),
        1,
        "dispatched once: {job:#}"
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
