//! API-server faults (issue 6): many small jobs run through the gateway (dev
//! composition, emulator in process mode) while the emulator fails RayJob, pod and
//! event calls with 500 and 429 and drops every watch now and then. Every job must
//! succeed with its driver log archived, run exactly once (one RayJob, one run of its
//! code), and leave no RayJob behind; no job is lost. The gateway partitioned from the
//! API server for 30 s, then back, fails and duplicates nothing. A job whose events
//! cannot be listed is archived without them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use forge_gateway::cluster::api_error::ATTEMPTS;
use forge_gateway::jobs::logs::CLUSTER_READ_WITHIN;
use forge_kubesim::faults::{FailRule, HoldRule, Matching};
use forge_tests::gateway::{RELISTS, RESYNCS, TestGateway};
use forge_tests::jobs::{
    JobClient, RayJobRecorder, history, marker_zip, one_gpu_spec, rayjobs, runs_of,
    wait_no_rayjobs, zip_of,
};
use forge_tests::wait::{eventually, not_yet};

/// How many jobs. The issue asks for 100; in a debug build on 2 cores 100 process-mode
/// jobs under faults take over 5 minutes, so the suite runs 40 (`FORGE_FAULT_JOBS`
/// overrides, e.g. 100 for a release-build run).
const JOBS: usize = 40;
/// Fault rounds (one a second) — a burst of faults over the busiest part of the run.
const ROUNDS: u32 = 30;

