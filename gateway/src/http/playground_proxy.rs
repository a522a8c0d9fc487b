//! `/v1/playgrounds/{id}/v1/*`: the playground's OpenAI-compatible API (chat
//! completions, completions, models, …) through the gateway — only for the owning team
//! (and admins), with the playground's key added by the gateway, through the API
//! server's pod proxy. The answer is passed on as it arrives ([`relay`]): never
//! buffered, `Cache-Control: no-cache` and `X-Accel-Buffering: no` so no proxy in
//! front buffers it either, SSE keep-alives while the model is silent, an idle
//! timeout, an `error` event if the upstream stream breaks, and the reclaim warning as
//! a comment; an open answer keeps the playground from idling out; the tokens the
//! server reports are counted (`forge_playground_tokens_total`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, Uri, header};
use axum::response::Response;

use super::body::DocumentBytes;
use super::error::ApiError;
use crate::auth::Caller;
use crate::playground::relay::{RelayTimes, ending_at, relay};
use crate::playground::usage::metered;
use crate::state::AppState;

/// Request headers passed on to the server (the caller's credentials never are).
const FORWARDED: [header::HeaderName; 3] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    header::ACCEPT_ENCODING,
];

/// Any method on `/v1/playgrounds/{id}/v1/{*rest}`.
pub async fn call(
    State(state): State<AppState>,
    caller: Caller,
    Path((id, rest)): Path<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    DocumentBytes(body): DocumentBytes,
) -> Result<Response, ApiError> {
    let mut path = format!("/v1/{rest}");
    if let Some(q) = uri.query() {
        path.push('?');
        path.push_str(q);
    }
    let mut out_headers = HeaderMap::new();
    for h in FORWARDED {
        if let Some(v) = headers.get(&h) {
            out_headers.insert(h, v.clone());
        }
    }
    let upstream = state
        .playgrounds
        .call(&caller, &id, method, &path, out_headers, body)
        .await?;
    let sse = upstream
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    let metrics = state.metrics.clone();
    let mut resp = Response::builder().status(upstream.status);
    for h in [header::CONTENT_TYPE, header::CONTENT_ENCODING] {
        if let Some(v) = upstream.headers.get(&h) {
            resp = resp.header(h, v);
        }
    }
    let resp = resp
        .header(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))
        .header("x-accel-buffering", HeaderValue::from_static("no"))
        .body(Body::from_stream(metered(
            ending_at(
                relay(
                    upstream.body,
                    sse,
                    RelayTimes::default(),
                    Some(state.playgrounds.stream_notices(&id)),
                ),
                state.shutdown.begun(),
                sse,
            ),
            sse,
            move |u| metrics.playground_tokens(u.prompt, u.completion),
        )))
        .map_err(|e| ApiError::internal("the playground relay", e))?;
    Ok(resp)
}
