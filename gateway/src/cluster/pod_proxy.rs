//! Requests to a pod's server through the API server's pod proxy
//! (`/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}`), with the gateway's own
//! credentials — only its service account may use `pods/proxy`. The answer comes back
//! raw (status, headers, a body read chunk by chunk as it arrives): the caller decides
//! what a status means and streams the body on.

use bytes::Bytes;
use futures::Stream;
use http_body_util::BodyExt;

/// The pod's answer: status, headers and its body as a stream of chunks.
pub struct ProxiedResponse {
    /// Status.
    pub status: http::StatusCode,
    /// Headers.
    pub headers: http::HeaderMap,
    /// The body, chunk by chunk (an `Err` when the connection breaks).
    pub body: std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, kube::Error>> + Send>>,
}

impl std::fmt::Debug for ProxiedResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxiedResponse")
            .field("status", &self.status)
            .finish()
    }
}

#[allow(clippy::too_many_arguments)]
/// Sends one request to `port` of pod `pod` in `namespace`: `path` (with its query)
/// under the pod's root, `headers` as given.
pub async fn send(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    port: u16,
    method: http::Method,
    path: &str,
    headers: http::HeaderMap,
    body: Bytes,
) -> Result<ProxiedResponse, kube::Error> {
    let uri = format!("/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy{path}");
    let mut req = http::Request::builder()
        .method(method)
        .uri(uri)
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(kube::Error::HttpError)?;
    req.headers_mut().extend(headers);
    let resp = client.send(req).await?;
    let (parts, body) = resp.into_parts();
    let body = body.into_data_stream();
    Ok(ProxiedResponse {
        status: parts.status,
        headers: parts.headers,
        body: Box::pin(body),
    })
}
