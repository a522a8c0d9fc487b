//! The job's side of preemption (issue 38 §2), end to end: a job's processes get
//! `FORGE_JOB_URL` and `FORGE_JOB_TOKEN` and acknowledge checkpoints with them
//! (`POST $FORGE_JOB_URL/checkpoints`); `GET /v1/jobs/{id}` shows the last one. The
//! token is good for its own job only and only while the job holds GPUs; a queued job
//! has nothing to acknowledge; steps never go back; a malformed body names its field;
//! `forge status` and the console show the last checkpoint.

use std::time::Duration;

use forge_gateway::jobs::job_access::TOKEN_PREFIX;
use forge_tests::cli::Forge;
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, zip_of};
use serde_json::{Value, json};

/// Acknowledges steps 10, 20, 20 again and 5 with the job's own URL and token, printing
/// each answer's status and body.
const ACKNOWLEDGING_PY: &str = r#"import json, os, urllib.error, urllib.request

def ack(step):
    req = urllib.request.Request(
        os.environ["FORGE_JOB_URL"] + "/checkpoints",
        data=json.dumps({"step": step}).encode(),
        method="POST",
        headers={"Authorization": "Bearer " + os.environ["FORGE_JOB_TOKEN"],
                 "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)

for step in (10, 20, 20, 5):
    status, body = ack(step)
    print("ack", step, status, json.dumps(body, sort_keys=True), flush=True)
"#;

fn spec(name: &str, entrypoint: &str) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": entrypoint,
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    })
}

/// `POST /v1/jobs/{id}/checkpoints` with `body` and, if any, `token` as the bearer.
async fn post(gw: &TestGateway, id: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut req = gw
        .http
        .post(format!("{}/v1/jobs/{id}/checkpoints", gw.url))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("checkpoint request");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn token_of(gw: &TestGateway, id: &str) -> String {
    gw.state
        .jobs
        .job_access()
        .expect("the dev gateway hands out job access")
        .token(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_acknowledges_checkpoints_with_its_own_token() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client: JobClient = gw.client(&gw.token);
    let id = client
        .submit_ok(
            &spec("ckpt", "python3 train.py"),
            zip_of(&[("train.py", ACKNOWLEDGING_PY)]),
        )
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(90))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{}", done[&id]);

    let (status, log) = client.logs(&id).await;
    assert_eq!(status, 200, "{log}");
    let line = |step: u32, code: u16| {
        log.lines()
            .find(|l| l.starts_with(&format!("ack {step} {code} ")))
            .unwrap_or_else(|| panic!("no `ack {step} {code}` in the job's log:\n{log}"))
            .to_string()
    };
    assert!(line(10, 201).contains(r#""step": 10"#));
    let first_20 = line(20, 201);
    // The same step again: the record kept (its time too), not a new one.
    let again = log
        .lines()
        .find(|l| l.starts_with("ack 20 200 "))
        .unwrap_or_else(|| panic!("no repeated ack of 20:\n{log}"));
    assert_eq!(
        first_20.trim_start_matches("ack 20 201 "),
        again.trim_start_matches("ack 20 200 ")
    );
    let stale = line(5, 409);
    assert!(
        stale.contains("checkpoint-stale") && stale.contains(r#""step": 20"#),
        "{stale}"
    );

    let job = client.job(&id).await;
    assert_eq!(job["lastCheckpoint"]["step"], 20, "{job:#}");
    assert!(
        job["lastCheckpoint"]["atMs"].as_i64().unwrap_or(0) > 0,
        "{job:#}"
    );
    let status = Forge::new(&gw).run(&["status", &id]).await.expect(0);
    assert!(
        status.stdout.contains("checkpoint step 20 at "),
        "{}",
        status.stdout
    );
    let page = gw.console_page(&format!("/console/jobs/{id}")).await;
    assert!(page.contains("Last checkpoint: step 20 <time"), "{page}");

    // The token died with the job.
    let token = token_of(&gw, &id);
    assert!(token.starts_with(TOKEN_PREFIX));
    let (status, body) = post(&gw, &id, Some(&token), r#"{"step": 30}"#).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (410, &json!("job-ended")),
        "{body}"
    );
    assert_eq!(client.job(&id).await["lastCheckpoint"]["step"], 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_token_is_good_for_its_running_job_only() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let sleeper = zip_of(&[("train.py", "import time\ntime.sleep(300)\n")]);
    let running = client
        .submit_ok(&spec("holds", "python3 train.py"), sleeper.clone())
        .await;
    client.wait_running(&running, Duration::from_secs(60)).await;
    let queued = client
        .submit_ok(&spec("waits", "python3 train.py"), sleeper)
        .await;
    assert_eq!(client.job(&queued).await["state"], "queued");
    let (run_token, queued_token) = (token_of(&gw, &running), token_of(&gw, &queued));

    // Not a job token: a team's token, none, a forged one.
    for token in [Some(gw.token.as_str()), None, Some("fjt.x.00")] {
        let (status, body) = post(&gw, &running, token, r#"{"step": 1}"#).await;
        assert_eq!(status, 401, "{token:?}: {body}");
        assert_eq!(body["error"]["code"], "unauthenticated");
    }
    // Another job's token.
    let (status, body) = post(&gw, &running, Some(&queued_token), r#"{"step": 1}"#).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (403, &json!("token-for-another-job")),
        "{body}"
    );
    // A queued job runs nothing that could have checkpointed.
    let (status, body) = post(&gw, &queued, Some(&queued_token), r#"{"step": 1}"#).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("job-not-running")),
        "{body}"
    );
    // Bodies that are not `{"step": N}`, each naming what is wrong.
    for bad in [
        r#"{"step": -1}"#,
        r#"{"step": "ten"}"#,
        r#"{"step": 1, "extra": true}"#,
        "{}",
        "not json",
        r#"{"step": 9223372036854775808}"#,
    ] {
        let (status, body) = post(&gw, &running, Some(&run_token), bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["code"], "invalid-checkpoint", "{bad}: {body}");
        assert!(
            body["error"]["details"]["field"].is_string(),
            "{bad}: {body}"
        );
    }
    assert!(client.job(&running).await["lastCheckpoint"].is_null());
    let (status, body) = post(&gw, &running, Some(&run_token), r#"{"step": 7}"#).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["step"], 7);
    assert_eq!(client.job(&running).await["lastCheckpoint"]["step"], 7);

    for id in [&queued, &running] {
        let (status, body) = client
            .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
            .await;
        assert_eq!(status, 200, "{body}");
    }
}
