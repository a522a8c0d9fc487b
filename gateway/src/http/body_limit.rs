//! The body limit of a route (its [`super::route_class::RouteClass`] chooses it): a body
//! declared larger is answered `413 body-too-large` once its declared bytes are read and
//! dropped (when they are within the bulk limit), so the client receives the answer
//! instead of a reset connection; a body without a declared length is cut at the limit,
//! which the extractors ([`super::body`]) answer with the same 413. The limit rides on
//! the request as an extension, so they can say which it is.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::Limited;

use super::error::{ApiError, EdgeError};

/// A route's body limit.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub bytes: usize,
    /// The setting that chose it (named in the 413).
    pub setting: &'static str,
    /// How much of a body declared too large is read and dropped before the answer.
    pub drain: usize,
}

impl BodyLimit {
    /// The `413 body-too-large` answer for `field` (the body, or one of its parts).
    pub fn exceeded(&self, field: &str) -> ApiError {
        too_large(field, self.bytes, self.setting)
    }
}

/// The `413 body-too-large` answer for a `field` over `limit` bytes.
pub fn too_large(field: &str, limit: usize, setting: &str) -> ApiError {
    EdgeError::TooLarge {
        field: field.to_string(),
        message: format!("{field} is larger than {limit} bytes (the gateway's {setting})"),
    }
    .into()
}

/// The middleware: refuses a declared length over the limit, caps the body stream at it
/// and hands the limit to the extractors.
pub async fn limit_body(State(limit): State<BodyLimit>, mut req: Request, next: Next) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared
        && len > limit.bytes as u64
    {
        if len <= limit.drain as u64 {
            // Read and drop what the client is sending, so it gets the answer.
            let mut stream = req.into_body().into_data_stream();
            while let Some(Ok(_)) = stream.next().await {}
        }
        return limit.exceeded("body").into_response();
    }
    req.extensions_mut().insert(limit);
    next.run(req.map(|body| Body::new(Limited::new(body, limit.bytes))))
        .await
}
