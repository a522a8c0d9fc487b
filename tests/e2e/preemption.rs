//! Priority and checkpoint-aware preemption (issue 38), end to end on the dev gateway:
//! real processes follow the job's contract (`tests/fixtures/jobs/preemptible_train.py`:
//! SIGTERM as `ray job stop` delivers it, `POST $FORGE_JOB_URL/checkpoints`,
//! `FORGE_RESUME_STEP`), the emulated head's dashboard stops them, and the gateway
//! plans, notices, releases and resumes.
//!
//! - of three candidates, the one with the freshest checkpoint is preempted; it
//!   checkpoints on SIGTERM, goes back to the queue, resumes from its step and
//!   succeeds; its first attempt's log stays readable (`forge logs --attempt 0`), and
//!   `GET /v1/jobs/{id}`, `forge status`, the console (its timeline links each
//!   attempt's log) and the metrics show it;
//! - a gang that ignores its notice is killed whole at the end of its grace, never
//!   split, and restarts from step 0 (it never acknowledged a checkpoint); late
//!   events of its first attempt's RayJob (STOPPED while it is queued again, deleted
//!   while its second attempt runs) change nothing;
//! - equal priorities never preempt each other, a team's veto is honoured, and the
//!   preemptor then holds the freed GPUs against an older job of the queue;
//! - a job that checkpointed on its last notice is costed at the seconds that took,
//!   so it goes before a job with a fresher checkpoint whose answer is not known.

use std::time::{Duration, Instant};

use forge_tests::cli::{Forge, metric};
use forge_tests::jobs::{note_zip, short_spec, trainer_spec as spec, trainer_zip};
use forge_tests::policy::{ALICE, BOB, PolicyClient};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

/// When `job` first entered `state` (its history), Unix ms.
fn entered(job: &Value, state: &str) -> i64 {
    job["history"]
        .as_array()
        .and_then(|h| h.iter().find(|e| e["to"] == state))
        .and_then(|e| e["atMs"].as_i64())
        .unwrap_or_else(|| panic!("never {state}: {job:#}"))
}

/// Prints how long each step of a preemption took, from the two jobs' histories.
fn print_timeline(victim: &Value, preemptor: &Value) {
    let submitted = entered(preemptor, "queued");
    let notice = entered(victim, "preempting");
    let released = victim["preemptions"][0]["releasedMs"].as_i64().unwrap_or(0);
    let running = entered(preemptor, "running");
    let resumed = victim["history"]
        .as_array()
        .and_then(|h| h.iter().filter(|e| e["to"] == "running").nth(1))
        .and_then(|e| e["atMs"].as_i64())
        .unwrap_or(0);
    println!(
        "preemption timeline: preemptor submitted → victim noticed {} ms → released {} ms → \
         preemptor running {} ms after its submission; victim running again {} ms after its release",
        notice - submitted,
        released - notice,
        running - submitted,
        resumed - released
    );
}

/// The emulator's RayJobs, as a test sees them.
struct RayJobs {
    typed: kube::Api<forge_gateway::cluster::RayJob>,
    client: kube::Client,
    namespace: String,
}

impl RayJobs {
    fn of(gw: &forge_tests::gateway::TestGateway) -> Self {
        let client = gw.sim.client().expect("client");
        let namespace = gw.state.config.k8s.namespace.clone();
        Self {
            typed: kube::Api::namespaced(client.clone(), &namespace),
            client,
            namespace,
        }
    }

    /// The RayJob `job` (as the API shows it) runs on.
    async fn get(&self, job: &Value) -> forge_gateway::cluster::RayJob {
        let name = job["rayjobName"].as_str().expect("a RayJob name");
        self.typed.get(name).await.expect("the job's RayJob")
    }

