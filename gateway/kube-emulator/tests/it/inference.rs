//! A pod of the inference image in process mode runs the OpenAI-compatible stand-in,
//! reached through the API server's `pods/{name}:{port}/proxy/...` subresource: Ready
//! only after its model-loading delay, the API key required (the caller's
//! `Authorization` is not forwarded by the proxy, so the key travels in the
//! stand-in's key header), chat completions streamed chunk by chunk through the
//! proxy (never buffered) and not, and a 503 for a pod nothing listens on. The model is
//! a directory on a claim (`/models/ckpt`, its `config.json` written by the test):
//! without it the server crash-loops with vLLM's complaint in its previous log.

use std::path::Path;

use forge_kubesim::inference::{KEY_HEADER, reply_words};
use forge_kubesim::{ControllerConfig, NodeSpec, Sim, SimConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use crate::support::{NS, eventually, process_controllers, start_with, wait_for};

const IMAGE: &str = "vllm/vllm-openai:v0.11.0";

async fn start(scratch: &Path) -> Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=1x8").expect("layout"),
        controllers: ControllerConfig {
            scratch_root: scratch.to_path_buf(),
            inference_image: Some(IMAGE.into()),
            ..process_controllers()
        },
        ..SimConfig::default()
    })
    .await
}

/// A playground-like pod: `vllm serve` with the key from a Secret.
fn server_pod(name: &str, extra_args: &[&str]) -> Pod {
    let mut args = vec![
        "serve",
        "/models/ckpt",
        "--served-model-name",
        "team-a/m",
        "--api-key",
        "$(VLLM_API_KEY)",
    ];
    args.extend_from_slice(extra_args);
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{
            "name": "vllm", "image": IMAGE, "command": ["vllm"], "args": args,
            "ports": [{"name": "http", "containerPort": 8000}],
            "env": [{"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {"name": "pg-key", "key": "key"}}}],
            "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": true}],
        }],
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": true}}]},
    }))
    .expect("pod")
}

