//! The console's pages at scale (issue 43): with the dispatch bench's 10 000 queued
//! jobs on 10 000 nodes in place, an admin's session renders the jobs list, the
//! capacity page (every drawing: the series bar, the node strip, the queues) and a
//! queued job's page, through the real router. Each page's HTML plus the stylesheet
//! and the script must stay ≤ 100 KB, and render in ≤ 300 ms server-side.
//!
//! Prints `BENCH console key=value…` for `tests/bench/run.sh`.

use std::time::Instant;

use axum::body::Body;
use axum::http::{Request, header};
use forge_gateway::http::console::layout::{CSS, JS};
use tower::ServiceExt;

/// Renders per page.
const ROUNDS: usize = 20;

/// Logs in with `token`; the session cookie.
async fn log_in(app: &axum::Router, token: &str) -> anyhow::Result<String> {
    let login = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("token={token}")))?;
    let response = app.clone().oneshot(login).await?;
    response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("forge_session="))
        .and_then(|c| c.split(';').next())
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no session cookie ({})", response.status()))
}

/// One page `ROUNDS` times: (its bytes, p50 ms, max ms).
async fn page(app: &axum::Router, cookie: &str, path: &str) -> anyhow::Result<(usize, f64, f64)> {
    let mut times = Vec::with_capacity(ROUNDS);
    let mut bytes = 0;
    for _ in 0..ROUNDS {
        let request = Request::get(path)
            .header(header::COOKIE, cookie)
            .body(Body::empty())?;
        let t = Instant::now();
        let response = app.clone().oneshot(request).await?;
        anyhow::ensure!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        bytes = body.len();
    }
    times.sort_by(f64::total_cmp);
    Ok((bytes, times[ROUNDS / 2], times[ROUNDS - 1]))
}

/// Measures the pages and prints their line.
pub async fn measure(
    state: forge_gateway::AppState,
    token: &str,
    queued_job: &str,
) -> anyhow::Result<()> {
    let app = forge_gateway::router(state);
    let cookie = log_in(&app, token).await?;
    let assets = CSS.len() + JS.len();
    let mut line = format!("BENCH console assets_kb={:.1}", assets as f64 / 1024.0);
    let mut worst_kb: f64 = 0.0;
    let mut worst_ms: f64 = 0.0;
    for (key, path) in [
        ("jobs", "/console/jobs".to_string()),
        ("capacity", "/console/capacity".to_string()),
        ("job", format!("/console/jobs/{queued_job}")),
    ] {
        let (bytes, p50, max) = page(&app, &cookie, &path).await?;
        let kb = (bytes + assets) as f64 / 1024.0;
        worst_kb = worst_kb.max(kb);
        worst_ms = worst_ms.max(max);
        line.push_str(&format!(
            " {key}_kb={kb:.1} {key}_p50_ms={p50:.1} {key}_max_ms={max:.1}"
        ));
    }
    println!("{line} worst_kb={worst_kb:.1} worst_ms={worst_ms:.1}");
    Ok(())
}
