//! `POST /v1/jobs/{id}/checkpoints {"step": N}`: a running job acknowledges a
//! checkpoint it can resume from (issue 38, the job's side of preemption; the contract
//! for job authors is in the README).
//!
//! Authorized by the job's own token (`FORGE_JOB_TOKEN`, [`crate::jobs::job_access`]),
//! not a team's: it is good for this job only and only while the job holds GPUs.
//! Answers `201` with the recorded checkpoint, `200` with the record when the same step
//! is acknowledged again; `401` without a job token, `403 token-for-another-job`,
//! `404 not-found`, `409 job-not-running` (queued: no process yet), `410 job-ended`,
//! `409 checkpoint-stale` for a step below the last one acknowledged, and `400
//! invalid-checkpoint` naming the field of a body that is not `{"step": <0..2^63>}`.

use axum::Json;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::body::{JsonBody, JsonDocument};
use super::error::ApiError;
use crate::answer::{Answer, Answers};
use crate::auth::bearer_token;
use crate::domain::JobState;
use crate::jobs::JobError;
use crate::state::AppState;
use crate::store::checkpoints::MAX_STEP;
use crate::store::{Checkpoint, CheckpointOutcome, now_ms};

/// Why an acknowledgement was refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// No job token (or not one of this installation's).
    #[error("this route takes the job's own token (FORGE_JOB_TOKEN) as its bearer token")]
    NoJobToken,
    /// A valid token of another job.
    #[error("the token is job {token_job}'s, not job {job}'s")]
    AnotherJob {
        /// The job of the path.
        job: String,
        /// The job the token was made for.
        token_job: String,
    },
    /// The job holds no GPUs yet: nothing runs that could have checkpointed.
    #[error("job {id} is {state}: only a dispatched, starting or running job checkpoints")]
    NotRunning {
        /// The job.
        id: String,
        /// Its state.
        state: JobState,
    },
    /// The job ended: its token authorizes nothing any more.
    #[error("job {id} is {state}: its token ended with it")]
    Ended {
        /// The job.
        id: String,
        /// Its (terminal) state.
        state: JobState,
    },
    /// A step below the last one acknowledged.
    #[error("step {step} is below the last acknowledged checkpoint, step {}", last.step)]
    Stale {
        /// The refused step.
        step: u64,
        /// The checkpoint kept.
        last: Checkpoint,
    },
}

impl Answers for CheckpointError {
    fn answer(&self) -> Answer {
        let message = self.to_string();
        match self {
            CheckpointError::NoJobToken => {
                Answer::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
                    .challenge("Bearer error=\"invalid_token\"")
            }
            CheckpointError::AnotherJob { .. } => {
                Answer::new(StatusCode::FORBIDDEN, "token-for-another-job", message)
            }
            CheckpointError::NotRunning { state, .. } => {
                Answer::new(StatusCode::CONFLICT, "job-not-running", message)
                    .details(json!({ "state": state }))
            }
            CheckpointError::Ended { state, .. } => {
                Answer::new(StatusCode::GONE, "job-ended", message)
                    .details(json!({ "state": state }))
            }
            CheckpointError::Stale { last, .. } => {
                Answer::new(StatusCode::CONFLICT, "checkpoint-stale", message)
                    .details(json!({ "field": "step", "lastCheckpoint": last }))
            }
        }
    }
}

/// The job a request's bearer token was made for (checked against this installation's
/// key, not yet against the job's state).
#[derive(Debug)]
pub struct JobToken(String);

impl FromRequestParts<AppState> for JobToken {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let job = match (state.jobs.job_access(), bearer_token(header)) {
            (Some(access), Ok(token)) => access.job_of(token),
            _ => None,
        };
        job.map(|j| JobToken(j.to_string()))
            .ok_or_else(|| CheckpointError::NoJobToken.into())
    }
}

/// The request body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Acknowledgement {
    /// The step the job can resume from.
    pub step: u64,
}

impl JsonDocument for Acknowledgement {
    const INVALID: &'static str = "invalid-checkpoint";
    const WHAT: &'static str = "a checkpoint acknowledgement ({\"step\": N})";
}

/// `POST /v1/jobs/{id}/checkpoints`.
pub async fn acknowledge(
    State(state): State<AppState>,
    JobToken(token_job): JobToken,
    Path(id): Path<String>,
    JsonBody(ack): JsonBody<Acknowledgement>,
) -> Result<Response, ApiError> {
    if token_job != id {
        return Err(CheckpointError::AnotherJob { job: id, token_job }.into());
    }
    if ack.step > MAX_STEP {
        return Err(ApiError::bad(
            "invalid-checkpoint",
            "step",
            format!("step must be at most {MAX_STEP}"),
        ));
    }
    let outcome = state
        .jobs
        .store()
        .record_checkpoint(&id, ack.step, now_ms())
        .await
        .map_err(JobError::from)?;
    let (status, recorded) = match outcome {
        CheckpointOutcome::Recorded(c) => {
            tracing::info!(job = %id, step = c.step, "checkpoint acknowledged");
            (StatusCode::CREATED, c)
        }
        CheckpointOutcome::Repeated(c) => (StatusCode::OK, c),
        CheckpointOutcome::Stale(last) => {
            return Err(CheckpointError::Stale {
                step: ack.step,
                last,
            }
            .into());
        }
        CheckpointOutcome::NotRunning(state) if state.is_terminal() => {
            return Err(CheckpointError::Ended { id, state }.into());
        }
        CheckpointOutcome::NotRunning(state) => {
            return Err(CheckpointError::NotRunning { id, state }.into());
        }
        CheckpointOutcome::NotFound => return Err(JobError::NotFound(id).into()),
    };
    Ok((status, Json(recorded)).into_response())
}