/// The `models` claim, with a model directory `ckpt` (its `config.json`) when
/// `with_model`, on the emulator's host directory of the claim.
async fn models_claim(sim: &Sim, scratch: &Path, with_model: bool) {
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(sim.client().expect("client"), NS);
    if claims.get_opt("models").await.expect("get").is_none() {
        let claim = serde_json::from_value(json!({"metadata": {"name": "models"},
            "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .expect("claim");
        claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("create the claim");
    }
    if with_model {
        let dir =
            forge_kubesim::controllers::hostpaths::claim_dir(scratch, NS, "models").join("ckpt");
        std::fs::create_dir_all(&dir).expect("model dir");
        std::fs::write(dir.join("config.json"), "{}").expect("config.json");
    }
}

async fn ready(pods: &Api<Pod>, name: &str) -> bool {
    pods.get(name).await.ok().is_some_and(|p| {
        p.status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

async fn setup(sim: &Sim, scratch: &Path, name: &str, extra: &[&str]) -> Api<Pod> {
    models_claim(sim, scratch, true).await;
    let client = sim.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "pg-key"}, "stringData": {"key": "s3cret"}}),
    )
    .expect("secret");
    if secrets.get_opt("pg-key").await.expect("get").is_none() {
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("secret");
    }
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.create(&PostParams::default(), &server_pod(name, extra))
        .await
        .expect("create pod");
    pods
}

fn proxy_url(sim: &Sim, name: &str, path: &str) -> String {
    format!(
        "{}/api/v1/namespaces/{NS}/pods/{name}:8000/proxy{path}",
        sim.url()
    )
}

fn chat(stream: bool) -> Value {
    json!({"model": "team-a/m", "stream": stream,
        "messages": [{"role": "user", "content": "hello there"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_in_serves_through_the_pod_proxy_once_loaded() {
    let dir = tempfile::tempdir().expect("scratch");
    let sim = start(dir.path()).await;
    let pods = setup(
        &sim,
        dir.path(),
        "pg-1",
        &["--kubesim-load-delay-ms", "1500"],
    )
    .await;
    let http = reqwest::Client::new();
    // Running but still loading: not Ready, and the proxy finds nothing listening.
    wait_for(20, "pod Running", || async {
        let p = pods.get("pg-1").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert!(!ready(&pods, "pg-1").await, "Ready while the model loads");
    let r = http
        .get(proxy_url(&sim, "pg-1", "/health"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 503, "a loading model is unreachable");
    let body: Value = r.json().await.expect("status json");
    assert_eq!(body["reason"], "ServiceUnavailable");
    eventually("pod Ready after loading", || ready(&pods, "pg-1")).await;
    let health = http
        .get(proxy_url(&sim, "pg-1", "/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status().as_u16(), 200);

    // The caller's Authorization is for the API server and is not forwarded.
    let r = http
        .get(proxy_url(&sim, "pg-1", "/v1/models"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401, "Authorization is not forwarded");
    let r = http
        .get(proxy_url(&sim, "pg-1", "/v1/models"))
        .header(KEY_HEADER, "wrong")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 401);
    let models: Value = http
        .get(proxy_url(&sim, "pg-1", "/v1/models"))
        .header(KEY_HEADER, "s3cret")
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], "team-a/m");

    // Not streamed: one JSON body with the deterministic reply and usage.
    let r = http
        .post(proxy_url(&sim, "pg-1", "/v1/chat/completions"))
        .header(KEY_HEADER, "s3cret")
        .json(&chat(false))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let full: Value = r.json().await.expect("json");
    let expected = reply_words("hello there").concat();
    assert_eq!(full["choices"][0]["message"]["content"], expected.as_str());
    assert_eq!(full["usage"]["completion_tokens"], 5);

    // An unknown model is the server's 404, passed through with its body.
    let mut other = chat(false);
    other["model"] = json!("nope");
    let r = http
        .post(proxy_url(&sim, "pg-1", "/v1/chat/completions"))
        .header(KEY_HEADER, "s3cret")
        .json(&other)
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 404);
    let body: Value = r.json().await.expect("json");
    assert_eq!(body["error"]["type"], "NotFoundError");

    // Deleting the pod stops its server: the proxy answers 404 for the pod.
    pods.delete("pg-1", &Default::default())
        .await
        .expect("delete");
    eventually("pod gone", || async {
        pods.get_opt("pg-1").await.expect("get").is_none()
    })
    .await;
    let r = http
        .get(proxy_url(&sim, "pg-1", "/health"))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 404);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_chunks_pass_the_proxy_one_by_one() {
    let dir = tempfile::tempdir().expect("scratch");
    let sim = start(dir.path()).await;
    let pods = setup(
        &sim,
        dir.path(),
        "pg-2",
        &["--kubesim-chunk-delay-ms", "150"],
    )
    .await;
    eventually("pod Ready", || ready(&pods, "pg-2")).await;
    let r = reqwest::Client::new()
        .post(proxy_url(&sim, "pg-2", "/v1/chat/completions"))
        .header(KEY_HEADER, "s3cret")
        .json(&chat(true))
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 200);
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    let mut body = r.bytes_stream();
    // The first read holds the first event only: a buffering proxy would hand over
    // the whole stream (8 events, 1.2 s of chunks) at once.
    let first = body.next().await.expect("a first chunk").expect("read");
    let first = String::from_utf8_lossy(&first).into_owned();
    assert_eq!(first.matches("data: ").count(), 1, "first read: {first:?}");
    assert!(first.contains("\"role\":\"assistant\""), "{first}");
    let mut rest = first;
    while let Some(chunk) = body.next().await {
        rest.push_str(&String::from_utf8_lossy(&chunk.expect("read")));
    }
    let events: Vec<&str> = rest
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.trim_start_matches("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")?
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, reply_words("hello there").concat());

    // A pod that serves nothing on the port: 503, not a hang.
    let client = sim.client().expect("client");
    let plain: Api<Pod> = Api::namespaced(client, NS);
    plain
        .create(
            &PostParams::default(),
            &serde_json::from_value(crate::support::pod("plain", json!({}))).expect("pod"),
        )
        .await
        .expect("create");
    wait_for(20, "plain pod Running", || async {
        let p = plain.get("plain").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let r = reqwest::get(format!(
        "{}/api/v1/namespaces/{NS}/pods/plain/proxy/",
        sim.url()
    ))
    .await
    .expect("send");
    assert_eq!(r.status().as_u16(), 503);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_its_model_crash_loops_saying_why() {
    let dir = tempfile::tempdir().expect("scratch");
    let sim = start(dir.path()).await;
    models_claim(&sim, dir.path(), false).await;
    let client = sim.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret: Secret = serde_json::from_value(
        json!({"metadata": {"name": "pg-key"}, "stringData": {"key": "s3cret"}}),
    )
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    let pods: Api<Pod> = Api::namespaced(client, NS);
    pods.create(&PostParams::default(), &server_pod("pg-3", &[]))
        .await
        .expect("create pod");
    let waiting = wait_for(20, "the server in CrashLoopBackOff", || async {
        let p = pods.get("pg-3").await.ok()?;
        let c = p.status?.container_statuses?.into_iter().next()?;
        let w = c.state.clone()?.waiting?;
        (w.reason.as_deref() == Some("CrashLoopBackOff")).then_some(c)
    })
    .await;
    assert_eq!(
        waiting
            .last_state
            .and_then(|s| s.terminated)
            .map(|t| t.exit_code),
        Some(1)
    );
    let log = pods
        .logs(
            "pg-3",
            &kube::api::LogParams {
                previous: true,
                ..kube::api::LogParams::default()
            },
        )
        .await
        .expect("previous log");
    assert!(
        log.contains("/models/ckpt does not appear to have a file named config.json"),
        "{log}"
    );
    assert!(!ready(&pods, "pg-3").await);
    sim.shutdown().await;
}
