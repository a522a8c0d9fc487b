//! Probes and scrapes, open without a token and revealing no job data: `/healthz`,
//! `/readyz` and `/metrics` (Prometheus text format).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

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
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = state.metrics.render(
        &state.jobs.queue().depth_by_series(),
        state.policies.current().global().version,
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}
