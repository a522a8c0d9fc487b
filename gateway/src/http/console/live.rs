//! The console's live feeds, for the logged-in viewer (a browser's `EventSource` cannot
//! send a bearer token, so these authenticate by the session cookie, which
//! `SameSite=Strict` keeps to same-origin pages): `GET /console/live/jobs[?team=]`,
//! every change of the jobs the viewer may list (the jobs API's team filter), and `GET
//! /console/live/jobs/{id}`, one visible job's changes until it ends. The same streams
//! and the same server-sent-event encoding as `GET /v1/jobs/watch` and `GET
//! /v1/jobs/{id}/watch` (`http::watch`): changes, not snapshots, resumable with `Last-Event-ID` (the
//! browser sends it when it reconnects by itself).

use std::convert::Infallible;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, Sse};
use futures::Stream;

use super::session::Viewer;
use super::{Console, PageError};
use crate::http::jobs::team_filter;
use crate::http::watch::{TeamQuery, last_event_id, sse};

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
