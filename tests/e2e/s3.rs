//! The closed loop with real object storage (issue 6): the gateway (dev composition
//! with `FORGE_S3_*` set) + the emulator in process mode + a real S3-compatible server
//! (s3s-fs, served in-process on 127.0.0.1). The capsule is stored in S3 and the Ray pods fetch it by presigned URL —
//! the test server speaks plain HTTP, which Ray's `working_dir` does not fetch, so the
//! gateway uses its HTTP-only path: an init container downloads the presigned URL,
//! verifies the SHA-256 and `working_dir` is the `file://` path. Logs are archived to
//! S3 beside the capsule; the RayJob is deleted; a failing job ends `failed` with its
//! log.

use std::time::Duration;

use forge_testkit::s3::S3Server;
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, one_gpu_spec, rayjobs, wait_no_rayjobs, zip_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_run_from_s3_by_presigned_url_and_their_logs_are_archived_there() {
    let s3 = S3Server::start();
    let gw = TestGateway::start(
        "h100=1x8",
        &[
            ("FORGE_S3_ENDPOINT", s3.endpoint.as_str()),
            ("FORGE_S3_BUCKET", s3.bucket.as_str()),
            ("FORGE_S3_ACCESS_KEY", s3.access_key.as_str()),
            ("FORGE_S3_SECRET_KEY", s3.secret_key.as_str()),
        ],
    )
    .await;
    assert!(
        gw.state.local_objects.is_none(),
        "the gateway uses S3, not its local store"
    );
    let client = JobClient::new(&gw.url, &gw.token);
    let api = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );

    let ok = client
        .submit_ok(
            &one_gpu_spec("from-s3", "python3 job.py"),
            zip_of(&[("job.py", "print('hello from s3', flush=True)\n")]),
        )
        .await;
    // The RayJob's pods fetch the code by presigned URL from the S3 server (in the
    // init container) and Ray gets the verified local copy.
    let name = format!("forge-{ok}");
    let mut rayjob = serde_json::Value::Null;
    for _ in 0..200 {
        if let Ok(Some(rj)) = api.get_opt(&name).await {
            rayjob = serde_json::to_value(&rj).expect("json");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let runtime_env = rayjob["spec"]["runtimeEnvYAML"]
        .as_str()
        .unwrap_or_default();
    let runtime_env = forge_capsule::runtime_env::parse(runtime_env).expect("runtime env");
    assert!(
        runtime_env.working_dir.starts_with("file://"),
        "{runtime_env:?}"
    );
    let init =
        rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["initContainers"]
            .to_string();
    assert!(
        init.contains(&s3.endpoint) && init.contains("X-Amz-Signature"),
        "the init container does not fetch a presigned S3 URL: {init}"
    );

    let failing = client
        .submit_ok(
            &one_gpu_spec("fails", "python3 job.py"),
            zip_of(&[(
                "job.py",
                "print('about to fail', flush=True)\nraise SystemExit(1)\n",
            )]),
        )
        .await;
    let done = client
        .wait_terminal(&[ok.clone(), failing.clone()], Duration::from_secs(180))
        .await;
    assert_eq!(done[&ok]["state"], "succeeded", "{:#}", done[&ok]);
    assert_eq!(done[&failing]["state"], "failed", "{:#}", done[&failing]);
    wait_no_rayjobs(&api, Duration::from_secs(60)).await;

    // Logs come back from S3 after the RayJobs are gone, and are stored there.
    let (status, text) = client.logs(&ok).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("hello from s3"), "{text}");
    let (status, text) = client.logs(&failing).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("about to fail"), "{text}");
    let bucket = s3.root.path().join(&s3.bucket);
    for id in [&ok, &failing] {
        // Every pod's log, and their list naming the driver's.
        let logs = bucket.join("logs").join(id);
        let index: serde_json::Value = serde_json::from_slice(
            &std::fs::read(logs.join("pods.json")).expect("the pod log list in the bucket"),
        )
        .expect("json");
        let driver = index["driver"].as_str().expect("the driver's pod");
        assert!(
            logs.join("pods")
                .join(driver)
                .join("ray-job-submitter.log")
                .exists(),
            "driver log of {id} not in the bucket: {index:#}"
        );
    }
    let capsule = done[&ok]["capsuleSha256"].as_str().expect("capsule");
    assert!(
        bucket
            .join("capsules")
            .join(format!("{capsule}.zip"))
            .exists(),
        "capsule not in the bucket"
    );
}
