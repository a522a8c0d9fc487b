//! Shadow mode over HTTP: `GET|PUT|DELETE /v1/policy/shadow` — the candidate global
//! chain that runs beside the live one, and its agreement (changes are admin-only).
//! Admins see the comparisons over every team's jobs; a member sees the counts and
//! the differing cases of its own team's jobs only (job ids, team names and decision
//! codes of other teams never reach it).

use super::body::{JsonBody, JsonDocument};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::policy::who;
use crate::auth::{Caller, Role};
use crate::policy::shadow::{CandidateView, ShadowCandidate};
use crate::policy::{LinkInput, PolicyAdminError, Scope};
use crate::state::AppState;
use crate::store::{ShadowCounts, ShadowResult, now_ms};

/// `PUT /v1/policy/shadow` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutShadow {
    plugins: Vec<LinkInput>,
    #[serde(default)]
    comment: String,
}

impl JsonDocument for PutShadow {
    const INVALID: &'static str = "invalid-policy";
    const WHAT: &'static str = "a policy document";
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowResponse {
    active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate: Option<CandidateView>,
    #[serde(flatten)]
    counts: ShadowCounts,
    /// `agreed / compared` (absent before the first comparison).
    #[serde(skip_serializing_if = "Option::is_none")]
    agreement_rate: Option<f64>,
    /// The latest differing cases (newest first, at most 100).
    differences: Vec<ShadowResult>,
}

async fn shadow_report(
    state: &AppState,
    caller: &Caller,
    candidate: Option<&ShadowCandidate>,
    active: bool,
) -> Result<ShadowResponse, ApiError> {
    let Some(c) = candidate else {
        return Ok(ShadowResponse {
            active: false,
            candidate: None,
            counts: ShadowCounts::default(),
            agreement_rate: None,
            differences: Vec::new(),
        });
    };
    let team = (caller.role != Role::Admin).then(|| caller.team.clone());
    let (counts, differences) = state
        .policies
        .store()
        .shadow_report(&c.id, team, 100)
        .await?;
    #[allow(clippy::cast_precision_loss)]
    let agreement_rate =
        (counts.compared > 0).then(|| counts.agreed as f64 / counts.compared as f64);
    Ok(ShadowResponse {
        active,
        candidate: Some(c.view()),
        counts,
        agreement_rate,
        differences,
    })
}

/// `GET /v1/policy/shadow`.
pub async fn get_shadow(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ShadowResponse>, ApiError> {
    let c = state.policies.shadow();
    Ok(Json(
        shadow_report(&state, &caller, c.as_deref(), true).await?,
    ))
}

/// `PUT /v1/policy/shadow`: start shadowing a candidate global chain.
pub async fn put_shadow(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(put): JsonBody<PutShadow>,
) -> Result<Json<ShadowResponse>, ApiError> {
    caller.require_admin()?;
    if put.comment.chars().count() > super::policy::MAX_COMMENT_CHARS {
        return Err(ApiError::bad(
            "invalid-policy",
            "comment",
            format!("at most {} characters", super::policy::MAX_COMMENT_CHARS),
        ));
    }
    let m = &state.policies;
    let links = m.resolve(&Scope::Global, put.plugins).await?;
    let chain = m.build(&links).await?;
    let started_at_ms = now_ms();
    let candidate = ShadowCandidate {
        id: format!("shadow-{started_at_ms}-{}", crate::store::new_job_id()),
        links,
        chain,
        author: who(&caller),
        comment: put.comment,
        started_at_ms,
    };
    let report = shadow_report(&state, &caller, Some(&candidate), true).await?;
    m.set_shadow(candidate);
    Ok(Json(report))
}

/// `DELETE /v1/policy/shadow`: stop shadowing; answers the final report.
pub async fn delete_shadow(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ShadowResponse>, ApiError> {
    caller.require_admin()?;
    let c = state
        .policies
        .clear_shadow()
        .ok_or_else(|| PolicyAdminError::NotFound("no shadow candidate is running".into()))?;
    Ok(Json(shadow_report(&state, &caller, Some(&c), false).await?))
}
