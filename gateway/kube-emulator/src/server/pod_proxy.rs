//! `pods/{name}[:{port}]/proxy/{path}`: the API server's pod proxy. The request
//! (method, query, body, end-to-end headers) goes to the pod's server and the answer
//! comes back as it arrives — the body is streamed chunk by chunk, never buffered,
//! so server-sent events pass through live.
//!
//! As in kube-apiserver: the caller's `Authorization` header is not forwarded (the API
//! server drops it once it has authenticated the request), hop-by-hop headers are
//! removed, the port is a number or a container port's name (default: the first
//! declared container port, else 80), and a pod nothing listens on answers 503
//! `ServiceUnavailable` ("error trying to reach service"). The emulator reaches the
//! pod through [`PodEndpoints`](crate::endpoints::PodEndpoints), where the kubelet
//! registered what the pod serves, instead of dialling the (unroutable) pod IP.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, Method, header};
use axum::response::Response;
use futures::{StreamExt, TryStreamExt};
use serde_json::Value;

use super::state::AppState;
use crate::error::ApiError;
use crate::resources::PODS;

/// Headers that belong to one connection, never forwarded (RFC 9110 §7.6.1), and
/// the caller's credentials for the API server.
const NOT_FORWARDED: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "authorization",
];

fn forwarded(name: &HeaderName) -> bool {
    !NOT_FORWARDED.contains(&name.as_str())
}

/// What a proxy request addresses.
pub(super) struct ProxyTarget<'a> {
    /// Namespace.
    pub(super) ns: &'a str,
    /// `name`, `name:port` or `scheme:name:port`.
    pub(super) name_port: &'a str,
    /// The path after `/proxy` (`/` when empty).
    pub(super) path: &'a str,
    /// The raw query string.
    pub(super) query: Option<&'a str>,
}

