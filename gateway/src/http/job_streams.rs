//! `GET /v1/jobs/{id}/watch`: a job's changes as server-sent events, from
//! [`crate::jobs::Jobs::watch`] — `snapshot` first (the job, its queue standing, its
//! pending reason), then `state`, `standing` and `pending` events as they happen; the
//! stream ends after the terminal state. `GET /v1/jobs/watch[?team=]`: every change of
//! the caller's team's jobs (admins: every team's, or one), `resync` when the watcher
//! fell behind. Changes carry the feed's sequence number as their event id: a client
//! reconnecting with `Last-Event-ID` first gets the changes it missed (or `resync` when
//! they are no longer kept). Comments keep idle connections alive. Streams end when the
//! process begins to stop, so it can drain; clients reconnect to another replica.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};

use super::error::ApiError;
use super::query::Query;
use crate::auth::Caller;
use crate::jobs::WatchEvent;
use crate::state::AppState;

/// `GET /v1/jobs/{id}/watch`.
pub async fn watch(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let job = state.jobs.visible(&caller, &id).await?;
    Ok(sse(state.jobs.watch(job), state.shutdown.begun()))
}

/// Query of `GET /v1/jobs/watch`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamQuery {
    pub(super) team: Option<String>,
}

/// `GET /v1/jobs/watch`.
pub async fn watch_jobs(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<TeamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let team = super::jobs::team_filter(&caller, q.team)?;
    Ok(sse(
        state.jobs.watch_team(team, last_event_id(&headers)),
        state.shutdown.begun(),
    ))
}

/// The `Last-Event-ID` a reconnecting `EventSource` sends (an id this feed issued; any
/// other value counts as none).
pub(super) fn last_event_id(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Job watch events as server-sent events (also the console's live feeds), ending when
/// `until` resolves (the process is stopping: [`crate::shutdown`]).
pub(super) fn sse(
    events: impl Stream<Item = WatchEvent> + Send + 'static,
    until: impl std::future::Future<Output = ()> + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = events.take_until(until).map(|e| {
        let mut event = Event::default().event(e.name());
        if let Some(id) = e.id() {
            event = event.id(id.to_string());
        }
        Ok(match event.json_data(&e) {
            Ok(event) => event,
            Err(err) => {
                tracing::error!("serializing a watch event: {err}");
                Event::default().comment("unserializable event")
            }
        })
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
