//! `/v1/playgrounds` over HTTP (see [`crate::playground`]).
//!
//! - `POST /v1/playgrounds` `{model, series?, gpus, ttlSeconds, idleSeconds?, args?}`:
//!   201 with the playground (`pending`); 422 `invalid-playground` naming the field,
//!   403 `policy-rejected`, 429 `policy-queued` (the policy would queue it: playgrounds
//!   do not wait, retry later), 409 `playgrounds-disabled` without `FORGE_IMAGE_VLLM`.
//! - `GET /v1/playgrounds`: the team's (admins: every team's), newest first.
//! - `GET /v1/playgrounds/{id}`: with the pod's phase and pending reason and the
//!   next reclaim. Another team's playground is 404.
//! - `DELETE /v1/playgrounds/{id}`: ends it (`deleted`; an admin ending another
//!   team's: `reclaimed-by-admin`).
//! - `POST /v1/playgrounds/{id}/extend` `{seconds}`: moves the hard TTL.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use crate::auth::Caller;
use crate::playground::{CreatePlayground, PlaygroundView};
use crate::state::AppState;

fn body<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Result<T, ApiError> {
    crate::domain::json_number::from_slice(raw)
        .map_err(|e| ApiError::bad("invalid-body", "body", e.to_string()))
}

/// `POST /v1/playgrounds`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    raw: axum::body::Bytes,
) -> Result<(StatusCode, Json<PlaygroundView>), ApiError> {
    let req: CreatePlayground = body(&raw)?;
    let view = state.playgrounds.create(&caller, req).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

/// `GET /v1/playgrounds`.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let items = state.playgrounds.list(&caller).await?;
    Ok(Json(json!({ "items": items })))
}

/// `GET /v1/playgrounds/{id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<PlaygroundView>, ApiError> {
    Ok(Json(state.playgrounds.get(&caller, &id).await?))
}

/// `DELETE /v1/playgrounds/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<PlaygroundView>, ApiError> {
    Ok(Json(state.playgrounds.delete(&caller, &id).await?))
}

/// The body of `POST /v1/playgrounds/{id}/extend`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Extend {
    /// Seconds added to the hard TTL.
    seconds: u64,
}

/// `POST /v1/playgrounds/{id}/extend`.
pub async fn extend(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    raw: axum::body::Bytes,
) -> Result<Json<PlaygroundView>, ApiError> {
    let req: Extend = body(&raw)?;
    Ok(Json(
        state.playgrounds.extend(&caller, &id, req.seconds).await?,
    ))
}
