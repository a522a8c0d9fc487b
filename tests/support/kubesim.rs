//! Helpers for the kubesim (issue 3) integration tests: start an emulator on port 0,
//! build sample objects, and talk raw HTTP to check exact `Status` bodies.

use std::path::Path;
use std::time::Duration;

use forge_kubesim::{ControllerConfig, NodeSpec, RunMode, Sim, SimConfig};
use serde_json::{Value, json};

/// Starts a bare API server (no simulated controllers) with two h100 nodes
/// (`h100-0`, `h100-1`, 8 GPUs) and one a100 node (`a100-0`).
pub async fn start_bare() -> Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=2x8,a100=1x8").expect("valid layout"),
        run_controllers: false,
        ..SimConfig::default()
    })
    .await
}

/// Starts an emulator with `cfg`.
pub async fn start_with(cfg: SimConfig) -> Sim {
    Sim::start(cfg).await.expect("kubesim starts")
}

/// Starts an emulator with its controllers in process mode (jobs really run on the
/// host) on `layout` (`series=COUNTxGPUS,...`), keeping the kubelet's scratch space
/// (emptyDir volumes, unpacked working dirs) under `scratch`. Image pulls take 20 ms.
pub async fn start_process(layout: &str, scratch: &Path) -> Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout(layout).expect("valid layout"),
        controllers: ControllerConfig {
            mode: RunMode::Process,
            scratch_root: scratch.to_path_buf(),
            image_pull: Duration::from_millis(20),
            backoff_base: Duration::from_millis(500),
            ..ControllerConfig::default()
        },
        ..SimConfig::default()
    })
    .await
}

/// A pod with one container.
pub fn pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    })
}

/// A RayJob shaped like KubeRay's `ray-job.sample.yaml` (trimmed).
pub fn rayjob(name: &str) -> Value {
    json!({
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "python /home/ray/samples/sample_code.py",
            "runtimeEnvYAML": "pip:\n  - requests==2.26.0\nenv_vars:\n  counter_name: \"test_counter\"\n",
            "rayClusterSpec": {
                "rayVersion": "2.46.0",
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-head",
                        "image": "rayproject/ray:2.46.0",
                        "ports": [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"}],
                        "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}},
                    }]}},
                },
                "workerGroupSpecs": [{
                    "replicas": 1,
                    "minReplicas": 1,
                    "maxReplicas": 5,
                    "groupName": "small-group",
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-worker",
                        "image": "rayproject/ray:2.46.0",
                        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}, "requests": {"cpu": "200m"}},
                    }]}},
                }],
            },
        },
    })
}

/// A raw HTTP exchange: (status code, headers, body as JSON or a JSON string).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, http::HeaderMap, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let req = req
        .body(kube::client::Body::from(bytes))
        .expect("valid request");
    let resp = client.send(req).await.expect("request sent");
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let data = resp.into_body().collect_bytes().await.expect("body read");
    let v = serde_json::from_slice(&data)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&data).into_owned()));
    (code, headers, v)
}

/// A raw HTTP/1.1 exchange over TCP with no client-side retries (the `kube` client
/// retries 429s by itself): (status code, lower-cased headers, body).
pub async fn raw_http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("http response");
    let mut lines = head.lines();
    let code = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (code, headers, body.to_owned())
}
