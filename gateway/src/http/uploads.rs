//! `/v1/uploads`: resumable chunked uploads of a client-built capsule (see
//! [`crate::uploads`]).
//!
//! - `POST /v1/uploads` `{"size", "digest", "partBytes"?}` → 201 with the session (or
//!   200 with the team's open session for the same digest and size: `resumed: true`);
//! - `PUT /v1/uploads/{id}` with `Content-Range: bytes <first>-<last>/<size>` and the
//!   bytes of one whole part (at a multiple of the session's `partBytes`) → 200 with
//!   the ranges now present;
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
#[serde(rename_all = "camelCase")]
pub struct StartUpload {
    size: u64,
    digest: String,
    /// The size of every part but the last (the chunks the client will send); when
    /// present, a number (`null` is refused, as the document says).
    #[serde(default, deserialize_with = "a_number")]
    part_bytes: Option<u64>,
}

/// A field that may be absent but, when present, is a number.
fn a_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    u64::deserialize(d).map(Some)
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
            format!(
                "expected {{\"size\": <bytes>, \"digest\": \"<sha256>\", \"partBytes\"?: <bytes>}}: {e}"
            ),
        )
    })?;
    let view = state
        .uploads
        .start(&caller.team, &req.digest, req.size, req.part_bytes)
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

#[cfg(test)]
mod tests {
    use super::StartUpload;

    fn parse(body: &str) -> Result<StartUpload, String> {
        crate::domain::json_number::from_slice(body.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn part_bytes_is_optional_but_never_null() {
        let digest = "0".repeat(64);
        let absent = parse(&format!(r#"{{"size": 1, "digest": "{digest}"}}"#)).expect("absent");
        assert_eq!(absent.part_bytes, None);
        let given = parse(&format!(
            r#"{{"size": 1, "digest": "{digest}", "partBytes": 5}}"#
        ))
        .expect("given");
        assert_eq!(given.part_bytes, Some(5));
        let null = parse(&format!(
            r#"{{"size": 1, "digest": "{digest}", "partBytes": null}}"#
        ));
        assert!(null.is_err(), "{:?}", null.map(|s| s.part_bytes));
    }
}
