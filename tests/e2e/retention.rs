//! Retention end to end (dev composition, emulator in process mode, local object
//! store), with every period at a few seconds and a sweep every second: a rejected
//! submission's record goes; an ended job stays but its logs answer 410
//! `logs-expired` and their objects go; the capsule of an ended job is deleted from
//! storage and its team can no longer name it; the capsule of a job still running is
//! kept however old, and goes once that job ends; the metrics count what went and
//! measure what is held.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use forge_tests::cli::metric;
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{one_gpu_spec, zip_of};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

/// Every retention period of the test (seconds).
const KEEP_S: u64 = 3;

async fn status_of(gw: &TestGateway, path: &str) -> (u16, Value) {
    let resp = gw.get(path).send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn capsule_file(gw: &TestGateway, digest: &str) -> PathBuf {
    gw.state
        .config
        .gateway
        .data_dir
        .join("objects")
        .join("capsules")
        .join(format!("{digest}.zip"))
}

async fn sweeps(gw: &TestGateway) -> f64 {
    metric(&gw.metrics().await, "forge_retention_sweeps_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_what_is_past_its_time_and_keeps_what_a_live_job_uses() {
    let keep = KEEP_S.to_string();
    let gw = TestGateway::start(
        "h100=1x8",
        &[
            ("FORGE_RETENTION_REJECTED_S", keep.as_str()),
            ("FORGE_RETENTION_LOGS_S", keep.as_str()),
            ("FORGE_RETENTION_CAPSULES_S", keep.as_str()),
            ("FORGE_RETENTION_SWEEP_S", "1"),
        ],
    )
    .await;
    let client = gw.client(&gw.token);

    // A rejected submission (unknown series).
    let unknown = json!({"name": "a100", "framework": "nemo-rl", "entrypoint": "python3 train.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8, "series": "a100"}]});
    let (status, body) = client
        .submit(&unknown, zip_of(&[("train.py", "print(1)")]))
        .await;
    assert_eq!(status, 403, "{body:#}");
    let rejected = body["error"]["details"]["jobId"]
        .as_str()
        .expect("rejected job id")
        .to_string();

    // A job that ends, with its logs archived.
    let ends = client
        .submit_ok(
            &one_gpu_spec("ends", "python3 train.py"),
            zip_of(&[("train.py", "print('hello from retention', flush=True)\n")]),
        )
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&ends), Duration::from_secs(120))
        .await;
    assert_eq!(done[&ends]["state"], "succeeded", "{:#}", done[&ends]);
    let ended_digest = done[&ends]["capsuleSha256"]
        .as_str()
        .expect("digest")
        .to_string();

    // A job that runs on (its own code, so its own capsule), submitted now.
    let runs = client
        .submit_ok(
            &one_gpu_spec("runs", "python3 train.py"),
            zip_of(&[("train.py", "import time\ntime.sleep(600)\n")]),
        )
        .await;
    let uploaded = Instant::now();
    let running_digest = client.job(&runs).await["capsuleSha256"]
        .as_str()
        .expect("digest")
        .to_string();

    // The rejected record goes; the ended job stays, its logs expire; its capsule goes.
    let (status, body) = eventually(
        "the ended job's logs to expire",
        Duration::from_secs(60),
        || async {
            let (status, body) = status_of(&gw, &format!("/v1/jobs/{ends}/logs")).await;
            if status == 410 {
                Ok((status, body))
            } else {
                Err(not_yet((status, body)))
            }
        },
    )
    .await;
    assert_eq!(body["error"]["code"], "logs-expired", "{status} {body:#}");
    assert!(
        body["error"]["details"]["deletedAtMs"].as_i64().is_some(),
        "{body:#}"
    );
    let (status, _) = status_of(&gw, &format!("/v1/jobs/{ends}/logs/pods")).await;
    assert_eq!(status, 410, "the pod list expires with the logs");
    assert_eq!(
        status_of(&gw, &format!("/v1/jobs/{ends}")).await.0,
        200,
        "the job stays"
    );
    let logs_dir = gw
        .state
        .config
        .gateway
        .data_dir
        .join("objects")
        .join("logs")
        .join(&ends);
    assert!(!logs_dir.exists(), "{} is still there", logs_dir.display());
    eventually(
        "the rejected record to go",
        Duration::from_secs(30),
        || async {
            match status_of(&gw, &format!("/v1/jobs/{rejected}")).await {
                (404, _) => Ok(()),
                other => Err(not_yet(other)),
            }
        },
    )
    .await;
    eventually(
        "the ended job's capsule to be deleted",
        Duration::from_secs(30),
        || async {
            if capsule_file(&gw, &ended_digest).exists() {
                Err(not_yet("still stored"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let (status, body) = status_of(&gw, &format!("/v1/team-capsules/{ended_digest}")).await;
    assert_eq!(status, 404, "{body:#}");
    assert_eq!(body["error"]["code"], "unknown-capsule", "{body:#}");
    let resubmit = gw
        .post_json(
            "/v1/jobs",
            &json!({"spec": one_gpu_spec("again", "python3 train.py"), "capsule": ended_digest}),
        )
        .send()
        .await
        .expect("submit by digest");
    assert_eq!(
        resubmit.status().as_u16(),
        422,
        "a forgotten capsule cannot be named"
    );

    // The running job's capsule is older than its period, and two more sweeps pass:
    // it is kept while the job has not ended.
    let keep_for = Duration::from_secs(KEEP_S + 1);
    if let Some(left) = keep_for.checked_sub(uploaded.elapsed()) {
        tokio::time::sleep(left).await;
    }
    let seen = sweeps(&gw).await;
    eventually("two more sweeps", Duration::from_secs(30), || async {
        let now = sweeps(&gw).await;
        if now >= seen + 2.0 {
            Ok(())
        } else {
            Err(not_yet(now))
        }
    })
    .await;
    let job = client.job(&runs).await;
    assert!(
        ["queued", "dispatched", "initializing", "running"]
            .contains(&job["state"].as_str().unwrap_or("")),
        "the long job must still be live for this check: {job:#}"
    );
    assert!(
        capsule_file(&gw, &running_digest).exists(),
        "a live job's capsule was deleted"
    );

    // Once it ends (cancelled), its capsule goes too.
    let (status, body) = client
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{runs}"))
        .await;
    assert!(status < 300, "cancel: {status} {body:#}");
    eventually(
        "the cancelled job's capsule to be deleted",
        Duration::from_secs(60),
        || async {
            if capsule_file(&gw, &running_digest).exists() {
                Err(not_yet("still stored"))
            } else {
                Ok(())
            }
        },
    )
    .await;

    let text = gw.metrics().await;
    for kind in ["rejected-jobs", "job-logs", "capsule-owners", "capsules"] {
        let n = metric(
            &text,
            &format!("forge_retention_deleted_total{{kind=\"{kind}\"}}"),
        );
        assert!(n >= 1.0, "{kind}: {n}\n{text}");
    }
    assert!(
        text.contains("forge_storage_bytes{kind=\"capsules\"}")
            && text.contains("forge_storage_bytes{kind=\"logs\"}"),
        "{text}"
    );
}
