//! The HTTP client the OTLP exporter sends spans with: the gateway's `reqwest`
//! (rustls, as the rest of the gateway's outbound TLS) driven on the gateway's Tokio
//! runtime.
//!
//! The SDK's batch processor exports from a thread of its own, outside any runtime,
//! by blocking on the exporter's future; an async client polled there would find no
//! reactor. So each request is spawned onto the runtime the client was made in, and
//! only its result is awaited on the exporter's thread.

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// `reqwest` on a Tokio runtime handle.
#[derive(Debug, Clone)]
pub(super) struct ExportClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl ExportClient {
    /// A client on the current runtime (panics outside one: [`super::init`] runs in it).
    pub(super) fn new() -> Result<Self, reqwest::Error> {
        Ok(ExportClient {
            client: reqwest::Client::builder().build()?,
            runtime: tokio::runtime::Handle::current(),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for ExportClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let request = reqwest::Request::try_from(request)?;
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut out = Response::builder().status(status);
        if let Some(h) = out.headers_mut() {
            *h = headers;
        }
        Ok(out.body(body)?)
    }
}
