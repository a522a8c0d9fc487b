//! The console's live feeds, for the logged-in viewer (a browser's `EventSource` cannot
//! send a bearer token, so these authenticate by the session cookie, which
//! `SameSite=Strict` keeps to same-origin pages): `GET /console/live/jobs[?team=]`,
//! every change of the jobs the viewer may list (the jobs API's team filter), and `GET
//! /console/live/jobs/{id}`, one visible job's changes until it ends. The same streams
//! and the same server-sent-event encoding as `GET /v1/jobs/watch` and `GET
//! /v1/jobs/{id}/watch` (`http::job_streams`): changes, not snapshots, resumable with `Last-Event-ID` (the
//! browser sends it when it reconnects by itself). `GET /console/live/playgrounds/{id}`:
//! a `state` event whenever one visible playground's state, server phase, pending
//! reason or reclaim changes (the gateway re-reads it every
//! [`PLAYGROUND_WATCH_EVERY`]; the browser does not poll), ending with `terminal: true`
//! once it ended.

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use futures::Stream;

use super::session::Viewer;
use super::{Console, PageError};
use crate::http::job_streams::{TeamQuery, last_event_id, sse};
use crate::http::jobs::team_filter;

/// How often the playground feed re-reads its playground.
pub const PLAYGROUND_WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /console/live/playgrounds/{id}`.
pub async fn playground(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let pgs = console.app.playgrounds.clone();
    pgs.get(&viewer.caller, &id).await?;
    let caller = viewer.caller;
    let changes = futures::stream::unfold(
        (pgs, caller, id, None::<String>, false),
        |(pgs, caller, id, last, done)| async move {
            if done {
                return None;
            }
            loop {
                let view = match pgs.get(&caller, &id).await {
                    Ok(v) => v,
                    // Gone (retention) or not visible any more: the feed ends.
                    Err(_) => return None,
                };
                let terminal = view.record.state.is_terminal();
                let seen = serde_json::json!({"state": view.record.state.as_str(),
                    "pod": view.pod, "reclaim": view.reclaim, "reason": view.record.reason});
                let fingerprint = seen.to_string();
                if last.as_deref() != Some(fingerprint.as_str()) {
                    let data = serde_json::json!({"playground": id, "to": view.record.state.as_str(), "terminal": terminal});
                    let event = Event::default()
                        .event("state")
                        .json_data(&data)
                        .unwrap_or_else(|_| Event::default().comment("unserializable"));
                    return Some((Ok(event), (pgs, caller, id, Some(fingerprint), terminal)));
                }
                tokio::time::sleep(PLAYGROUND_WATCH_EVERY).await;
            }
        },
    );
    let until = console.app.shutdown.begun();
    Ok(
        Sse::new(futures::StreamExt::take_until(changes, until)).keep_alive(
            axum::response::sse::KeepAlive::new().interval(std::time::Duration::from_secs(15)),
        ),
    )
}

/// `GET /console/live/jobs`.
pub async fn jobs(
    State(console): State<Console>,
    viewer: Viewer,
    Query(q): Query<TeamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let team = team_filter(&viewer.caller, q.team)?;
    let app = &console.app;
    Ok(sse(
        app.jobs.watch_team(team, last_event_id(&headers)),
        app.shutdown.begun(),
    ))
}

/// `GET /console/live/jobs/{id}`.
pub async fn job(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let job = console.app.jobs.visible(&viewer.caller, &id).await?;
    Ok(sse(
        console.app.jobs.watch(job),
        console.app.shutdown.begun(),
    ))
}
