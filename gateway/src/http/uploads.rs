//! `/v1/uploads`: resumable chunked uploads of a client-built capsule (see
//! [`crate::uploads`]).
//!
//! - `POST /v1/uploads` `{"size", "digest"}` → 201 with the session (or 200 with the
//!   team's open session for the same digest and size: `resumed: true`);
//! - `PUT /v1/uploads/{id}` with `Content-Range: bytes <first>-<last>/<size>` and the
//!   bytes → 200 with the ranges now present;
//! - `GET /v1/uploads/{id}` → the ranges present and missing (where to resume);
//! - `POST /v1/uploads/{id}/complete` → 200 `{"capsule", "size", "deduplicated"}`
//!   once the digest and the capsule check out;
//! - `DELETE /v1/uploads/{id}` → 204, the bytes removed.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use headers::{ContentRange, Header};
use serde::Deserialize;

use super::error::ApiError;
use crate::auth::Caller;
use crate::state::AppState;
use crate::uploads::{ChunkRange, Completed, SessionView};

/// Body of `POST /v1/uploads`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartUpload {
    size: u64,
    digest: String,
}

/// `POST /v1/uploads`.
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    let req: StartUpload = crate::domain::json_number::from_slice(&body).map_err(|e| {
        ApiError::bad(
            "invalid-body",
            "body",
            format!("expected {{\"size\": <bytes>, \"digest\": \"<sha256>\"}}: {e}"),
        )
    })?;
    let view = state
        .uploads
        .start(&caller.team, &req.digest, req.size)
        .await?;
    let status = if view.resumed {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(view)))
}

/// `GET /v1/uploads/{id}`.
pub async fn status(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(state.uploads.status(&caller.team, &id).await?))
}

/// The chunk's place from its `Content-Range` (and `Content-Length`).
fn chunk_range(headers: &HeaderMap) -> Result<ChunkRange, ApiError> {
    let bad = |m: &str| ApiError::bad("upload.bad-range", "content-range", m.to_string());
    let mut values = headers.get_all(header::CONTENT_RANGE).iter();
    let range = ContentRange::decode(&mut values)
        .map_err(|_| bad("`Content-Range: bytes <first>-<last>/<size>` is required"))?;
    let (first, last) = range
        .bytes_range()
        .ok_or_else(|| bad("a chunk names its byte range (`bytes <first>-<last>/<size>`)"))?;
    let len = last
        .checked_sub(first)
        .map(|d| d + 1)
        .ok_or_else(|| bad("the last byte comes before the first"))?;
    Ok(ChunkRange {
        offset: first,
        len,
        total: range.bytes_len(),
    })
}

/// `PUT /v1/uploads/{id}`.
pub async fn put_chunk(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<SessionView>, ApiError> {
    let range = match chunk_range(&headers) {
        Ok(range) => range,
        Err(e) => {
            // An unknown session is 404 whatever its range says.
            state.uploads.status(&caller.team, &id).await?;
            return Err(e);
        }
    };
    let view = state
        .uploads
        .put_chunk(&caller.team, &id, range, body.into_data_stream())
        .await?;
    Ok(Json(view))
}

/// `POST /v1/uploads/{id}/complete`.
pub async fn complete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Completed>, ApiError> {
    Ok(Json(state.uploads.complete(&caller.team, &id).await?))
}

/// `DELETE /v1/uploads/{id}`.
pub async fn abort(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.uploads.abort(&caller.team, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