/// One round of faults: 500s and 429s on RayJob, pod and event calls. A rule is only
/// re-armed once the previous one like it was used up, so failures keep coming at the
/// rate the gateway makes calls instead of piling up into a permanent outage.
pub(crate) fn inject(faults: &forge_kubesim::faults::Faults, round: u32) {
    let rule = |code: u16, path: &str, verb: Option<&str>, count: u32| FailRule {
        count,
        code,
        retry_after_seconds: Some(1),
        matching: Matching {
            verb: verb.map(str::to_string),
            ..Matching::default().path_contains(path)
        },
    };
    // No faults on a RayJob GET: the emulator's process-mode submitter reads its RayJob
    // through the API without retrying, so a 500 there fails the job inside the
    // emulator (real KubeRay submitters talk to the Ray dashboard, not the API server).
    let wanted = [
        rule(500, "/rayjobs", Some("create"), 2),
        rule(429, "/rayjobs", Some("create"), 1),
        rule(500, "/rayjobs", Some("delete"), 1),
        rule(429, "/rayjobs", Some("delete"), 1),
        rule(500, "/rayjobs", Some("list"), 1),
        rule(500, "/pods", Some("list"), 1),
        rule(429, "/pods", Some("get"), 1),
        rule(500, "/log", None, 1),
        rule(500, "/events", None, 1),
        rule(429, "/events", None, 1),
    ];
    let pending = faults.state().rules;
    for r in wanted {
        let armed = pending
            .iter()
            .any(|p| p.code == r.code && p.matching == r.matching);
        if !armed {
            faults.add_rule(r);
        }
    }
    if round.is_multiple_of(3) {
        faults.drop_watches();
    }
    if round % 7 == 6 {
        faults.compact();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_all_end_correctly_under_api_server_faults() {
    // Thousands of expected warnings (every injected fault is logged by the client and
    // the gateway) would bury a failure's message in CI output: errors only, unless
    // RUST_LOG says otherwise.
    forge_tests::gateway::init_tracing("error,kube_client=off");
    let started = Instant::now();
    let gw = Arc::new(TestGateway::start("h100=4x8", &[]).await);
    let client = JobClient::new(&gw.url, &gw.token);
    let api = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let (recorder, recorder_task) = RayJobRecorder::start(api.clone());
    let runs = tempfile::tempdir().expect("runs dir");

    // Fault rounds, one a second, over the busiest part of the run.
    let stop = Arc::new(AtomicBool::new(false));
    let injector = {
        let stop = stop.clone();
        let gw = gw.clone();
        tokio::spawn(async move {
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) && round < ROUNDS {
                inject(gw.sim.faults(), round);
                round += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            gw.sim.faults().clear();
            round
        })
    };

    let jobs = std::env::var("FORGE_FAULT_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(JOBS);
    let mut ids = Vec::new();
    for i in 0..jobs {
        let spec = one_gpu_spec(&format!("fault-{i}"), "python3 job.py");
        ids.push(client.submit_ok(&spec, marker_zip(runs.path(), 0.0)).await);
    }
    let submitted = started.elapsed();
    let done = client.wait_terminal(&ids, Duration::from_secs(300)).await;
    stop.store(true, Ordering::Relaxed);
    let rounds = injector.await.expect("injector");
    let finished = started.elapsed();

    // No job lost: the gateway lists exactly the jobs submitted.
    let listed = client.list_ids().await;
    let want: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
    assert_eq!(listed, want, "jobs lost or invented");

    for id in &ids {
        let j = &done[id];
        assert_eq!(j["state"], "succeeded", "{j:#}");
        let h = history(j);
        assert_eq!(h.first().map(String::as_str), Some("queued"), "{j:#}");
        assert!(h.contains(&"running".to_string()), "{j:#}");
        let (status, text) = client.logs(id).await;
        assert_eq!(status, 200, "job {id}: {text}");
        assert!(
            text.contains(&format!("forge-marker {id}"))
                && text.contains(&format!("forge-done {id}")),
            "job {id} driver log: {text}"
        );
        assert_eq!(runs_of(runs.path(), id), 1, "job {id} ran more than once");
    }
    wait_no_rayjobs(&api, Duration::from_secs(60)).await;

    // Never two RayJobs for one job: the API server's audit trail of creates (which,
    // unlike a watch under injected faults, has no gaps) shows exactly one per job.
    recorder_task.abort();
    let mut creates: std::collections::BTreeMap<String, usize> = Default::default();
    for c in gw.sim.created("rayjobs") {
        *creates.entry(c.name).or_default() += 1;
    }
    for (name, n) in &creates {
        assert_eq!(*n, 1, "RayJob {name} created {n} times");
    }
    for id in &ids {
        assert_eq!(
            creates.get(&format!("forge-{id}")),
            Some(&1),
            "job {id} has no RayJob in the API server's audit trail"
        );
    }
    // The watch the test ran beside it saw no second UID either.
    for (name, uids) in &recorder.seen() {
        assert_eq!(uids.len(), 1, "RayJob {name} seen with {} UIDs", uids.len());
    }
    assert!(rounds >= 3, "faults were injected only {rounds} rounds");
    println!(
        "{jobs} jobs: submitted in {submitted:?}, all terminal in {finished:?}, {rounds} fault rounds"
    );
}

/// A RayJob create the API server refuses (413 RequestEntityTooLarge: retrying the same
/// request cannot help) fails the job with the server's message instead of
/// re-queueing it forever, and frees its GPUs: a second job asking for the whole
/// machine runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rayjob_create_fails_the_job_and_frees_its_gpus() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    gw.sim.faults().add_rule(FailRule {
        count: 1,
        code: 413,
        retry_after_seconds: None,
        matching: Matching::default().path_contains("/rayjobs").verb("create"),
    });
    let mut spec = one_gpu_spec("refused", "python3 job.py");
    spec["pools"][0]["gpusPerNode"] = 8.into();
    let refused = client.submit_ok(&spec, marker_zip(runs.path(), 0.0)).await;
    let done = client
        .wait_terminal(std::slice::from_ref(&refused), Duration::from_secs(60))
        .await;
    let job = &done[&refused];
    assert_eq!(job["state"], "failed", "{job:#}");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("dispatch.refused") && reason.contains("Request entity too large"),
        "the API server's message is the reason: {job:#}"
    );
    assert!(!history(job).contains(&"running".to_string()), "{job:#}");
    assert_eq!(runs_of(runs.path(), &refused), 0);

    spec["name"] = "after".into();
    let after = client.submit_ok(&spec, marker_zip(runs.path(), 0.0)).await;
    let done = client
        .wait_terminal(std::slice::from_ref(&after), Duration::from_secs(120))
        .await;
    assert_eq!(done[&after]["state"], "succeeded", "{:#}", done[&after]);
}

/// A job whose Kubernetes events cannot be listed (every list answered 500) still
/// ends, and its log is archived without them: the events are best effort, the log
/// is not. Its events then answer empty, not an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_events_cannot_be_read_is_archived_without_them() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client = JobClient::new(&gw.url, &gw.token);
    gw.sim.faults().add_rule(FailRule {
        count: u32::MAX,
        code: 500,
        retry_after_seconds: None,
        matching: Matching::default().path_contains("/events").verb("list"),
    });
    let code = zip_of(&[("job.py", "print('archived without its events')\n")]);
    let id = client
        .submit_ok(&one_gpu_spec("no-events", "python3 job.py"), code)
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    let api = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    wait_no_rayjobs(&api, Duration::from_secs(30)).await;
    let (status, log) = client.logs(&id).await;
    assert_eq!(status, 200);
    assert!(log.contains("archived without its events"), "{log}");
    let (status, events) = client
        .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/events"))
        .await;
    assert_eq!(status, 200, "{events:#}");
    assert_eq!(events["events"], serde_json::json!([]), "{events:#}");
    assert!(
        gw.sim
            .faults()
            .state()
            .rules
            .iter()
            .any(|r| r.count < u32::MAX),
        "the events were asked for (and refused)"
    );
}

