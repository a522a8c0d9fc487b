//! `POST /v1/admission/review`: the decision the active policy would make now for a
//! JobSpec (JSON, or YAML by `Content-Type`), with the per-plugin trace, plugin digests
//! and policy versions, and the spec's bytes as a capsule carries them. Changes nothing.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use forge_policy_host::ChainOutcome;
use serde::Serialize;

use super::body::DocumentBytes;
use super::error::ApiError;
use crate::admission::Path;
use crate::auth::Caller;
use crate::jobspec::{self, SpecFormat};
use crate::state::AppState;
use crate::telemetry::job_trace;
use tracing::Instrument as _;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewResponse {
    /// Version of the global chain that decided.
    policy_version: u64,
    /// Version of the caller's team chain, if the team has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    team_policy_version: Option<u64>,
    /// Both, as recorded with decisions (`global@3+team@1`).
    policy: String,
    #[serde(flatten)]
    outcome: ChainOutcome,
    /// The spec exactly as a capsule packed for it carries it
    /// (`capsule/.forge/jobspec.json`): a client packing its own capsule uses these
    /// bytes, so its digest is the one the gateway would compute.
    capsule_spec: String,
}

/// `POST /v1/admission/review`.
pub async fn review(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    DocumentBytes(body): DocumentBytes,
) -> Result<Json<ReviewResponse>, ApiError> {
    let format = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or(SpecFormat::Json, SpecFormat::from_content_type);
    let spec = jobspec::parse_and_validate(&body, format, &state.config, &caller.team)?;
    let capsule_spec = String::from_utf8(jobspec::capsule_bytes(&spec))
        .map_err(|e| ApiError::internal("capsule spec", e))?;
    let admission = &state.jobs.admission;
    let span = job_trace::review_span(&caller.team, &headers);
    let evaluated = async {
        let request = admission
            .live_request(job_trace::REVIEW_ID, &caller.team, &spec)
            .await
            .map_err(crate::jobs::JobError::from)?;
        let evaluated = admission
            .evaluate(&caller.team, request, Path::Review)
            .await;
        let plugins = match &evaluated {
            Ok(e) => &e.outcome.trace,
            Err(e) => e.chain_trace(),
        };
        job_trace::plugin_spans(&span, job_trace::REVIEW_ID, &caller.team, plugins);
        Ok::<_, ApiError>(evaluated?)
    }
    .instrument(span.clone())
    .await?;
    Ok(Json(ReviewResponse {
        policy_version: evaluated.global_version,
        team_policy_version: evaluated.team_version,
        policy: evaluated.label,
        outcome: evaluated.outcome,
        capsule_spec,
    }))
}