    /// Creates `old` again (suspended: nothing of it runs) after its deletion, and
    /// reports it `Complete`/`STOPPED`, as a late watch event of it would. Returns its
    /// name.
    async fn stale_copy(&self, mut old: forge_gateway::cluster::RayJob) -> String {
        let name = old.metadata.name.clone().expect("a name");
        old.metadata = kube::api::ObjectMeta {
            name: Some(name.clone()),
            labels: old.metadata.labels.take(),
            annotations: old.metadata.annotations.take(),
            ..Default::default()
        };
        old.status = None;
        let mut body = serde_json::to_value(&old).expect("a RayJob");
        body["spec"]["suspend"] = json!(true);
        eventually("the old RayJob gone", Duration::from_secs(30), || async {
            match self.typed.get_opt(&name).await {
                Ok(None) => Ok(()),
                other => Err(not_yet(other.map(|o| o.is_some()))),
            }
        })
        .await;
        let resource = kube::discovery::ApiResource::erase::<forge_gateway::cluster::RayJob>(&());
        let dynamic: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(self.client.clone(), &self.namespace, &resource);
        let body: kube::api::DynamicObject = serde_json::from_value(body).expect("an object");
        dynamic
            .create(&Default::default(), &body)
            .await
            .expect("create the stale RayJob");
        let status = json!({"status": {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}});
        self.typed
            .patch_status(
                &name,
                &Default::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
            .expect("report it stopped");
        name
    }

    /// Deletes the RayJob `name` (gone already is fine: the operator may have).
    async fn delete(&self, name: &str) {
        match self.typed.delete(name, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("delete the stale RayJob: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_freshest_checkpoint_is_preempted_and_resumes_from_its_step() {
    // Each team's quota is 16 GPUs: team-b's two jobs and team-a's one fill the three
    // machines, and team-a's preemptor is within its quota.
    let gw = forge_tests::policy::gateway("h100=3x8", &[]).await;
    let client = gw.client(&gw.token);
    let bob = gw.client(BOB);
    let code = trainer_zip();
    // Three priority-0 jobs: one checkpointed once at its start, one checkpoints all
    // the time, one never does.
    let stale = bob
        .submit_ok(
            &spec("stale", 0, 1, "steps=1000000 ack_at=2 on_term=exit", 10),
            code.clone(),
        )
        .await;
    let fresh = client
        .submit_ok(
            &spec(
                "fresh",
                0,
                1,
                "steps=600 step_s=0.02 ack_every=5 on_term=ack",
                10,
            ),
            code.clone(),
        )
        .await;
    let never = bob
        .submit_ok(&spec("never", 0, 1, "steps=1000000 on_term=exit", 10), code)
        .await;
    for id in [&stale, &fresh, &never] {
        client.wait_log(id, "attempt 0 starting from step 0").await;
    }
    // The stale checkpoint and the never-checkpointing run get a few seconds old, so
    // the planner's costs differ by whole seconds.
    eventually(
        "the stale checkpoint 3 s old",
        Duration::from_secs(30),
        || async {
            let j = client.job(&stale).await;
            let at = j["lastCheckpoint"]["atMs"].as_i64().unwrap_or(i64::MAX);
            let age = forge_gateway::store::now_ms() - at;
            if age >= 3000 {
                Ok(())
            } else {
                Err(not_yet(j["lastCheckpoint"].clone()))
            }
        },
    )
    .await;

    let urgent = client
        .submit_ok(&short_spec("urgent", 50), note_zip())
        .await;
    let noticed = client
        .wait_state(&fresh, "preempting", Duration::from_secs(30))
        .await;
    assert!(
        noticed["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&urgent),
        "{noticed:#}"
    );
    let done = client
        .wait_terminal(std::slice::from_ref(&urgent), Duration::from_secs(90))
        .await;
    assert_eq!(done[&urgent]["state"], "succeeded", "{}", done[&urgent]);
    for id in [&stale, &never] {
        let j = client.job(id).await;
        assert_eq!(
            j["state"], "running",
            "only the freshest checkpoint goes: {j:#}"
        );
        assert_eq!(j["preemptions"], json!([]), "{j:#}");
    }

    // The victim resumes from the step it acknowledged on SIGTERM and succeeds.
    let done = client
        .wait_terminal(std::slice::from_ref(&fresh), Duration::from_secs(120))
        .await;
    let job = &done[&fresh];
    assert_eq!(job["state"], "succeeded", "{job:#}");
    let job = client.job(&fresh).await;
    let p = &job["preemptions"][0];
    assert_eq!(
        job["preemptions"].as_array().map(Vec::len),
        Some(1),
        "{job:#}"
    );
    assert_eq!(p["byJob"], urgent.as_str(), "{job:#}");
    let step = p["checkpointStep"]
        .as_u64()
        .expect("the step it resumes from");
    assert!(step >= 5, "{job:#}");
    assert_eq!(p["noticeMs"], 10_000);
    let lost = p["lostGpuSeconds"]
        .as_f64()
        .expect("measured at the release");
    assert!(
        (0.0..80.0).contains(&lost),
        "checkpointed on the notice: little is lost, not the grace ({lost}) {job:#}"
    );
    assert!(p["releasedMs"].as_i64() >= p["atMs"].as_i64(), "{job:#}");
    assert_eq!(job["attempt"], 1);
    assert_eq!(job["attempts"].as_array().map(Vec::len), Some(2), "{job:#}");
    let first = client.attempt_log(&fresh, 0).await;
    assert!(first.contains("attempt 0 starting from step 0"), "{first}");
    // The console's timeline marks where each attempt's log begins, linked to it.
    let page = gw.console_page(&format!("/console/jobs/{fresh}")).await;
    let link = format!("/console/jobs/{fresh}/log?attempt=0");
    assert!(page.contains(&format!(r#"<a href="{link}">"#)), "{page}");
    assert!(
        page.contains(r##"<a href="#log"><path class="mark log""##),
        "{page}"
    );
    let archived = gw.console_page(&link).await;
    assert!(
        archived.contains("attempt 0 starting from step 0"),
        "{archived}"
    );
    // Released when it acknowledged a checkpoint after the notice — its regular one,
    // or the one it makes on SIGTERM — or when it exited on the signal.
    let release = job["history"]
        .as_array()
        .and_then(|h| h.iter().find(|e| e["from"] == "preempting"))
        .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default();
    assert!(
        release.contains("(checkpointed)") || release.contains("(exited)"),
        "{release}"
    );
    // The record names the same cause as the history's reason.
    let how = p["releasedBy"].as_str().expect("released by something");
    assert!(release.contains(&format!("({how})")), "{how}: {release}");
    if first.contains("SIGTERM received") {
        assert!(
            first.contains(&format!("checkpointed step {step} on SIGTERM")),
            "{first}"
        );
    }
    let (status, second) = client.logs(&fresh).await;
    assert_eq!(status, 200);
    assert!(
        second.contains(&format!("attempt 1 starting from step {step}")),
        "{second}"
    );
    assert!(second.contains("done at step 600"), "{second}");
    let too_far = gw
        .get(&format!("/v1/jobs/{fresh}/logs?attempt=2"))
        .send()
        .await
        .expect("logs");
    assert_eq!(too_far.status(), 404);
    let ended = gw
        .get(&format!("/v1/jobs/{fresh}/logs?attempt=0&follow=true"))
        .send()
        .await
        .expect("logs");
    assert_eq!(ended.status(), 400, "an ended attempt is not followed");
    let body: Value = ended.json().await.expect("json");
    assert_eq!(body["error"]["details"]["field"], "follow", "{body:#}");

    // Everyone who looks sees it.
    let status = Forge::new(&gw).run(&["status", &fresh]).await.expect(0);
    assert!(status.stdout.contains("preemptions:"), "{}", status.stdout);
    assert!(status.stdout.contains(&urgent), "{}", status.stdout);
    let cli_log = Forge::new(&gw)
        .run(&["logs", &fresh, "--attempt", "0"])
        .await
        .expect(0);
    assert!(
        cli_log.stdout.contains("attempt 0 starting from step 0"),
        "{}",
        cli_log.stdout
    );
    assert_eq!(
        metric(
            &gw.metrics().await,
            "forge_preemptions_total{series=\"h100\",reason=\"priority\"}"
        ),
        1.0
    );
    assert!(
        metric(
            &gw.metrics().await,
            "forge_preemption_lost_gpu_seconds_total"
        ) > 0.0
    );
    print_timeline(&job, &client.job(&urgent).await);

    for id in [&stale, &never] {
        let (s, _) = bob
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
        assert_eq!(s, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_ignoring_its_notice_is_killed_whole_at_its_grace_and_restarts_from_zero() {
    // team-b's gang holds both machines (its quota); team-a's preemptor needs one.
    let gw = forge_tests::policy::gateway("h100=2x8", &[]).await;
    let client = gw.client(&gw.token);
    let bob = gw.client(BOB);
    let gang = bob
        .submit_ok(
            &spec("gang", 0, 2, "steps=1000000 step_s=0.05 on_term=ignore", 3),
            trainer_zip(),
        )
        .await;
    client
        .wait_log(&gang, "attempt 0 starting from step 0")
        .await;
    let urgent = client
        .submit_ok(&short_spec("urgent", 60), note_zip())
        .await;
    let noticed_at = Instant::now();
    let noticed = client
        .wait_state(&gang, "preempting", Duration::from_secs(30))
        .await;
    let rayjobs = RayJobs::of(&gw);
    let first_rayjob = rayjobs.get(&noticed).await;
    let released = client
        .wait_state(&gang, "queued", Duration::from_secs(30))
        .await;
    let held = noticed_at.elapsed();
    // The ended attempt's RayJob reports STOPPED late (a watch event behind its
    // release): that is no news for the job, which stays queued.
    let stale = rayjobs.stale_copy(first_rayjob).await;
    assert!(
        held >= Duration::from_secs(3),
        "released before its grace ended ({held:?}): {:#}",
        released["history"]
    );
    let p = released["preemptions"][0].clone();
    assert_eq!(p["gpus"], 16, "the whole gang is freed: {p:#}");
    assert_eq!(p["checkpointStep"], Value::Null, "{p:#}");
    let lost = p["lostGpuSeconds"].as_f64().unwrap_or(0.0);
    assert!(
        lost >= 16.0 * 3.0,
        "nothing saved: its whole run and the grace are lost ({lost})"
    );

    // While the preemptor runs on one machine, the gang waits: never half of it.
    let done = client
        .wait_terminal(std::slice::from_ref(&urgent), Duration::from_secs(60))
        .await;
    assert_eq!(done[&urgent]["state"], "succeeded", "{}", done[&urgent]);
    let first = client.attempt_log(&gang, 0).await;
    assert!(first.contains("ignoring SIGTERM"), "{first}");
    // The gang runs again, whole, from step 0.
    client.wait_running(&gang, Duration::from_secs(60)).await;
    // The first attempt's RayJob deleted now: the job runs on another one.
    rayjobs.delete(&stale).await;
    eventually(
        "the second attempt's first line",
        Duration::from_secs(30),
        || async {
            let (_, log) = client.logs(&gang).await;
            if log.contains("attempt 1 starting from step 0") {
                Ok(())
            } else {
                Err(not_yet(log))
            }
        },
    )
    .await;
    let job = client.job(&gang).await;
    assert_eq!(job["attempt"], 1, "{job:#}");
    assert!(
        job["rayjobName"]
            .as_str()
            .unwrap_or_default()
            .ends_with("-1"),
        "each attempt has a RayJob of its own: {job:#}"
    );
    let (s, body) = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{gang}"))
        .await;
    assert_eq!(s, 200, "cancelling the running gang: {body}");
    let ended = client
        .wait_terminal(std::slice::from_ref(&gang), Duration::from_secs(30))
        .await;
    assert_eq!(
        ended[&gang]["state"], "cancelled",
        "only its cancel ended it: {:#}",
        ended[&gang]["history"]
    );
    // One NetworkPolicy served both attempts; it goes with the last RayJob.
    let policies: kube::Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        kube::Api::namespaced(
            gw.sim.client().expect("client"),
            &gw.state.config.k8s.namespace,
        );
    eventually(
        "the job's NetworkPolicy deleted",
        Duration::from_secs(30),
        || async {
            let names: Vec<String> = policies
                .list(&Default::default())
                .await
                .map(|l| {
                    l.items
                        .into_iter()
                        .filter_map(|p| p.metadata.name)
                        .collect()
                })
                .unwrap_or_default();
            if names.iter().any(|n| n.contains(gang.as_str())) {
                Err(not_yet(names))
            } else {
                Ok(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_priorities_never_preempt_and_a_teams_veto_is_honoured() {
    let gw = forge_tests::policy::gateway("h100=1x8", &[]).await;
    let alice = gw.client(ALICE);
    let bob = gw.client(BOB);
    let bobs = bob
        .submit_ok(
            &spec("bobs", 0, 1, "steps=1000000 on_term=exit", 5),
            trainer_zip(),
        )
        .await;
    bob.wait_running(&bobs, Duration::from_secs(60)).await;

    // An equal priority waits for room, however long.
    let same = alice.submit_ok(&short_spec("same", 0), note_zip()).await;
    gw.dispatcher_settled().await;
    let j = alice.job(&same).await;
    assert_eq!(j["state"], "queued", "{j:#}");
    let code = j["queue"]["code"].as_str().unwrap_or_default().to_string();
    assert!(!code.starts_with("preemption"), "{j:#}");

    // team-b protects its jobs with its own plugin: a higher priority waits too.
    let bob_policy = PolicyClient::new(&gw, BOB);
    bob_policy.guard_team("team-b", "veto").await;
    let urgent = alice.submit_ok(&short_spec("urgent", 50), note_zip()).await;
    eventually(
        "the veto as the preemptor's standing",
        Duration::from_secs(20),
        || async {
            let j = alice.job(&urgent).await;
            if j["queue"]["code"] == "hostile.veto" {
                Ok(())
            } else {
                Err(not_yet(j["queue"].clone()))
            }
        },
    )
    .await;
    gw.dispatcher_settled().await;
    let b = bob.job(&bobs).await;
    assert_eq!(b["state"], "running", "{b:#}");
    assert_eq!(b["preemptions"], json!([]), "{b:#}");

    // The veto lifted, the preemption goes ahead; the freed GPUs are held for the
    // preemptor, not given to the older equal-priority job ahead of it.
    let lift = json!({"expectedVersion": 1, "plugins": []});
    let (s, body) = bob_policy.put_policy(Some("team-b"), &lift).await;
    assert_eq!(s, 200, "{body:#}");
    let done = alice
        .wait_terminal(std::slice::from_ref(&urgent), Duration::from_secs(60))
        .await;
    assert_eq!(done[&urgent]["state"], "succeeded", "{}", done[&urgent]);
    let b = bob.job(&bobs).await;
    assert_eq!(b["preemptions"][0]["byJob"], urgent.as_str(), "{b:#}");
    let same_job = alice.job(&same).await;
    let history = forge_tests::jobs::history(&same_job);
    let urgent_job = alice.job(&urgent).await;
    let dispatched_at = |j: &Value| {
        j["history"]
            .as_array()
            .and_then(|h| h.iter().find(|e| e["to"] == "dispatched"))
            .and_then(|e| e["atMs"].as_i64())
    };
    if let Some(same_at) = dispatched_at(&same_job) {
        assert!(
            dispatched_at(&urgent_job).is_some_and(|u| u <= same_at),
            "the older job took the freed GPUs first: {history:?}"
        );
    }
    for id in [&same] {
        let _ = alice
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
    }
    let _ = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{bobs}"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_checkpointed_on_its_last_notice_is_the_cheaper_victim_next_time() {
    let gw = forge_tests::policy::gateway("h100=2x8", &[]).await;
    let alice = gw.client(ALICE);
    let bob = gw.client(BOB);
    // `saver` acknowledges one checkpoint at its start, and one on SIGTERM; a resumed
    // run acknowledges none until it is told to stop again.
    let saver = alice
        .submit_ok(
            &spec("saver", 0, 1, "steps=1000000 ack_at=2 on_term=ack", 30),
            trainer_zip(),
        )
        .await;
    // A priority above the preemptor's holds the other machine: `saver` is the only
    // candidate of the first preemption.
    let blocker = bob
        .submit_ok(
            &spec("blocker", 60, 1, "steps=1000000 on_term=exit", 5),
            trainer_zip(),
        )
        .await;
    alice
        .wait_log(&saver, "attempt 0 starting from step 0")
        .await;
    bob.wait_running(&blocker, Duration::from_secs(60)).await;
    let first = alice.submit_ok(&short_spec("first", 50), note_zip()).await;
    alice
        .wait_state(&saver, "preempting", Duration::from_secs(30))
        .await;
    alice.wait_log(&saver, "attempt 1 starting from step").await;
    let done = alice
        .wait_terminal(std::slice::from_ref(&first), Duration::from_secs(60))
        .await;
    assert_eq!(done[&first]["state"], "succeeded", "{}", done[&first]);
    let j = alice.job(&saver).await;
    let p = &j["preemptions"][0];
    let after_ms = p["releasedMs"].as_i64().unwrap_or(i64::MAX) - p["atMs"].as_i64().unwrap_or(0);
    let lost = p["lostGpuSeconds"].as_f64().unwrap_or(f64::MAX);
    assert!(
        lost <= 8.0 * after_ms as f64 / 1000.0 + 1e-3,
        "it saved its work on the notice: {j:#}"
    );

    // The blocker goes; `fresh` checkpoints every tenth of a second. Costed as the
    // worst case, `saver` (no checkpoint since it resumed) would cost more than it;
    // costed as its last notice went, it costs only the seconds that notice took.
    let (s, _) = bob
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{blocker}"))
        .await;
    assert_eq!(s, 200);
    let fresh = bob
        .submit_ok(
            &spec(
                "fresh",
                0,
                1,
                "steps=1000000 step_s=0.02 ack_every=5 on_term=ack",
                30,
            ),
            trainer_zip(),
        )
        .await;
    bob.wait_running(&fresh, Duration::from_secs(60)).await;
    // Both are candidates, `fresh` with a checkpoint and `saver` running for 3 s
    // since it resumed, so their worst-case costs differ by whole seconds.
    eventually("both candidates", Duration::from_secs(30), || async {
        let (f, s) = (bob.job(&fresh).await, alice.job(&saver).await);
        let resumed = s["history"]
            .as_array()
            .and_then(|h| h.iter().rev().find(|e| e["to"] == "running"))
            .and_then(|e| e["atMs"].as_i64())
            .unwrap_or(i64::MAX);
        let since = forge_gateway::store::now_ms() - resumed;
        if f["lastCheckpoint"]["atMs"].is_i64() && s["state"] == "running" && since >= 3000 {
            Ok(())
        } else {
            Err(not_yet(json!([f["lastCheckpoint"], s["state"], since])))
        }
    })
    .await;
    let second = alice.submit_ok(&short_spec("second", 50), note_zip()).await;
    let noticed = alice
        .wait_state(&saver, "preempting", Duration::from_secs(30))
        .await;
    assert!(
        noticed["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&second),
        "{noticed:#}"
    );
    let f = bob.job(&fresh).await;
    assert_eq!(f["state"], "running", "{f:#}");
    assert_eq!(f["preemptions"], json!([]), "{f:#}");
    let done = alice
        .wait_terminal(std::slice::from_ref(&second), Duration::from_secs(60))
        .await;
    assert_eq!(done[&second]["state"], "succeeded", "{}", done[&second]);
    for (client, id) in [(&alice, &saver), (&bob, &fresh)] {
        let _ = client
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
    }
}
