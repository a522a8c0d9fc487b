//! The dispatcher asks the policy again about a queued job only when something its
//! decision is made from changed (issue 19): the policy in force, the cluster view, or
//! its team's usage — and a job submitted later is not such a change for the jobs
//! ahead of it. Seen from the outside through the decision and quiet-pass counters:
//! idle passes over jobs held by the team quota ask nothing (they find nothing
//! changed and skip); the quota's holder ending re-asks them and lets exactly as many
//! run as the quota allows; a new policy version re-asks them too.

use std::time::Duration;

use forge_tests::cli::metric;
use forge_tests::jobs::{one_gpu_spec, zip_of};
use forge_tests::policy::{ALICE, PolicyClient, gateway};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

const ASKED: &str = r#"forge_admission_decisions_total{decision="queue",path="queue"}"#;
const QUIET: &str = "forge_dispatch_quiet_passes_total";
const WAITING: usize = 12;

async fn set_quota(admin: &PolicyClient, gpus: u32) {
    let links = admin
        .global_links_with(
            "team-quota",
            json!({"limits": {"team-a": {"*": gpus}}, "default": {"*": 16}}),
        )
        .await;
    let (s, v) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": admin.global_version().await, "plugins": links}),
        )
        .await;
    assert_eq!(s, 200, "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_job_is_asked_about_again_only_when_its_inputs_change() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    set_quota(&admin, 1).await;
    let alice = gw.client(ALICE);
    let sleeper = zip_of(&[("s.py", "import time\ntime.sleep(600)\n")]);
    let holder = alice
        .submit_ok(&one_gpu_spec("holder", "python3 s.py"), sleeper.clone())
        .await;
    alice.wait_running(&holder, Duration::from_secs(60)).await;
    let mut waiting = Vec::new();
    for i in 0..WAITING {
        waiting.push(
            alice
                .submit_ok(
                    &one_gpu_spec(&format!("w{i}"), "python3 s.py"),
                    sleeper.clone(),
                )
                .await,
        );
    }
    let standing = |v: &Value| v["queue"]["code"].as_str().unwrap_or_default().to_string();
    eventually(
        "every job held by the quota",
        Duration::from_secs(30),
        || async {
            for id in &waiting {
                let v = alice.job(id).await;
                if standing(&v) != "quota.exceeded" {
                    return Err(not_yet(v));
                }
            }
            Ok(())
        },
    )
    .await;

    // Passes run (every few seconds, and on every Node or Pod event) but nothing the
    // decisions were made from changed: the chain is not asked again. The cluster,
    // the store's jobs and the policy stay as they are, so the passes find that out
    // first and skip (the full pass every 30 s reuses every decision).
    let asked = metric(&gw.metrics().await, ASKED);
    let quiet = metric(&gw.metrics().await, QUIET);
    eventually(
        "two passes that found nothing changed",
        Duration::from_secs(30),
        || async {
            let now = metric(&gw.metrics().await, QUIET);
            if now >= quiet + 2.0 {
                Ok(())
            } else {
                Err(not_yet(now))
            }
        },
    )
    .await;
    assert_eq!(
        metric(&gw.metrics().await, ASKED),
        asked,
        "no queued job was asked about again"
    );

    // The holder ends: the team's usage changed, so every waiting job is asked again,
    // and the oldest one runs (the quota is one GPU).
    let (s, _) = alice
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{holder}"))
        .await;
    assert!(s < 300);
    let first = waiting[0].clone();
    eventually(
        "the oldest waiting job dispatched",
        Duration::from_secs(60),
        || async {
            let v = alice.job(&first).await;
            if v["state"] != "queued" {
                Ok(())
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    // The pass that dispatches it goes on asking the rest while the create runs, so
    // the oldest can be seen dispatched before the last of them is asked.
    eventually("the rest asked again", Duration::from_secs(30), || async {
        let after_change = metric(&gw.metrics().await, ASKED);
        if after_change >= asked + (WAITING - 1) as f64 {
            Ok(())
        } else {
            Err(not_yet(format!("{asked} -> {after_change}")))
        }
    })
    .await;
    let after_change = metric(&gw.metrics().await, ASKED);
    for id in &waiting[1..] {
        assert_eq!(alice.job(id).await["state"], "queued", "{id}");
    }

    // A new policy version: asked again, and two more run under a quota of three.
    set_quota(&admin, 3).await;
    eventually(
        "two more dispatched under the new quota",
        Duration::from_secs(60),
        || async {
            let mut out = 0;
            for id in &waiting[1..] {
                if alice.job(id).await["state"] != "queued" {
                    out += 1;
                }
            }
            if out == 2 { Ok(()) } else { Err(not_yet(out)) }
        },
    )
    .await;
    assert!(metric(&gw.metrics().await, ASKED) > after_change);
}
