//! Preemption when something fails or a limit says no (issue 38), end to end on the
//! dev gateway, with the fixtures of `preemption.rs`:
//!
//! - a stop that never reaches the victim's head (the pod proxy failing) still ends
//!   at its grace: the victim is released then, having had no SIGTERM;
//! - a release that cannot archive the attempt's logs keeps the RayJob (and the job
//!   in its notice) and is tried again until it can: nothing of the attempt is lost;
//! - a RayJob deleted during its job's notice (an operator's `kubectl delete`)
//!   releases the job then, as `rayjob-gone`, not at its grace's end;
//! - a policy failing on the plan fails closed: nobody is given notice, and the
//!   preemptor says why it waits (`preemption.policy-failed`);
//! - a job preempted `FORGE_PREEMPTION_MAX_IN_WINDOW` times in the window is left
//!   alone, and `FORGE_PREEMPTION_MAX_IN_WINDOW=0` turns preemption off.

use std::time::Duration;

use forge_kubesim::faults::{FailRule, Matching};
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, note_zip, short_spec, trainer_spec as spec, trainer_zip};
use forge_tests::policy::{ALICE, BOB, PolicyClient};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

/// Team-b's job holding the only machine: it exits on SIGTERM, its grace `grace` s.
async fn victim(bob: &JobClient, grace: u32) -> String {
    let id = bob
        .submit_ok(
            &spec("victim", 0, 1, "steps=1000000 on_term=exit", grace),
            trainer_zip(),
        )
        .await;
    bob.wait_log(&id, "attempt 0 starting from step 0").await;
    id
}

