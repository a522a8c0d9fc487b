//! Job submission end to end over real HTTP: the gateway (dev composition: emulator in
//! process mode, local capsule store, compiled reference chain, dispatcher and
//! lifecycle controllers) admits, queues, rejects, dispatches RayJobs of the documented
//! shape, runs them to the end and cleans up; tenancy and the error contract.

use sha2::Digest;
use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{self, zip_of};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::{Value, json};

/// Token of a `team-b` member (its SHA-256 is in the tokens file written below).
const TEAM_B_TOKEN: &str = "team-b-member-token";
/// Token of a `team-a` member (not an admin: the dev token is team-a's admin).
const TEAM_A_MEMBER_TOKEN: &str = "team-a-member-token";

fn spec(name: &str, entrypoint: &str, pools: Value) -> Value {
    json!({"name": name, "framework": "nemo-rl", "entrypoint": entrypoint, "pools": pools})
}

/// 16 GPUs as two single-node pools (within the dev quota, allowed on RWO storage):
/// on an `h100=1x8` cluster it never fits and waits with `capacity.no-room`.
fn sixteen_gpus(name: &str) -> Value {
    spec(
        name,
        "python3 train.py",
        json!([
            {"name": "a", "nodes": 1, "gpusPerNode": 8},
            {"name": "b", "nodes": 1, "gpusPerNode": 8}
        ]),
    )
}

fn train_zip() -> Vec<u8> {
    zip_of(&[(
        "train.py",
        "print('hello from forge', flush=True)\nfor i in range(3):\n    print(f'step {i}', flush=True)\n",
    )])
}

async fn gateway(nodes: &str, extra: &[(&str, &str)]) -> TestGateway {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n  - team: team-b\n    role: member\n    token_sha256: {}\n  - team: team-a\n    role: member\n    token_sha256: {}\n",
            forge_gateway::auth::hash_token(TEAM_B_TOKEN),
            forge_gateway::auth::hash_token(TEAM_A_MEMBER_TOKEN),
        ),
    )
    .expect("tokens file");
    let tokens = tokens.display().to_string();
    let mut env = vec![("FORGE_TOKENS_FILE", tokens.as_str())];
    env.extend_from_slice(extra);
    TestGateway::start(nodes, &env).await
}

fn rayjobs(gw: &TestGateway) -> Api<DynamicObject> {
    jobs::rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    )
}

async fn submit(gw: &TestGateway, token: &str, spec: &Value, code: Vec<u8>) -> (u16, Value) {
    let resp = gw.submit(token, spec, code).send().await.expect("submit");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON body"))
}

async fn job(gw: &TestGateway, id: &str) -> Value {
    gw.get(&format!("/v1/jobs/{id}"))
        .send()
        .await
        .expect("get job")
        .json()
        .await
        .expect("job JSON")
}

/// Poll until the job is in `state` (or panic with its last view), as the dev token.
async fn wait_state(gw: &TestGateway, id: &str, state: &str, within: Duration) -> Value {
    gw.client(&gw.token).wait_state(id, state, within).await
}

/// POST a multipart submission over a raw socket and read the answer even when the
/// server answers (413) before reading the whole body and closes the connection.
async fn raw_multipart(gw: &TestGateway, spec: &Value, code: &[u8]) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let boundary = "forge-test-boundary";
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"spec\"\r\nContent-Type: application/json\r\n\r\n{spec}\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"code\"; filename=\"code.zip\"\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(code);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let addr = gw.url.trim_start_matches("http://");
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        gw.token,
        body.len()
    );
    sock.write_all(head.as_bytes()).await.expect("write head");
    // The server may stop reading early; a failed write is expected then.
    let _ = sock.write_all(&body).await;
    let mut answer = Vec::new();
    let _ = sock.read_to_end(&mut answer).await;
    let text = String::from_utf8_lossy(&answer).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