/// A RayJob watch relist while this process's own create of a job's RayJob is still in
/// flight (the API server holds it) leaves the job to that create. The reconcile after
/// a relist queues again a `dispatched` job whose RayJob does not exist — for a leader
/// that died between storing its intent and creating — and must not take a create still
/// on its way for one that never happened: the job stays dispatched, is dispatched
/// once, gets one RayJob and runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_while_a_create_is_in_flight_leaves_the_job_to_it() {
    let gw = TestGateway::start("h100=1x8", &[]).await.listed().await;
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    gw.sim
        .faults()
        .hold(HoldRule::default().path_contains("/rayjobs").verb("create"));
    let spec = one_gpu_spec("held-create", "python3 job.py");
    let id = client.submit_ok(&spec, marker_zip(runs.path(), 0.0)).await;
    gw.held_reaches(1, "the RayJob create held by the API server")
        .await;
    // Compacting, then dropping the watches: the gateway's watchers get 410 Gone on
    // resuming and list again, and the lifecycle reconciles the store with that list.
    let before = gw.counter(RELISTS).await;
    gw.sim.faults().compact();
    gw.sim.faults().drop_watches();
    gw.counter_reaches(RELISTS, before + 1, "a RayJob relist reconciled")
        .await;
    let job = client.job(&id).await;
    assert_eq!(
        (job["state"].as_str(), history(&job)),
        (
            Some("dispatched"),
            vec!["queued".to_string(), "dispatched".to_string()]
        ),
        "the relist during the create queued the job again: {job:#}"
    );

    gw.sim.faults().release();
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    let job = &done[&id];
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let dispatched = history(job).iter().filter(|s| *s == "dispatched").count();
    assert_eq!(dispatched, 1, "dispatched {dispatched} times: {job:#}");
    assert_eq!(runs_of(runs.path(), &id), 1, "job {id} ran more than once");
    let creates = rayjob_creates(&gw, &id);
    assert_eq!(creates, 1, "RayJob of {id} created {creates} times");
}

/// How many times the API server created job `id`'s RayJob.
fn rayjob_creates(gw: &TestGateway, id: &str) -> usize {
    gw.sim
        .created("rayjobs")
        .into_iter()
        .filter(|c| c.name == format!("forge-{id}"))
        .count()
}

/// The periodic resync's LIST of RayJobs (seconds for thousands on a real API server;
/// here held at the API server) runs beside the watch events: a job submitted while it
/// waits still moves through its states to its end, and the round is counted only
/// after the list arrived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_waiting_on_its_list_does_not_stall_the_lifecycle() {
    let gw = TestGateway::start("h100=1x8", &[]).await.listed().await;
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    // Lists of this installation's RayJobs wait: after the watcher's first list, only
    // a resync (or a relist, which this test does not cause) sends one.
    gw.sim.faults().hold(
        HoldRule::default()
            .path_contains("/rayjobs")
            .verb("list")
            .query_contains("instance"),
    );
    gw.held_reaches(1, "a resync's RayJob list held by the API server")
        .await;
    let before = gw.counter(RESYNCS).await;

    let id = client
        .submit_ok(
            &one_gpu_spec("during-resync", "python3 job.py"),
            marker_zip(runs.path(), 0.0),
        )
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    assert_eq!(
        (gw.sim.faults().state().held, gw.counter(RESYNCS).await),
        (1, before),
        "the resync's list is still held and its round not counted"
    );

    gw.sim.faults().release();
    gw.counter_reaches(
        RESYNCS,
        before + 1,
        "the resync round over once its list arrived",
    )
    .await;
    assert_eq!(runs_of(runs.path(), &id), 1);
}