/// The reason of the transition that ended the job's first notice.
fn release_reason(job: &Value) -> String {
    job["history"]
        .as_array()
        .and_then(|h| h.iter().find(|e| e["from"] == "preempting"))
        .and_then(|e| e["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Whether the job's RayJob exists in the emulator.
async fn rayjob_exists(gw: &TestGateway, job: &Value) -> bool {
    let name = job["rayjobName"].as_str().expect("a RayJob name");
    let api: kube::Api<forge_gateway::cluster::RayJob> = kube::Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    api.get_opt(name).await.expect("get RayJob").is_some()
}

/// Fails every `ray job stop`: it goes through the API server's pod proxy to the
/// head.
fn no_stop_reaches_the_head(gw: &TestGateway) {
    gw.sim.faults().add_rule(FailRule {
        count: 1_000,
        code: 500,
        retry_after_seconds: None,
        matching: Matching::default()
            .path_contains("/proxy/api/jobs/")
            .verb("create"),
    });
}

/// The end of a test whose stop never reached the head: the preemptor runs to
/// success, the faults are cleared and the victim is cancelled.
async fn urgent_succeeds_then_victim_cancelled(
    gw: &TestGateway,
    (alice, urgent): (&JobClient, &str),
    (bob, victim): (&JobClient, &str),
) {
    let done = alice
        .wait_terminal(&[urgent.to_string()], Duration::from_secs(60))
        .await;
    assert_eq!(done[urgent]["state"], "succeeded", "{}", done[urgent]);
    gw.sim.faults().clear();
    let (s, _) = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{victim}"))
        .await;
    assert_eq!(s, 200);
}

/// Waits until the preemptor waits with `code` (`None`: any but a preemption's) and
/// the pass settled; the victim is then still running, with the `before` preemptions
/// it had.
async fn preemptor_waits(
    gw: &TestGateway,
    alice: &JobClient,
    bob: &JobClient,
    urgent: &str,
    victim: &str,
    code: Option<&str>,
    before: usize,
) {
    eventually(
        "the preemptor's standing",
        Duration::from_secs(20),
        || async {
            let j = alice.job(urgent).await;
            let got = j["queue"]["code"].as_str().unwrap_or_default().to_string();
            let ok = match code {
                Some(c) => got == c,
                None => !got.is_empty() && !got.starts_with("preemption"),
            };
            if ok && j["state"] == "queued" {
                Ok(())
            } else {
                Err(not_yet(j["queue"].clone()))
            }
        },
    )
    .await;
    gw.dispatcher_settled().await;
    let v = bob.job(victim).await;
    assert_eq!(v["state"], "running", "{v:#}");
    assert_eq!(
        v["preemptions"].as_array().map(Vec::len),
        Some(before),
        "no new notice: {v:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_that_never_reaches_the_head_still_ends_at_the_grace() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let victim = victim(&bob, 3).await;
    no_stop_reaches_the_head(&gw);
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    bob.wait_state(&victim, "preempting", Duration::from_secs(30))
        .await;
    let released = bob
        .wait_state(&victim, "queued", Duration::from_secs(30))
        .await;
    let p = &released["preemptions"][0];
    let held = p["releasedMs"].as_i64().unwrap_or(0) - p["atMs"].as_i64().unwrap_or(0);
    assert!(held >= 3_000, "released {held} ms after its notice: {p:#}");
    let reason = release_reason(&released);
    assert!(reason.contains("(grace-ended)"), "{reason}");
    assert_eq!(p["releasedBy"], "grace-ended", "{p:#}");
    let first = bob.attempt_log(&victim, 0).await;
    assert!(first.contains("attempt 0 starting"), "{first}");
    assert!(
        !first.contains("SIGTERM received"),
        "no stop reached it: {first}"
    );
    urgent_succeeds_then_victim_cancelled(&gw, (&alice, &urgent), (&bob, &victim)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_cannot_archive_the_logs_keeps_the_rayjob_and_retries() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let victim = victim(&bob, 2).await;
    // Archiving lists the job's pods: every such list fails.
    const FAILS: u32 = 100_000;
    gw.sim.faults().add_rule(FailRule {
        count: FAILS,
        code: 500,
        retry_after_seconds: None,
        matching: Matching::default()
            .path_contains("/pods")
            .verb("list")
            .query_contains("job-id"),
    });
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    let noticed = bob
        .wait_state(&victim, "preempting", Duration::from_secs(30))
        .await;
    let deadline = noticed["preemptions"][0]["atMs"].as_i64().unwrap_or(0)
        + noticed["preemptions"][0]["noticeMs"].as_i64().unwrap_or(0);
    eventually(
        "its grace over and a release tried",
        Duration::from_secs(30),
        || async {
            let left = gw.sim.faults().state().rules.first().map_or(0, |r| r.count);
            let now = forge_gateway::store::now_ms();
            if now > deadline + 1_000 && left < FAILS {
                Ok(())
            } else {
                Err(not_yet(
                    json!({"now": now, "deadline": deadline, "left": left}),
                ))
            }
        },
    )
    .await;
    let waiting = bob.job(&victim).await;
    assert_eq!(
        waiting["state"], "preempting",
        "not released without its logs: {waiting:#}"
    );
    assert!(
        rayjob_exists(&gw, &waiting).await,
        "its RayJob is kept for the retry"
    );
    let urgent_now = alice.job(&urgent).await;
    assert_eq!(
        urgent_now["queue"]["code"], "preemption.releasing",
        "{urgent_now:#}"
    );

    // The store answers again: the next try archives and releases it.
    gw.sim.faults().clear();
    let released = bob
        .wait_state(&victim, "queued", Duration::from_secs(30))
        .await;
    assert!(
        !rayjob_exists(&gw, &waiting).await,
        "deleted by the release"
    );
    let first = bob.attempt_log(&victim, 0).await;
    assert!(first.contains("attempt 0 starting from step 0"), "{first}");
    assert!(
        first.contains("SIGTERM received"),
        "its last lines kept: {first}"
    );
    assert!(
        released["preemptions"][0]["releasedMs"].as_i64() > Some(deadline),
        "{released:#}"
    );
    let done = alice
        .wait_terminal(std::slice::from_ref(&urgent), Duration::from_secs(60))
        .await;
    assert_eq!(done[&urgent]["state"], "succeeded", "{}", done[&urgent]);
    let (s, _) = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{victim}"))
        .await;
    assert_eq!(s, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rayjob_deleted_during_the_notice_releases_its_job_then() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    // A grace far longer than the test: only the RayJob's end can release it early.
    const GRACE_S: u32 = 600;
    let victim = victim(&bob, GRACE_S).await;
    // No stop reaches the head, so the victim does not exit on its own.
    no_stop_reaches_the_head(&gw);
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    let noticed = bob
        .wait_state(&victim, "preempting", Duration::from_secs(30))
        .await;
    assert!(rayjob_exists(&gw, &noticed).await, "{noticed:#}");
    // What an operator's `kubectl delete rayjob <name>` does.
    let name = noticed["rayjobName"].as_str().expect("a RayJob name");
    let api: kube::Api<forge_gateway::cluster::RayJob> = kube::Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    api.delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("delete the RayJob");
    let released = bob
        .wait_state(&victim, "queued", Duration::from_secs(60))
        .await;
    let p = &released["preemptions"][0];
    assert_eq!(p["releasedBy"], "rayjob-gone", "{p:#}");
    let reason = release_reason(&released);
    assert!(reason.contains("(rayjob-gone)"), "{reason}");
    let held = p["releasedMs"].as_i64().unwrap_or(0) - p["atMs"].as_i64().unwrap_or(0);
    assert!(
        held < i64::from(GRACE_S) * 1_000 / 10,
        "released {held} ms after its notice, long before its grace: {p:#}"
    );
    assert_eq!(released["attempt"], 1, "{released:#}");
    urgent_succeeds_then_victim_cancelled(&gw, (&alice, &urgent), (&bob, &victim)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_failing_on_the_plan_fails_closed() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let victim = victim(&bob, 3).await;
    let bob_policy = PolicyClient::new(&gw, BOB);
    bob_policy.guard_team("team-b", "trap").await;
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    preemptor_waits(
        &gw,
        &alice,
        &bob,
        &urgent,
        &victim,
        Some("preemption.policy-failed"),
        0,
    )
    .await;
    let reason = alice.job(&urgent).await["queue"]["reason"].to_string();
    assert!(reason.contains("policy failed"), "{reason}");
    for (c, id) in [(&alice, &urgent), (&bob, &victim)] {
        let (s, _) = c
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
        assert_eq!(s, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_preempted_its_limit_in_the_window_is_left_alone() {
    let gw =
        forge_tests::policy::gateway("h100=1x8", &[("FORGE_PREEMPTION_MAX_IN_WINDOW", "1")]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let victim = victim(&bob, 3).await;
    let first = alice.submit_ok(&short_spec("first", 50), note_zip()).await;
    let done = alice
        .wait_terminal(std::slice::from_ref(&first), Duration::from_secs(60))
        .await;
    assert_eq!(done[&first]["state"], "succeeded", "{}", done[&first]);
    // Its second attempt runs; a second preemptor finds it spent for the window.
    bob.wait_log(&victim, "attempt 1 starting").await;
    let second = alice.submit_ok(&short_spec("second", 50), note_zip()).await;
    preemptor_waits(&gw, &alice, &bob, &second, &victim, None, 1).await;
    let v = bob.job(&victim).await;
    assert_eq!(v["attempt"], 1, "{v:#}");
    for (c, id) in [(&alice, &second), (&bob, &victim)] {
        let (s, _) = c
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
        assert_eq!(s, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_window_zero_turns_preemption_off() {
    let gw =
        forge_tests::policy::gateway("h100=1x8", &[("FORGE_PREEMPTION_MAX_IN_WINDOW", "0")]).await;
    let (alice, bob) = (gw.client(ALICE), gw.client(BOB));
    let victim = victim(&bob, 3).await;
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    preemptor_waits(&gw, &alice, &bob, &urgent, &victim, None, 0).await;
    for (c, id) in [(&alice, &urgent), (&bob, &victim)] {
        let (s, _) = c
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
        assert_eq!(s, 200);
    }
}
