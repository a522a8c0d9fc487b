//! Helpers shared by the integration tests: emulator start presets (re-exported from
//! `forge_kubesim::testing`), sample objects, the ray.io APIs, raw HTTP exchanges to
//! check exact `Status` bodies, and polling with a deadline instead of fixed sleeps.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use forge_kubesim::controllers::{raycluster_resource, rayjob_resource};
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use tokio::time::Instant;

pub use forge_kubesim::testing::{process_controllers, start_bare, start_process, start_with};

/// The namespace every emulator of these tests serves (the default one).
pub const NS: &str = "starforge";

/// A fixture file under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// RayJobs in [`NS`].
pub fn rayjobs(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &rayjob_resource())
}

/// RayClusters in [`NS`].
pub fn rayclusters(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NS, &raycluster_resource())
}

/// The API error inside `e` (panics on any other error).
pub fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
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

/// How often the polling helpers look again.
const POLL: Duration = Duration::from_millis(50);

/// Polls `f` until it returns `Some`, or panics after `secs` naming `what`.
pub async fn wait_for<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `f` until it holds, or panics after 10 s naming `what`.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for(10, what, || {
        let fut = f();
        async move { fut.await.then_some(()) }
    })
    .await;
}

/// Checks that `f` holds throughout `hold` (for what must *not* happen: an invariant
/// has no moment to wait for); panics naming `what` as soon as it does not.
pub async fn holds_for<F, Fut>(hold: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + hold;
    loop {
        assert!(f().await, "{what} stopped holding");
        if Instant::now() >= end {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
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
    raw_http_with(addr, method, path, &[]).await
}

/// [`raw_http`] with extra request headers.
pub async fn raw_http_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n{extra}\r\n"
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
