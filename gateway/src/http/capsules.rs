//! `GET /v1/team-capsules/{digest}` (and `HEAD`): whether the caller's team may name
//! the capsule `digest` in a submission — 200 `{"digest"}` or 404 `unknown-capsule`.
//! `forge submit` asks before uploading, so a second submission of the same code and
//! spec uploads nothing. (Not under `/v1/capsules/`, where the local object store
//! serves signed capsule downloads.)

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::error::ApiError;
use crate::auth::Caller;
use crate::domain::Digest;
use crate::jobs::JobError;
use crate::state::AppState;
use crate::uploads::UploadError;

/// `GET /v1/team-capsules/{digest}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(digest): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let digest = Digest::parse(&digest).map_err(|_| JobError::InvalidCapsuleRef)?;
    if state.uploads.has_capsule(&caller.team, &digest).await? {
        Ok(Json(json!({ "digest": digest })))
    } else {
        Err(UploadError::CapsuleAbsent(digest).into())
    }
}
