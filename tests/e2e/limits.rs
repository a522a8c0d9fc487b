//! Per-team submission limits (issue 14), through the real app: a team over its
//! submission rate gets 429 `rate-limited` with `Retry-After` while another team is
//! still served, and nothing of the refused submission is stored; a team at its queue
//! cap gets 429 `queue-full` while its running and queued jobs stay as they were.

use std::time::Duration;

use forge_tests::jobs::{JobClient, one_gpu_spec, submission_form, zip_of};
use forge_tests::policy::{self, ALICE, BOB};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

fn code() -> Vec<u8> {
    zip_of(&[("job.py", "import time\ntime.sleep(600)\n")])
}

/// Submits and returns the status, `Retry-After` and JSON body.
async fn submit_raw(client: &JobClient, spec: &Value) -> (u16, Option<u64>, Value) {
    let resp = client
        .http
        .post(format!("{}/v1/jobs", client.url))
        .bearer_auth(&client.token)
        .multipart(submission_form(spec, code()))
        .send()
        .await
        .expect("submit");
    let status = resp.status().as_u16();
    let retry = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (status, retry, resp.json().await.expect("JSON"))
}

/// Ids of the caller's team's jobs.
async fn team_jobs(client: &JobClient) -> Vec<String> {
    let (status, body) = client
        .call(reqwest::Method::GET, "/v1/jobs?limit=100")
        .await;
    assert_eq!(status, 200, "{body:#}");
    body["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|j| j["id"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_over_its_submission_rate_waits_and_others_are_served() {
    let gw = policy::gateway("h100=4x8", &[("FORGE_SUBMISSIONS_PER_MINUTE", "3")]).await;
    let alice = gw.client(ALICE);
    let bob = gw.client(BOB);
    for i in 0..3 {
        let (status, _, body) =
            submit_raw(&alice, &one_gpu_spec(&format!("a-{i}"), "python3 job.py")).await;
        assert_eq!(status, 202, "within the burst: {body:#}");
    }
    let (status, retry, body) = submit_raw(&alice, &one_gpu_spec("a-over", "python3 job.py")).await;
    assert_eq!(status, 429, "{body:#}");
    assert_eq!(body["error"]["code"], "rate-limited", "{body:#}");
    assert_eq!(body["error"]["details"]["perMinute"], 3);
    // Three a minute: the next one in at most 20 s.
    let retry = retry.expect("Retry-After");
    assert!((1..=20).contains(&retry), "Retry-After: {retry}");
    assert_eq!(body["error"]["details"]["retryAfterSeconds"], json!(retry));
    assert_eq!(
        team_jobs(&alice).await.len(),
        3,
        "the refused submission is not stored"
    );
    let (status, _, body) = submit_raw(&bob, &one_gpu_spec("b-0", "python3 job.py")).await;
    assert_eq!(status, 202, "another team has its own rate: {body:#}");
    let (_, metrics) = alice.call(reqwest::Method::GET, "/metrics").await;
    assert!(
        metrics
            .as_str()
            .is_some_and(|m| m.contains("forge_submissions_limited_total{limit=\"rate\"} 1")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_at_its_queue_cap_is_refused_and_keeps_its_jobs() {
    let gw = policy::gateway("h100=1x8", &[("FORGE_MAX_QUEUED_PER_TEAM", "2")]).await;
    let alice = gw.client(ALICE);
    let bob = gw.client(BOB);
    let whole_node = |name: &str| {
        let mut s = one_gpu_spec(name, "python3 job.py");
        s["pools"][0]["gpusPerNode"] = json!(8);
        s
    };
    // The first takes the only node; the next two wait for it.
    let (status, _, first) = submit_raw(&alice, &whole_node("running")).await;
    assert_eq!(status, 202, "{first:#}");
    let first = first["id"].as_str().expect("id").to_owned();
    eventually(
        "the first job to hold the node",
        Duration::from_secs(30),
        || async {
            let j = alice.job(&first).await;
            if j["state"] == "queued" {
                Err(not_yet(j))
            } else {
                Ok(())
            }
        },
    )
    .await;
    for name in ["waits-1", "waits-2"] {
        let (status, _, body) = submit_raw(&alice, &whole_node(name)).await;
        assert_eq!(status, 202, "{body:#}");
        assert_eq!(body["state"], "queued", "{body:#}");
    }
    let (status, retry, body) = submit_raw(&alice, &whole_node("one-too-many")).await;
    assert_eq!(status, 429, "{body:#}");
    assert_eq!(body["error"]["code"], "queue-full", "{body:#}");
    assert_eq!(
        (
            &body["error"]["details"]["queued"],
            &body["error"]["details"]["limit"]
        ),
        (&json!(2), &json!(2))
    );
    assert_eq!(retry, Some(30));
    let mine = team_jobs(&alice).await;
    assert_eq!(
        mine.len(),
        3,
        "nothing stored for the refused one, nothing dropped: {mine:?}"
    );
    // The cap is per team: team-b queues behind team-a's running job.
    let (status, _, body) = submit_raw(&bob, &whole_node("b-waits")).await;
    assert_eq!(status, 202, "{body:#}");
}