/// A resync whose LIST fails (500s past the client's retries) ends the round: the
/// next one runs 10 s later and lists again, instead of the lifecycle waiting for a
/// list that will never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resync_whose_list_fails_ends_and_the_next_one_runs() {
    let gw = TestGateway::start("h100=1x8", &[]).await.listed().await;
    // A 500 for every attempt of one resync's list (`with_retry`), which then fails.
    gw.sim.faults().add_rule(FailRule {
        count: ATTEMPTS,
        code: 500,
        matching: Matching::default()
            .path_contains("/rayjobs")
            .verb("list")
            .query_contains("instance"),
        ..FailRule::default()
    });
    // Rounds do not overlap: once the rule is used up, every round before the one it
    // failed has been counted, so the count moves on only once that round ended, and
    // again when the next one did.
    let failed = eventually(
        "a resync's list failed",
        Duration::from_secs(30),
        || async {
            if gw.sim.faults().state().rules.is_empty() {
                Ok(gw.counter(RESYNCS).await)
            } else {
                Err(not_yet(gw.sim.faults().state().rules))
            }
        },
    )
    .await;
    gw.counter_reaches(
        RESYNCS,
        failed + 2,
        "the round whose list failed, and the next one, over",
    )
    .await;
}

/// The lifecycle controller handles RayJobs concurrently: one job's event stuck on the
/// API server (a failing job's pods listed for OOM kills, held) does not stop another
/// job's RayJob events from moving that job to its end, and the periodic resync leaves
/// the stuck RayJob to its handler instead of waiting on the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rayjob_stuck_in_the_lifecycle_does_not_hold_back_the_others() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    let (succeeded, failed) = (
        r#"forge_job_transitions_total{state="succeeded"}"#,
        r#"forge_job_transitions_total{state="failed"}"#,
    );
    // Pod lists selecting on `forge.dev/job-id` wait: the failing job's OOM-kill
    // lookup (the emulated Ray driver selects on other labels and runs on). A job's
    // details list pods that way too: states are read from the metrics until the release.
    gw.sim.faults().hold(
        HoldRule::default()
            .path_contains("/pods")
            .verb("list")
            .query_contains("job-id"),
    );
    let failing = client
        .submit_ok(
            &one_gpu_spec("fails", "python3 fail.py"),
            zip_of(&[("fail.py", "raise SystemExit(3)\n")]),
        )
        .await;
    eventually(
        "the failing job's pod list held by the API server",
        Duration::from_secs(60),
        || async {
            let held = gw.sim.faults().state().held;
            if held >= 1 {
                Ok(())
            } else {
                Err(not_yet(held))
            }
        },
    )
    .await;

    let ok = client
        .submit_ok(
            &one_gpu_spec("succeeds", "python3 job.py"),
            marker_zip(runs.path(), 0.0),
        )
        .await;
    eventually(
        "the other job succeeded while the failing one's handling waits",
        Duration::from_secs(60),
        || async {
            let n = gw.counter(succeeded).await;
            if n == 1 { Ok(()) } else { Err(not_yet(n)) }
        },
    )
    .await;
    assert_eq!(
        gw.counter(failed).await,
        0,
        "the failing job's handling was not the one held"
    );
    // The periodic resync (every 10 s) lists the failing job's RayJob too: it must
    // leave it to the handler in hand, not look it up again and wait on the same hold
    // (which would stall the whole loop: no resync would ever finish).
    // Held by then as well: the succeeded job's log archival, which lists its pods.
    gw.held_reaches(2, "the succeeded job's log archival held too")
        .await;
    let before = gw.counter(RESYNCS).await;
    gw.counter_reaches(
        RESYNCS,
        before + 1,
        "a resync finished while the failing job's handling waits",
    )
    .await;
    assert_eq!(
        gw.sim.faults().state().held,
        2,
        "the resync asked again about the RayJob whose handling is held"
    );

    gw.sim.faults().release();
    let done = client
        .wait_terminal(&[failing.clone(), ok.clone()], Duration::from_secs(60))
        .await;
    assert_eq!(done[&failing]["state"], "failed", "{:#}", done[&failing]);
    assert_eq!(done[&ok]["state"], "succeeded", "{:#}", done[&ok]);
    assert_eq!(runs_of(runs.path(), &ok), 1);
}

/// How long the API server is unreachable in the partition test (issue 40 §5).
const PARTITION: Duration = Duration::from_secs(30);
/// The lifecycle's resync period (`jobs/lifecycle/mod.rs`): statuses catch up within it.
const RESYNC: Duration = Duration::from_secs(10);

