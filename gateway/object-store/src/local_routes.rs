//! The HTTP side of the local store: the axum routes that serve its signed capsule
//! URLs (`GET /v1/capsules/<sha>.zip?expires=…&sig=…`), merged into the gateway's
//! router in dev mode. The only HTTP server in this crate; signing and verifying are in
//! `local.rs`.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use crate::local::{LocalStore, UrlError};

#[derive(Debug, Deserialize)]
struct SignedQuery {
    expires: u64,
    sig: String,
}

/// Routes serving signed capsule URLs: `GET /v1/capsules/{sha}.zip`. Tampered,
/// expired or unsigned URLs get 403, a missing capsule 404.
pub fn local_routes(store: Arc<LocalStore>) -> Router {
    Router::new()
        .route("/v1/capsules/{file}", get(serve_capsule))
        .with_state(store)
}

async fn serve_capsule(
    State(store): State<Arc<LocalStore>>,
    UrlPath(file): UrlPath<String>,
    query: Result<Query<SignedQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return (StatusCode::FORBIDDEN, "missing signature\n").into_response();
    };
    let Some(digest) = file.strip_suffix(".zip") else {
        return (StatusCode::NOT_FOUND, "not found\n").into_response();
    };
    let path = match store.verify(digest, q.expires, &q.sig) {
        Ok(p) => p,
        Err(UrlError::NotFound) => {
            return (StatusCode::NOT_FOUND, "capsule not found\n").into_response();
        }
        Err(e) => return (StatusCode::FORBIDDEN, format!("{e}\n")).into_response(),
    };
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(_) => return (StatusCode::NOT_FOUND, "capsule not found\n").into_response(),
    };
    let len = file.metadata().await.map(|m| m.len()).ok();
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 16));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/zip"),
    );
    if let Some(len) = len {
        resp.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    }
    resp
}