/// Proxies one request to the pod's server.
pub(super) async fn pod_proxy(
    st: &AppState,
    t: ProxyTarget<'_>,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (name, port) = split_name_port(t.name_port);
    let pod = st.store.get(PODS, t.ns, name)?;
    let port = resolve_port(&pod, port)?;
    let pod_ip = pod
        .pointer("/status/podIP")
        .and_then(Value::as_str)
        .unwrap_or("<none>");
    let unreachable = |why: &str| {
        ApiError::ServiceUnavailable(format!(
            "error trying to reach service: dial tcp {pod_ip}:{port}: {why}"
        ))
    };
    let Some(addr) = st.endpoints.lookup(t.ns, name, port) else {
        if let Some(answer) = simulated_dashboard(st, t.ns, &pod, port, &method, t.path) {
            return Ok(answer);
        }
        return Err(unreachable("connect: connection refused"));
    };
    let path = if t.path.is_empty() { "/" } else { t.path };
    let mut url = format!("http://{addr}{path}");
    if let Some(q) = t.query {
        url.push('?');
        url.push_str(q);
    }
    let mut req = st.proxy_client.request(method, &url).body(body);
    for (k, v) in headers {
        if forwarded(k) {
            req = req.header(k, v);
        }
    }
    let resp = req.send().await.map_err(|e| {
        tracing::debug!(error = %e, pod = %name, "pod proxy upstream failed");
        unreachable("connect: connection refused")
    })?;
    let mut out = Response::builder().status(resp.status().as_u16());
    for (k, v) in resp.headers() {
        if forwarded(k) && k != header::CONTENT_LENGTH {
            out = out.header(k.as_str(), v.as_bytes());
        }
    }
    let shutdown = st.shutdown.clone();
    let stream = resp
        .bytes_stream()
        .map_err(std::io::Error::other)
        .take_until(async move { shutdown.cancelled().await });
    out.body(Body::from_stream(stream))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// A simulated Ray head's dashboard (no real Ray here): the Jobs API's `GET
/// /api/jobs/<id>` and `POST /api/jobs/<id>/stop` answered from the emulator's job
/// table, as `ray job status` / `ray job stop` would find them on a real head. `None`
/// for anything else (the proxy then answers as for a pod nothing listens on).
fn simulated_dashboard(
    st: &AppState,
    ns: &str,
    pod: &Value,
    port: u16,
    method: &Method,
    path: &str,
) -> Option<Response> {
    let labels = pod.pointer("/metadata/labels")?;
    if st.dashboard.is_real()
        || port != DASHBOARD_PORT
        || labels.get("ray.io/node-type").and_then(Value::as_str) != Some("head")
    {
        return None;
    }
    let cluster = labels.get("ray.io/cluster").and_then(Value::as_str)?;
    let rest = path.strip_prefix("/api/jobs/")?;
    let json = |status: u16, body: Value| {
        Response::builder()
            .status(status)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .ok()
    };
    match (method, rest.strip_suffix("/stop")) {
        (&Method::POST, Some(id)) if !id.contains('/') => {
            if st.dashboard.get(ns, cluster, id).is_none() {
                return json(
                    404,
                    serde_json::json!({"detail": format!("Job {id} does not exist")}),
                );
            }
            let stopped = st.dashboard.stop(ns, cluster, id);
            json(200, serde_json::json!({"stopped": stopped}))
        }
        (&Method::GET, None) if !rest.contains('/') => match st.dashboard.get(ns, cluster, rest) {
            Some(info) => json(
                200,
                serde_json::json!({
                    "submission_id": rest,
                    "status": info.status,
                    "message": info.message,
                    "start_time": info.start_ms,
                    "end_time": info.end_ms,
                }),
            ),
            None => json(
                404,
                serde_json::json!({"detail": format!("Job {rest} does not exist")}),
            ),
        },
        _ => None,
    }
}

/// The Ray dashboard's port on a head.
const DASHBOARD_PORT: u16 = 8265;

/// `name`, `name:port`, `scheme:name:port` into the name and the port part.
fn split_name_port(s: &str) -> (&str, Option<&str>) {
    let parts: Vec<&str> = s.split(':').collect();
    match parts.as_slice() {
        [name] => (name, None),
        [name, port] => (name, Some(*port).filter(|p| !p.is_empty())),
        [_scheme, name, port, ..] => (name, Some(*port).filter(|p| !p.is_empty())),
        [] => (s, None),
    }
}

/// The container port a proxy request addresses.
fn resolve_port(pod: &Value, port: Option<&str>) -> Result<u16, ApiError> {
    let ports: Vec<(Option<&str>, u16)> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .filter_map(|p| {
            let n = u16::try_from(p["containerPort"].as_u64()?).ok()?;
            Some((p["name"].as_str(), n))
        })
        .collect();
    match port {
        None => Ok(ports.first().map_or(80, |(_, n)| *n)),
        Some(p) => match p.parse::<u16>() {
            Ok(n) => Ok(n),
            Err(_) => ports
                .iter()
                .find(|(name, _)| *name == Some(p))
                .map(|(_, n)| *n)
                .ok_or_else(|| {
                    ApiError::BadRequest(format!("no such port {p:?} on the pod's containers"))
                }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn name_and_port_forms() {
        assert_eq!(split_name_port("p"), ("p", None));
        assert_eq!(split_name_port("p:8000"), ("p", Some("8000")));
        assert_eq!(split_name_port("p:"), ("p", None));
        assert_eq!(split_name_port("http:p:http"), ("p", Some("http")));
        let pod = json!({"spec": {"containers": [
            {"name": "a"},
            {"name": "b", "ports": [{"name": "http", "containerPort": 8000}, {"containerPort": 9000}]},
        ]}});
        assert_eq!(resolve_port(&pod, None).expect("default"), 8000);
        assert_eq!(resolve_port(&pod, Some("9000")).expect("number"), 9000);
        assert_eq!(resolve_port(&pod, Some("http")).expect("named"), 8000);
        assert!(resolve_port(&pod, Some("grpc")).is_err());
        assert_eq!(resolve_port(&json!({}), None).expect("none"), 80);
        assert!(!forwarded(&header::AUTHORIZATION));
        assert!(forwarded(&header::ACCEPT));
    }
}
