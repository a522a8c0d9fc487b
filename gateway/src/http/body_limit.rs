//! Request-body limits by route: only the three routes that carry bulk bytes (a
//! submission's code archive, `POST /v1/jobs`; an upload chunk, `PUT /v1/uploads/{id}`;
//! a plugin component, `POST /v1/plugins`) may send up to `FORGE_MAX_BODY_MIB`; every
//! other body — a JobSpec to review, a policy, a JSON request — is a document and is
//! capped at `FORGE_MAX_DOCUMENT_KIB`, so that no request can make the gateway parse
//! hundreds of MiB of JSON or YAML. The bulk routes bound their own document parts
//! (the `spec` part, a JSON submission) with the small limit too.
//!
//! The limit is chosen by route, not by `Content-Type`, which the client controls.
//! A body declared too large is answered `413 body-too-large` after its declared bytes
//! are read and dropped (when they are within the large limit), so the client receives
//! the answer instead of a reset connection; a body without a declared length is cut
//! at the limit.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::Limited;

use super::error::{ApiError, EdgeError};

/// The two limits, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// `FORGE_MAX_DOCUMENT_KIB`.
    pub document: usize,
    /// `FORGE_MAX_BODY_MIB`.
    pub bulk: usize,
}

/// Whether a route carries bulk bytes (code archives, upload chunks, plugins).
pub fn is_bulk_route(method: &Method, path: &str) -> bool {
    (method == Method::POST && matches!(path, "/v1/jobs" | "/v1/plugins"))
        || (method == Method::PUT && path.starts_with("/v1/uploads/"))
}

/// The `413 body-too-large` answer for a body over `limit` bytes.
pub fn too_large(field: &str, limit: usize, setting: &str) -> ApiError {
    EdgeError::TooLarge {
        field: field.to_string(),
        message: format!("{field} is larger than {limit} bytes (the gateway's {setting})"),
    }
    .into()
}

/// The middleware: picks the limit for the route, refuses a declared length over it and
/// caps the body stream at it.
pub async fn limit_body(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    let (limit, setting) = if is_bulk_route(req.method(), req.uri().path()) {
        (limits.bulk, "FORGE_MAX_BODY_MIB")
    } else {
        (limits.document, "FORGE_MAX_DOCUMENT_KIB")
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > limit as u64
    {
        if len <= limits.bulk as u64 {
            // Read and drop what the client is sending, so it gets the answer.
            let mut stream = req.into_body().into_data_stream();
            while let Some(Ok(_)) = stream.next().await {}
        }
        return too_large("body", limit, setting).into_response();
    }
    next.run(req.map(|body| Body::new(Limited::new(body, limit))))
        .await
}
