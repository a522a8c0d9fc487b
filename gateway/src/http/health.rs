//! Probes and scrapes, open without a token and revealing no job data: `/livez`
//! (`/healthz` is its alias), `/readyz` and `/metrics` (Prometheus text format).
//!
//! - `/livez`: the process serves HTTP. Nothing else — a store or API-server outage
//!   must not make Kubernetes restart a gateway that would come back to the same
//!   outage.
//! - `/readyz`: 200 when the store answers (a round trip, bounded), the Node/Pod
//!   caches have synced and the global policy chain is active; 503 otherwise. The JSON
//!   body names each check and which failed, and says the replica's role (leader or
//!   follower, with its epoch or the leader it follows).
//! - `/metrics`: without a token the open view (no team or plugin names); with
//!   `FORGE_METRICS_TOKEN` or an admin token it adds the per-plugin series. A token
//!   that is neither is 401, so a misconfigured scraper fails loudly instead of
//!   silently seeing less.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::auth::AuthError;
use crate::leader::Role;
use crate::state::AppState;

/// Longest the readiness probe waits for the store.
const STORE_PING: Duration = Duration::from_secs(2);

/// `GET /livez` (and `/healthz`).
pub async fn livez() -> &'static str {
    "ok"
}

/// One readiness check.
#[derive(Debug, Serialize)]
pub struct Check {
    ok: bool,
    /// What was found (the failure, for a failed check).
    detail: String,
}

impl Check {
    fn new(ok: bool, detail: impl Into<String>) -> Self {
        Check {
            ok,
            detail: detail.into(),
        }
    }
}

/// Every readiness check.
#[derive(Debug, Serialize)]
pub struct Checks {
    store: Check,
    caches: Check,
    policy: Check,
}

/// The `/readyz` body.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Readiness {
    ready: bool,
    /// The first failed check, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    failing: Option<&'static str>,
    #[serde(flatten)]
    role: Role,
    replica: String,
    checks: Checks,
}

async fn store_check(state: &AppState) -> Check {
    let backend = state.database.backend.as_str();
    match tokio::time::timeout(STORE_PING, state.database.coord.ping()).await {
        Ok(Ok(())) => Check::new(true, format!("{backend} answers")),
        Ok(Err(e)) => {
            tracing::warn!("readiness: the store failed: {e}");
            Check::new(
                false,
                format!("{backend} failed the query (see the gateway log)"),
            )
        }
        Err(_) => Check::new(
            false,
            format!("{backend} did not answer within {STORE_PING:?}"),
        ),
    }
}

/// `GET /readyz`.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let store = store_check(&state).await;
    let mut caches = if state.capacity().is_synced() {
        Check::new(true, "Node and Pod caches synced")
    } else {
        Check::new(false, "Node and Pod caches still syncing")
    };
    let unavailable = state.capacity().unavailable();
    if !unavailable.is_empty() {
        // Not a readiness failure: the other fleets still take jobs.
        caches.detail.push_str(&format!(
            "; fleets unavailable (their API servers do not answer; nothing is placed there): {}",
            unavailable.join(", ")
        ));
    }
    let policy = {
        let active = state.policies.current();
        let unavailable = active.unavailable_scopes();
        let mut detail = format!("global chain version {} active", active.global().version);
        if !unavailable.is_empty() {
            detail.push_str(&format!(
                "; unavailable (their admissions fail closed): {}",
                unavailable.join(", ")
            ));
        }
        Check::new(true, detail)
    };
    let failing = [
        ("store", store.ok),
        ("caches", caches.ok),
        ("policy", policy.ok),
    ]
    .into_iter()
    .find_map(|(name, ok)| (!ok).then_some(name));
    let body = Readiness {
        ready: failing.is_none(),
        failing,
        role: state.leadership.role(),
        replica: state.leadership.replica().to_string(),
        checks: Checks {
            store,
            caches,
            policy,
        },
    };
    let status = if body.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body))
}

/// `GET /metrics`.
pub async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let detailed = detailed_scrape(&state, &headers)?;
    let capacity = state.capacity().snapshot();
    let queue = state.jobs.queue();
    let text = state.metrics.render(
        &crate::metrics::Scrape {
            queue_depth: queue.depth_by_series(),
            team_depth: queue.depth_by_team(),
            capacity: &capacity.series,
            fleets: &capacity.fleets,
            policy_version: state.policies.current().global().version,
        },
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
        Ok(caller) => Ok(caller.role == crate::auth::Role::Admin),
        Err(AuthError::Missing) => Ok(false),
        Err(e) => Err(e.into()),
    }
}
