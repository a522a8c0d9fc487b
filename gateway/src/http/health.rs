//! Probes and scrapes, open without a token and revealing no job data: `/healthz`,
//! `/readyz` and `/metrics` (Prometheus text format). Without a token `/metrics` is
//! the open view (no team or plugin names); with `FORGE_METRICS_TOKEN` or an admin
//! token it adds the per-plugin series. A token that is neither is 401, so a
//! misconfigured scraper fails loudly instead of silently seeing less.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::IntoResponse;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::auth::{AuthError, Role};
use crate::state::AppState;

/// `GET /healthz`.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`.
pub async fn readyz() -> &'static str {
    "ready"
}

/// `GET /metrics`.
pub async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let detailed = detailed_scrape(&state, &headers)?;
    let text = state.metrics.render(
        &state.jobs.queue().depth_by_series(),
        state.policies.current().global().version,
        detailed,
    );
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    ))
}

/// Whether the scraper may see the detailed view: no `Authorization` → no; the
/// metrics token or an admin token → yes; a member token → no; anything else → 401.
fn detailed_scrape(state: &AppState, headers: &HeaderMap) -> Result<bool, ApiError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(false);
    };
    let value = value.to_str().unwrap_or("");
    if let (Some(expected), Some(token)) = (
        &state.config.gateway.metrics_token,
        value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim()),
    ) {
        let presented = Sha256::digest(token.as_bytes());
        let wanted = Sha256::digest(expected.expose().as_bytes());
        if bool::from(presented.ct_eq(&wanted)) {
            return Ok(true);
        }
    }
    match state.tokens.authenticate(Some(value)) {
        Ok(caller) => Ok(caller.role == Role::Admin),
        Err(AuthError::Missing) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