/// Issue 40 §5: the Kubernetes API unreachable from the gateway for 30 s (every call
/// it makes held at the API server, its watches dropped: a network partition), then
/// back. Two jobs run through it (they end while the gateway cannot see it) and two
/// are submitted during it (their creates wait). The gateway keeps its hands off: no
/// job is failed meanwhile, no RayJob is created twice, every job succeeds and runs
/// once, and the ended jobs' states catch up within one resync of the partition's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_unreachable_for_30_s_then_back_fails_and_duplicates_nothing() {
    let gw = TestGateway::start("h100=2x8", &[]).await.listed().await;
    let client = JobClient::new(&gw.url, &gw.token);
    let runs = tempfile::tempdir().expect("runs dir");
    let spec = |name: &str| one_gpu_spec(name, "python3 job.py");
    let mut ids = Vec::new();
    for name in ["through-1", "through-2"] {
        ids.push(
            client
                .submit_ok(&spec(name), marker_zip(runs.path(), 5.0))
                .await,
        );
    }
    for id in &ids {
        client.wait_running(id, Duration::from_secs(60)).await;
    }
    gw.sim.faults().hold(
        forge_kubesim::faults::Matching::default()
            .user_agent_contains(forge_gateway::cluster::connect::USER_AGENT),
    );
    gw.sim.faults().drop_watches();
    let cut = Instant::now();
    for name in ["during-1", "during-2"] {
        ids.push(
            client
                .submit_ok(&spec(name), marker_zip(runs.path(), 0.5))
                .await,
        );
    }
    // Both new jobs' RayJob creates wait at the API server (among the gateway's other
    // calls): the partition is in place.
    eventually(
        "the RayJob creates held",
        Duration::from_secs(30),
        || async {
            let creates: usize = ids[2..].iter().map(|id| rayjob_creates(&gw, id)).sum();
            let held = gw.sim.faults().state().held;
            if creates == 0 && held >= 2 {
                Ok(())
            } else {
                Err(not_yet((creates, held)))
            }
        },
    )
    .await;
    // Meanwhile a job's page does not wait for the cluster: its view leaves the
    // cluster's details out, its events are a 503 to retry, each within the bound.
    for (path, status) in [
        (format!("/v1/jobs/{}", ids[0]), 200),
        (format!("/v1/jobs/{}/events", ids[0]), 503),
    ] {
        let asked = Instant::now();
        let (got, body) = client.call(reqwest::Method::GET, &path).await;
        let took = asked.elapsed();
        assert_eq!(got, status, "GET {path} while partitioned: {body}");
        if status == 503 {
            assert_eq!(body["error"]["code"], "cluster-unavailable", "{body}");
        }
        assert!(
            took < CLUSTER_READ_WITHIN + Duration::from_secs(2),
            "GET {path} took {took:?} while partitioned"
        );
    }
    // The partition lasts its time: no condition ends it.
    tokio::time::sleep(PARTITION.saturating_sub(cut.elapsed())).await;
    for id in &ids {
        let job = client.job(id).await;
        assert_ne!(job["state"], "failed", "failed while partitioned: {job:#}");
    }
    // The two first jobs ended in the cluster meanwhile (5 s of work), unseen.
    let unseen: usize = ids[..2].iter().map(|id| rayjob_creates(&gw, id)).sum();
    assert_eq!(unseen, 2);
    gw.sim.faults().release();
    let back = Instant::now();
    let done = client.wait_terminal(&ids[..2], RESYNC).await;
    let caught_up = back.elapsed();
    for id in &ids[..2] {
        assert_eq!(done[id]["state"], "succeeded", "{:#}", done[id]);
    }
    let done = client.wait_terminal(&ids, Duration::from_secs(120)).await;
    for id in &ids {
        let job = &done[id];
        assert_eq!(job["state"], "succeeded", "{job:#}");
        let dispatched = history(job).iter().filter(|s| *s == "dispatched").count();
        assert_eq!(dispatched, 1, "dispatched {dispatched} times: {job:#}");
        assert_eq!(
            runs_of(runs.path(), id),
            1,
            "job {id} ran {} times",
            runs_of(runs.path(), id)
        );
        let creates = rayjob_creates(&gw, id);
        assert_eq!(creates, 1, "RayJob of {id} created {creates} times");
    }
    println!(
        "API server unreachable for {PARTITION:?}: 0 jobs failed, 0 RayJobs created twice; \
         the jobs that ended meanwhile were seen {caught_up:?} after it (resync {RESYNC:?})"
    );
}