async fn rayjob_count(gw: &TestGateway) -> usize {
    rayjobs(gw)
        .list(&ListParams::default())
        .await
        .expect("list rayjobs")
        .items
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_job_runs_to_success_with_logs_and_cleanup() {
    let gw = gateway("h100=2x8,h200=2x8", &[]).await;
    let s = spec(
        "hello",
        "python3 train.py",
        json!([{"name": "train", "nodes": 2, "gpusPerNode": 8}]),
    );
    let mut s_shared = s.clone();
    s_shared["labels"] = json!({"purpose": "test"});
    let (status, body) = submit(&gw, &gw.token, &s, train_zip()).await;
    assert_eq!(status, 202, "{body:#}");
    assert_eq!(body["state"], "queued");
    assert_eq!(body["admission"]["decision"]["kind"], "admit");
    assert_eq!(body["admission"]["trace"].as_array().map(Vec::len), Some(3));
    let id = body["id"].as_str().expect("id").to_string();
    let digest = body["capsuleSha256"].as_str().expect("digest").to_string();

    // The RayJob appears with the documented shape.
    let name = format!("forge-{id}");
    let api = rayjobs(&gw);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let rj = loop {
        if let Some(rj) = api.get_opt(&name).await.expect("get rayjob") {
            break rj;
        }
        assert!(tokio::time::Instant::now() < deadline, "no RayJob {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let labels = rj.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["app.kubernetes.io/managed-by"], "forge-gateway");
    assert_eq!(labels["forge.dev/job-id"], id);
    assert_eq!(labels["forge.dev/team"], "team-a");
    let spec = &rj.data["spec"];
    assert_eq!(spec["shutdownAfterJobFinishes"], true);
    let head = &spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"];
    assert_eq!(head["nodeSelector"]["starforge/gpu-series"], "h100");
    let limit = &head["containers"][0]["resources"]["limits"]["nvidia.com/gpu"];
    assert!(*limit == json!("8") || *limit == json!(8), "{limit}");
    let workers = spec["rayClusterSpec"]["workerGroupSpecs"]
        .as_array()
        .expect("worker groups");
    assert_eq!(workers.len(), 1);
    assert_eq!(workers[0]["replicas"], 1, "primary pool: nodes - 1 workers");
    assert_eq!(workers[0]["minReplicas"], workers[0]["maxReplicas"]);
    // Plain-HTTP local store → init container verifying the SHA-256, file:// working dir.
    let runtime_env = spec["runtimeEnvYAML"].as_str().expect("runtimeEnvYAML");
    assert!(
        runtime_env.contains(&format!("file:///forge/capsule/{digest}.zip")),
        "{runtime_env}"
    );
    let init = &head["initContainers"][0];
    assert_eq!(init["name"], "forge-capsule-fetch");

    // It runs to the end; logs are archived; the RayJob is deleted; capacity is back.
    let done = wait_state(&gw, &id, "succeeded", Duration::from_secs(60)).await;
    let states: Vec<&str> = done["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|h| h["to"].as_str())
        .collect();
    assert_eq!(
        states,
        [
            "queued",
            "dispatched",
            "initializing",
            "running",
            "succeeded"
        ],
        "{done:#}"
    );
    let logs = gw
        .get(&format!("/v1/jobs/{id}/logs"))
        .send()
        .await
        .expect("logs");
    assert_eq!(logs.status(), 200);
    let text = logs.text().await.expect("log text");
    assert!(
        text.contains("hello from forge") && text.contains("step 2"),
        "{text}"
    );
    jobs::wait_no_rayjobs(&rayjobs(&gw), Duration::from_secs(20)).await;
    // Pods go with the RayJob through the garbage collector; give a loaded machine time.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let cap: Value = gw
            .get("/v1/capacity")
            .send()
            .await
            .expect("capacity")
            .json()
            .await
            .expect("json");
        if cap["series"][0]["free"] == 16 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "GPUs not returned: {cap:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The same code and spec again: the capsule is deduplicated (same digest).
    let (status, again) = submit(&gw, &gw.token, &s, train_zip()).await;
    assert_eq!(status, 202);
    assert_eq!(again["capsuleSha256"], digest.as_str());
    // And a JSON submission naming the stored capsule is accepted.
    let resp = gw
        .post_json("/v1/jobs", &json!({"spec": s_shared, "capsule": digest}))
        .send()
        .await
        .expect("json submit");
    assert_eq!(resp.status(), 202);
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(r#"forge_capsule_uploads_total{outcome="deduplicated"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"forge_job_transitions_total{state="succeeded"} 1"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_entrypoint_ends_failed_with_its_logs() {
    let gw = gateway("h100=1x8", &[]).await;
    let code = zip_of(&[(
        "fail.py",
        "print('about to fail', flush=True)\nraise SystemExit(3)\n",
    )]);
    let s = spec(
        "fails",
        "python3 fail.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let (status, body) = submit(&gw, &gw.token, &s, code).await;
    assert_eq!(status, 202, "{body:#}");
    let id = body["id"].as_str().expect("id");
    let done = wait_state(&gw, id, "failed", Duration::from_secs(60)).await;
    assert!(
        done["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("kuberay.AppFailed")),
        "{done:#}"
    );
    let text = gw
        .get(&format!("/v1/jobs/{id}/logs"))
        .send()
        .await
        .expect("logs")
        .text()
        .await
        .expect("text");
    assert!(text.contains("about to fail"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejections_are_403_with_a_reason_and_create_nothing() {
    let gw = gateway("h100=2x8", &[("FORGE_K8S_STORAGE_SHARED", "false")]).await;
    // Multi-node on ReadWriteOnce storage.
    let multi = spec(
        "multi",
        "python3 train.py",
        json!([{"name": "train", "nodes": 2, "gpusPerNode": 8}]),
    );
    // Unknown series.
    let unknown = spec(
        "a100",
        "python3 train.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8, "series": "a100"}]),
    );
    let (status, body) = submit(&gw, &gw.token, &unknown, train_zip()).await;
    assert_eq!(status, 403, "{body:#}");
    assert_eq!(body["error"]["code"], "policy-rejected");
    assert!(
        body["error"]["details"]["reason"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
    assert_eq!(body["error"]["details"]["plugin"], "pool-series");
    let rejected_id = body["error"]["details"]["jobId"].as_str().expect("job id");
    let audit = job(&gw, rejected_id).await;
    assert_eq!(audit["state"], "rejected");
    assert_eq!(audit["capsuleSha256"], Value::Null, "no capsule stored");

    let review: Value = gw
        .post_json("/v1/admission/review", &multi)
        .send()
        .await
        .expect("review")
        .json()
        .await
        .expect("json");
    assert_eq!(review["decision"]["kind"], "reject", "{review:#}");
    assert_eq!(
        review["decision"]["code"], "storage.rwo-multi-node",
        "{review:#}"
    );
    let (status, body) = submit(&gw, &gw.token, &multi, train_zip()).await;
    assert_eq!(status, 403, "{body:#}");
    assert_eq!(body["error"]["details"]["plugin"], "rwo-guard");
    assert_eq!(body["error"]["details"]["reason"], "storage.rwo-multi-node");
    gw.dispatcher_settled().await;
    assert_eq!(rayjob_count(&gw).await, 0);
    let objects = gw.state.config.gateway.data_dir.join("objects/capsules");
    let stored = std::fs::read_dir(&objects).map(|d| d.count()).unwrap_or(0);
    assert_eq!(stored, 0, "a rejected job stores no capsule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_quota_waits_then_runs_when_gpus_are_freed() {
    let gw = gateway("h100=4x8", &[]).await;
    let long = zip_of(&[(
        "long.py",
        "import time\nprint('holding', flush=True)\ntime.sleep(120)\n",
    )]);
    let big = spec(
        "big",
        "python3 long.py",
        json!([{"name": "train", "nodes": 2, "gpusPerNode": 8}]),
    );
    // The dev chain's quota is 16 GPUs per team; rwo-guard rejects multi-node on RWO
    // storage, so run the 16-GPU job as two single-node pools.
    let big = {
        let mut b = big;
        b["pools"] = json!([
            {"name": "a", "nodes": 1, "gpusPerNode": 8},
            {"name": "b", "nodes": 1, "gpusPerNode": 8}
        ]);
        b
    };
    let (status, first) = submit(&gw, &gw.token, &big, long).await;
    assert_eq!(status, 202, "{first:#}");
    let first_id = first["id"].as_str().expect("id").to_string();
    wait_state(&gw, &first_id, "running", Duration::from_secs(60)).await;

    let small = spec(
        "small",
        "python3 train.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let (status, second) = submit(&gw, &gw.token, &small, train_zip()).await;
    assert_eq!(status, 202, "{second:#}");
    assert_eq!(second["admission"]["decision"]["kind"], "queue");
    assert_eq!(second["admission"]["decision"]["code"], "quota.exceeded");
    let second_id = second["id"].as_str().expect("id").to_string();
    gw.dispatcher_settled().await;
    let waiting = job(&gw, &second_id).await;
    assert_eq!(waiting["state"], "queued", "{waiting:#}");
    assert_eq!(waiting["queue"]["code"], "quota.exceeded");
    assert_eq!(waiting["queue"]["position"], 1);
    assert_eq!(rayjob_count(&gw).await, 1);

    // Cancelling the running job frees its GPUs: the queued one is dispatched and runs.
    let resp = gw
        .delete(&format!("/v1/jobs/{first_id}"))
        .send()
        .await
        .expect("cancel");
    assert_eq!(resp.status(), 200);
    let cancelled: Value = resp.json().await.expect("json");
    assert_eq!(cancelled["state"], "cancelled");
    wait_state(&gw, &second_id, "succeeded", Duration::from_secs(60)).await;
    // Cancelling a finished job is a conflict.
    let again = gw
        .delete(&format!("/v1/jobs/{first_id}"))
        .send()
        .await
        .expect("cancel again");
    assert_eq!(again.status(), 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gang_admission_waits_for_all_gpus_and_cancel_leaves_the_queue() {
    let gw = gateway("h100=1x8", &[]).await;
    let long = zip_of(&[("long.py", "import time\ntime.sleep(120)\n")]);
    let one = spec(
        "one",
        "python3 long.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let (_, first) = submit(&gw, &gw.token, &one, long.clone()).await;
    let first_id = first["id"].as_str().expect("id").to_string();
    wait_state(&gw, &first_id, "running", Duration::from_secs(60)).await;

    // team-b's job fits its quota but not the cluster: queued, no RayJob, no partial pods.
    let (status, second) = submit(&gw, TEAM_B_TOKEN, &one, long).await;
    assert_eq!(status, 202, "{second:#}");
    let second_id = second["id"].as_str().expect("id").to_string();
    gw.dispatcher_settled().await;
    let view: Value = gw
        .http
        .get(format!("{}/v1/jobs/{second_id}", gw.url))
        .bearer_auth(TEAM_B_TOKEN)
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(view["state"], "queued", "{view:#}");
    assert!(
        [
            "capacity.no-room",
            "capacity.insufficient",
            "series.no-capacity"
        ]
        .iter()
        .any(|c| view["queue"]["code"] == *c)
            || view["queue"]["code"]
                .as_str()
                .is_some_and(|c| c.contains("capacity")),
        "{view:#}"
    );
    assert_eq!(rayjob_count(&gw).await, 1);

    // Tenancy: team-b cannot see or cancel team-a's job; it sees only its own.
    for req in [
        gw.http.get(format!("{}/v1/jobs/{first_id}", gw.url)),
        gw.http.delete(format!("{}/v1/jobs/{first_id}", gw.url)),
    ] {
        let resp = req.bearer_auth(TEAM_B_TOKEN).send().await.expect("req");
        assert_eq!(resp.status(), 404);
    }
    let mine: Value = gw
        .http
        .get(format!("{}/v1/jobs", gw.url))
        .bearer_auth(TEAM_B_TOKEN)
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    let ids: Vec<&str> = mine["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert_eq!(ids, [second_id.as_str()]);
    // Admins see both; pagination and the state filter work.
    let page: Value = gw
        .get("/v1/jobs?limit=1")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(page["jobs"].as_array().map(Vec::len), Some(1));
    let cursor = page["next"].as_str().expect("next cursor");
    let rest: Value = gw
        .get(&format!("/v1/jobs?limit=5&cursor={cursor}"))
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(rest["jobs"][0]["id"], first_id.as_str());
    let running: Value = gw
        .get("/v1/jobs?state=running")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(running["jobs"].as_array().map(Vec::len), Some(1));

    // Cancel while queued: it leaves the queue and never gets a RayJob.
    let resp = gw
        .http
        .delete(format!("{}/v1/jobs/{second_id}", gw.url))
        .bearer_auth(TEAM_B_TOKEN)
        .send()
        .await
        .expect("cancel");
    assert_eq!(resp.status(), 200);
    let resp = gw
        .delete(&format!("/v1/jobs/{first_id}"))
        .send()
        .await
        .expect("cancel running");
    assert_eq!(resp.status(), 200);
    jobs::wait_no_rayjobs(&rayjobs(&gw), Duration::from_secs(20)).await;
    assert_eq!(job(&gw, &second_id).await["state"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_submissions_get_clear_errors_and_store_nothing() {
    let gw = gateway("h100=1x8", &[("FORGE_MAX_BODY_MIB", "1")]).await;
    // Invalid spec: every problem, each with its field.
    let bad = json!({"name": "Bad Name!", "framework": "nope", "entrypoint": "", "pools": []});
    let (status, body) = submit(&gw, &gw.token, &bad, train_zip()).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid-spec");
    let fields: Vec<&str> = body["error"]["details"]["fields"]
        .as_array()
        .expect("fields")
        .iter()
        .filter_map(|f| f["field"].as_str())
        .collect();
    for f in ["name", "framework", "entrypoint", "pools"] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    // Path traversal in the archive.
    let ok = spec(
        "ok",
        "python3 train.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let (status, body) = submit(&gw, &gw.token, &ok, zip_of(&[("../escape.py", "x")])).await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"]["code"], "capsule.unsafe_path");
    assert_eq!(body["error"]["details"]["field"], "code");
    // Missing code part.
    let resp = gw
        .http
        .post(format!("{}/v1/jobs", gw.url))
        .bearer_auth(&gw.token)
        .multipart(reqwest::multipart::Form::new().text("spec", ok.to_string()))
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.expect("json");
    assert_eq!(body["error"]["details"]["field"], "code");
    // Unknown capsule.
    let resp = gw
        .post_json("/v1/jobs", &json!({"spec": ok, "capsule": "0".repeat(64)}))
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 422);
    // Oversize upload.
    // Incompressible-ish: hex of a hash chain (~2:1 under deflate), 4 MiB → ~2 MiB zip.
    let mut big = String::with_capacity(4 << 20);
    let mut h = [0u8; 32];
    while big.len() < 4 << 20 {
        h = sha2::Sha256::digest(h).into();
        big.push_str(&hex::encode(h));
    }
    let (status, body) = raw_multipart(&gw, &ok, &zip_of(&[("big.txt", &big)])).await;
    assert_eq!(status, 413, "{body}");
    // Nothing was stored or created.
    let list: Value = gw
        .get("/v1/jobs")
        .send()
        .await
        .expect("list")
        .json()
        .await
        .expect("json");
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(0), "{list:#}");
    assert_eq!(rayjob_count(&gw).await, 0);
    // The API is described.
    let doc: Value = gw
        .get("/v1/openapi.json")
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("json");
    assert!(doc["paths"]["/v1/jobs"]["post"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_image_is_diagnosed_then_times_out_at_the_pre_running_deadline() {
    let image = "registry.invalid/forge/ray:missing";
    let gw = TestGateway::start_with(
        "h100=1x8",
        &[
            ("FORGE_IMAGE_NEMO_RL", image),
            ("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", "8"),
        ],
        &[image],
    )
    .await;
    let s = spec(
        "noimage",
        "python3 train.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let (status, body) = submit(&gw, &gw.token, &s, train_zip()).await;
    assert_eq!(status, 202, "{body:#}");
    let id = body["id"].as_str().expect("id").to_string();

    // While it starts, the job says why it is stuck, from Kubernetes' own words.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let pending = loop {
        let j = job(&gw, &id).await;
        let code = j["pending"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if code == "ErrImagePull" || code == "ImagePullBackOff" {
            break j["pending"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no image-pull diagnosis: {j:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        pending["message"]
            .as_str()
            .is_some_and(|m| m.contains(image)),
        "{pending:#}"
    );
    assert!(
        pending["object"]
            .as_str()
            .is_some_and(|o| o.starts_with("Pod/"))
    );
    let events: Value = gw
        .get(&format!("/v1/jobs/{id}/events"))
        .send()
        .await
        .expect("events")
        .json()
        .await
        .expect("json");
    let pulls: Vec<&Value> = events["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("ErrImagePull"))
        })
        .collect();
    assert!(!pulls.is_empty(), "{events:#}");
    assert!(
        pulls
            .iter()
            .all(|e| e["type"] == "Warning" && e["kind"] == "Pod")
    );

    // Never Running: timed out at the pre-running deadline, cleaned up.
    let done = wait_state(&gw, &id, "timed-out", Duration::from_secs(60)).await;
    assert!(
        done["reason"]
            .as_str()
            .is_some_and(|r| r.contains("PreRunningDeadlineExceeded")),
        "{done:#}"
    );
    jobs::wait_no_rayjobs(&rayjobs(&gw), Duration::from_secs(20)).await;
    // Its objects are gone; their events were archived with its logs, for the
    // post-mortem.
    let (status, after) = gw
        .client(&gw.token)
        .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/events"))
        .await;
    assert_eq!(status, 200, "{after:#}");
    assert!(
        after["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["message"]
                .as_str()
                .is_some_and(|m| m.contains("ErrImagePull")))),
        "the archived events lost the pull failure: {after:#}"
    );
}

/// Poll until the queued job shows the queue reason `code`.
async fn wait_queue_code(gw: &TestGateway, id: &str, code: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let j = job(gw, id).await;
        if j["state"] == "queued" && j["queue"]["code"] == code {
            return j;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job {id} not queued with {code}: {j:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Files directly in `dir` (0 when it does not exist).
fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_jobs_that_never_ran_are_404_logs_not_archived() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = gw.client(&gw.token);
    // Queued for good (16 GPUs on an 8-GPU cluster): no RayJob, no pod, no log.
    let queued = admin.submit_ok(&sixteen_gpus("waits"), train_zip()).await;
    let before = wait_queue_code(&gw, &queued, "capacity.no-room").await;
    // Rejected at admission: an audit record that never ran.
    let unknown = spec(
        "a100",
        "python3 train.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8, "series": "a100"}]),
    );
    let (status, body) = admin.submit(&unknown, train_zip()).await;
    assert_eq!(status, 403, "{body:#}");
    let rejected = body["error"]["details"]["jobId"]
        .as_str()
        .expect("rejected job id")
        .to_string();

    for (id, query, name) in [
        (&queued, "", "driver"),
        (&queued, "?name=head", "head"),
        (&rejected, "", "driver"),
        (&rejected, "?name=head", "head"),
    ] {
        let (status, body) = admin
            .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs{query}"))
            .await;
        assert_eq!(status, 404, "{id}{query}: {body:#}");
        assert_eq!(body["error"]["code"], "logs-not-archived", "{body:#}");
        assert_eq!(body["error"]["details"]["field"], "name", "{body:#}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(
            message.contains(&format!("no {name} log for job {id}")),
            "{message}"
        );
    }
    // Asking changed nothing: still queued at the same place, no RayJob created.
    let after = job(&gw, &queued).await;
    assert_eq!(after["state"], "queued", "{after:#}");
    assert_eq!(after["history"], before["history"]);
    assert_eq!(after["queue"]["position"], before["queue"]["position"]);
    assert_eq!(job(&gw, &rejected).await["state"], "rejected");
    assert_eq!(rayjob_count(&gw).await, 0);

    // Cancelled before it ever ran: still nothing to serve.
    let (status, cancelled) = admin
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{queued}"))
        .await;
    assert_eq!(status, 200, "{cancelled:#}");
    assert_eq!(cancelled["state"], "cancelled");
    let (status, body) = admin
        .call(reqwest::Method::GET, &format!("/v1/jobs/{queued}/logs"))
        .await;
    assert_eq!(status, 404, "{body:#}");
    assert_eq!(body["error"]["code"], "logs-not-archived", "{body:#}");

    // Distinct from a job that does not exist and from a log that has no name.
    let missing = "0".repeat(queued.len());
    let (status, body) = admin
        .call(reqwest::Method::GET, &format!("/v1/jobs/{missing}/logs"))
        .await;
    assert_eq!(status, 404, "{body:#}");
    assert_eq!(body["error"]["code"], "not-found", "{body:#}");
    let (status, body) = admin
        .call(
            reqwest::Method::GET,
            &format!("/v1/jobs/{rejected}/logs?name=stdout"),
        )
        .await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"]["code"], "invalid-query", "{body:#}");
    assert_eq!(body["error"]["details"]["field"], "name", "{body:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_multipart_part_is_400_and_creates_nothing() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = gw.client(&gw.token);
    let data = &gw.state.config.gateway.data_dir;
    let s = sixteen_gpus("extra");
    let listed = admin.list_ids().await;
    assert!(listed.is_empty(), "{listed:?}");

    // An extra part after a complete submission (the code is already spooled), and a
    // misspelled `spec` part before anything else.
    let extra_last = jobs::submission_form(&s, train_zip()).text("requirements", "numpy==2.0\n");
    let misspelled_first = reqwest::multipart::Form::new()
        .text("specs", s.to_string())
        .part(
            "code",
            reqwest::multipart::Part::bytes(train_zip()).file_name("code.zip"),
        );
    for (part, form) in [("requirements", extra_last), ("specs", misspelled_first)] {
        let (status, body) = admin.submit_form(form).await;
        assert_eq!(status, 400, "{part}: {body:#}");
        assert_eq!(body["error"]["code"], "unknown-part", "{body:#}");
        assert_eq!(body["error"]["details"]["field"], "body", "{body:#}");
        let message = body["error"]["message"].as_str().expect("message");
        assert!(message.contains(&format!("`{part}`")), "{message}");
    }

    // Nothing was created or kept: no job, no capsule, no spooled upload, no RayJob.
    assert_eq!(admin.list_ids().await, listed);
    assert_eq!(entries(&data.join("objects/capsules")), 0);
    assert_eq!(
        entries(&data.join("spool")),
        0,
        "spooled upload left behind"
    );
    assert_eq!(rayjob_count(&gw).await, 0);

    // The same submission without the extra part is accepted and listed: the checks
    // above do see a created job.
    let id = admin.submit_ok(&s, train_zip()).await;
    let mut expected = listed.clone();
    expected.insert(id);
    assert_eq!(admin.list_ids().await, expected);
    assert_eq!(entries(&data.join("objects/capsules")), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_job_is_404_to_a_member_and_left_alone() {
    let gw = gateway("h100=1x8", &[]).await;
    let team_a = gw.client(TEAM_A_MEMBER_TOKEN);
    let team_b = gw.client(TEAM_B_TOKEN);
    // team-b's job, running: a cancel that got through would delete its RayJob.
    let long = zip_of(&[(
        "long.py",
        "import time\nprint('holding', flush=True)\ntime.sleep(120)\n",
    )]);
    let one = spec(
        "bees",
        "python3 long.py",
        json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]),
    );
    let id = team_b.submit_ok(&one, long).await;
    wait_state(&gw, &id, "running", Duration::from_secs(60)).await;
    let before = team_b.job(&id).await;
    let rayjob = format!("forge-{id}");
    assert!(
        rayjobs(&gw)
            .get_opt(&rayjob)
            .await
            .expect("get rayjob")
            .is_some()
    );

    // Team isolation answers exactly as for a job that does not exist (404
    // `not-found`), so a member cannot even learn that the id is taken.
    let missing = "0".repeat(id.len());
    for (method, path) in [
        (reqwest::Method::GET, "".to_string()),
        (reqwest::Method::DELETE, "".to_string()),
        (reqwest::Method::GET, "/logs".to_string()),
        (reqwest::Method::GET, "/logs?name=head".to_string()),
        (reqwest::Method::GET, "/events".to_string()),
    ] {
        let (status, body) = team_a
            .call(method.clone(), &format!("/v1/jobs/{id}{path}"))
            .await;
        assert_eq!(status, 404, "{method} {path}: {body:#}");
        assert_eq!(body["error"]["code"], "not-found", "{body:#}");
        assert_eq!(body["error"]["message"], format!("job {id} not found"));
        let (status, absent) = team_a
            .call(method.clone(), &format!("/v1/jobs/{missing}{path}"))
            .await;
        assert_eq!(status, 404, "{method} {path}: {absent:#}");
        assert_eq!(
            body["error"]["message"]
                .as_str()
                .map(|m| m.replace(&id, &missing)),
            absent["error"]["message"].as_str().map(str::to_string),
            "a foreign job must look like a missing one"
        );
        assert_eq!(body["error"]["code"], absent["error"]["code"]);
    }
    // Not listed to team-a's member, who cannot ask for team-b's list either.
    assert!(!team_a.list_ids().await.contains(&id));
    let (status, body) = team_a
        .call(reqwest::Method::GET, "/v1/jobs?team=team-b")
        .await;
    assert_eq!(status, 403, "{body:#}");
    assert_eq!(body["error"]["code"], "forbidden-team", "{body:#}");

    // The job is untouched: still running, same history, its RayJob still there.
    let after = team_b.job(&id).await;
    assert_eq!(after["state"], "running", "{after:#}");
    assert_eq!(after["history"], before["history"]);
    assert!(
        rayjobs(&gw)
            .get_opt(&rayjob)
            .await
            .expect("get rayjob")
            .is_some(),
        "RayJob deleted by another team's request"
    );
    // Its own team can cancel it with the very same request.
    let (status, cancelled) = team_b
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
        .await;
    assert_eq!(status, 200, "{cancelled:#}");
    assert_eq!(cancelled["state"], "cancelled");
    jobs::wait_no_rayjobs(&rayjobs(&gw), Duration::from_secs(20)).await;
}

/// Eight one-GPU jobs on one 8-GPU node of 64 CPUs. Each head asks 8 CPUs (the
/// default machine) and each submitter pod, which runs the driver, 1 CPU: seven jobs
/// fit whole, and the eighth waits for room, its reason naming the CPU, until one of
/// them ends. Before the gang fit counted the submitter, all eight were dispatched,
/// the heads took all 64 CPUs, and no submitter could be scheduled: eight jobs
/// `running` with no driver, for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_never_take_the_cpu_their_drivers_need() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = gw.client(&gw.token);
    let gate = tempfile::tempdir().expect("gate dir");
    let go = gate.path().join("go");
    let script = format!(
        "import os, time\n\
         print('driver up', flush=True)\n\
         deadline = time.time() + 300\n\
         while not os.path.exists({go:?}) and time.time() < deadline:\n    time.sleep(0.2)\n\
         print('driver done', flush=True)\n",
        go = go.display().to_string(),
    );
    let code = zip_of(&[("job.py", &script)]);
    let mut ids = Vec::new();
    for i in 0..8 {
        let spec = jobs::one_gpu_spec(&format!("fill-{i}"), "python3 job.py");
        ids.push(admin.submit_ok(&spec, code.clone()).await);
    }
    // Seven drivers run; one job waits for room, with the CPU as the reason.
    let waiting = forge_tests::wait::eventually(
        "seven jobs running and one waiting",
        Duration::from_secs(120),
        || async {
            let mut running = Vec::new();
            let mut queued = Vec::new();
            for id in &ids {
                let j = job(&gw, id).await;
                match j["state"].as_str() {
                    Some("running") => running.push(id.clone()),
                    Some("queued") if j["queue"]["code"] == "capacity.no-room" => {
                        queued.push(j);
                    }
                    _ => {}
                }
            }
            if running.len() == 7 && queued.len() == 1 {
                Ok((running, queued.remove(0)))
            } else {
                Err(forge_tests::wait::not_yet((running, queued)))
            }
        },
    )
    .await;
    let (running, queued) = waiting;
    let reason = queued["queue"]["reason"].as_str().expect("reason");
    assert!(reason.contains("CPU"), "{queued:#}");
    for id in &running {
        admin.wait_log(id, "driver up").await;
    }
    // Released, all eight end well: the eighth ran once room was freed.
    std::fs::write(&go, b"").expect("open the gate");
    let done = admin.wait_terminal(&ids, Duration::from_secs(240)).await;
    for (id, j) in &done {
        assert_eq!(j["state"], "succeeded", "{id}: {j:#}");
    }
    let last = queued["id"].as_str().expect("id");
    let (status, log) = admin.logs(last).await;
    assert_eq!(status, 200, "{log}");
    assert!(log.contains("driver done"), "{log}");
}
