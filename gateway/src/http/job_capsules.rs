//! `GET /v1/job-capsules/{job}/{sha256}.zip?sig=` — a job's capsule link (see
//! [`crate::jobs::capsule_links`]): a Ray pod's (or the init container's) fetch of its
//! job's code. Authorized by the link's signature, not a token — pods hold no Forge
//! token — so it is mounted beside the API table (whose routes all require one) and
//! answers only for a job that has not ended: `302` to a fresh object-store URL of
//! [`REDIRECT_TTL`], `403 bad-signature`, `404 not-found`, `410 job-ended`.

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::error::ApiError;
use crate::domain::Digest;
use crate::jobs::JobError;
use crate::jobs::capsule_links::ROUTE;
use crate::state::AppState;

/// How long the object-store URL a link redirects to is valid (a fetch starts at once).
pub const REDIRECT_TTL: Duration = Duration::from_secs(900);

#[derive(Debug, Deserialize)]
pub struct LinkQuery {
    #[serde(default)]
    sig: String,
}

/// The route, when the gateway hands out capsule links.
pub fn routes(state: AppState) -> Router {
    Router::new()
        .route(ROUTE, axum::routing::get(fetch))
        .with_state(state)
}

/// `GET /v1/job-capsules/{job}/{file}`.
pub async fn fetch(
    State(state): State<AppState>,
    Path((job_id, file)): Path<(String, String)>,
    Query(q): Query<LinkQuery>,
) -> Result<Response, ApiError> {
    let links = state
        .jobs
        .capsule_links()
        .cloned()
        .ok_or_else(|| JobError::NotFound(job_id.clone()))?;
    let digest = file
        .strip_suffix(".zip")
        .and_then(|d| Digest::parse(d).ok())
        .ok_or(JobError::BadCapsuleLink)?;
    if !links.verify(&job_id, &digest, &q.sig) {
        return Err(JobError::BadCapsuleLink.into());
    }
    // Signed by this installation for this job and capsule: the job may still be gone
    // (retention) or over.
    let job = state
        .jobs
        .store()
        .get(&job_id)
        .await?
        .filter(|j| j.capsule_sha256.as_ref() == Some(&digest))
        .ok_or_else(|| JobError::NotFound(job_id.clone()))?;
    if job.state.is_terminal() {
        return Err(JobError::CapsuleLinkEnded {
            id: job.id,
            state: job.state,
        }
        .into());
    }
    let url = state
        .jobs
        .objects
        .get_url(digest.as_str(), REDIRECT_TTL)
        .await
        .map_err(JobError::from)?;
    Ok((
        StatusCode::FOUND,
        [
            (header::LOCATION, url.to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
    )
        .into_response())
}
