//! `forge submit` of a ≥ 200 MiB tree whose chunked upload is interrupted (the client
//! killed with SIGKILL mid-upload) and resumed by running the same command again:
//! only the missing ranges are sent — every byte crosses once, as the gateway's
//! metrics count — and the stored capsule has the digest the gateway's own packer
//! gives for that tree and spec.

use std::time::Duration;

use forge_capsule::{CapsuleLimits, CodeSource, assemble};
use forge_tests::cli::{Forge, metric};
use forge_tests::gateway::TestGateway;
use forge_tests::trees::BigJob;
use forge_tests::wait::{eventually, not_yet};
use serde_json::Value;

/// Files of pseudo-random (incompressible) bytes.
const FILES: usize = 4;
const FILE_MIB: usize = 52;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_upload_of_a_large_tree_resumes_and_completes() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let forge = Forge::new(&gw);
    let work = tempfile::tempdir().expect("tmp");
    let big = BigJob::write(work.path(), FILES, FILE_MIB);
    let owned = big.submit_args(2);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();

    // First run: killed once a few chunks have arrived.
    let mut child = forge.command(&args, false).spawn().expect("spawn");
    eventually(
        "a few chunks uploaded",
        Duration::from_secs(300),
        || async {
            let got = metric(&gw.metrics().await, "forge_upload_bytes_total");
            if got >= f64::from(6u32 << 20) {
                Ok(())
            } else {
                Err(not_yet(got))
            }
        },
    )
    .await;
    child.start_kill().expect("kill");
    let _ = child.wait().await;
    let text = gw.metrics().await;
    let after_kill = metric(&text, "forge_upload_bytes_total");
    assert_eq!(
        metric(&text, r#"forge_upload_sessions_total{outcome="completed"}"#),
        0.0,
        "the upload finished before it could be interrupted; make the tree larger"
    );

    // Second run: resumes, sends only what is missing, completes, submits.
    let run = forge
        .run(&[&args[..], &["-o", "json"]].concat())
        .await
        .expect(0);
    assert!(run.stderr.contains("resuming upload"), "{}", run.stderr);
    let job = run.json();
    let digest = job["capsuleSha256"]
        .as_str()
        .expect("capsule digest")
        .to_string();
    let text = gw.metrics().await;
    let total = metric(&text, "forge_upload_bytes_total");
    assert!(after_kill < total, "{after_kill} then {total}");
    assert_eq!(
        metric(&text, r#"forge_upload_sessions_total{outcome="resumed"}"#),
        1.0
    );
    assert_eq!(
        metric(&text, r#"forge_upload_sessions_total{outcome="completed"}"#),
        1.0
    );

    // The digest the gateway's packer gives for the same tree and spec bytes.
    let review: Value = gw
        .http
        .post(format!("{}/v1/admission/review", gw.url))
        .bearer_auth(&gw.token)
        .header("content-type", "application/yaml")
        .body(std::fs::read(&big.spec).expect("spec"))
        .send()
        .await
        .expect("review")
        .json()
        .await
        .expect("json");
    let capsule_spec = review["capsuleSpec"]
        .as_str()
        .expect("capsuleSpec")
        .to_string();
    let out = work.path().join("expected");
    let expected = tokio::task::spawn_blocking(move || {
        assemble(
            CodeSource::Dir(big.code),
            capsule_spec.as_bytes(),
            None,
            &CapsuleLimits::default(),
            &out,
        )
    })
    .await
    .expect("task")
    .expect("assemble");
    assert_eq!(digest, expected.digest);
    assert!(
        expected.size >= 200 << 20,
        "a ≥ 200 MiB capsule: {}",
        expected.size
    );
    #[allow(clippy::cast_precision_loss)]
    let size = expected.size as f64;
    assert_eq!(
        total, size,
        "every byte was uploaded exactly once across both runs"
    );
}
