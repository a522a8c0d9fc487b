//! `GET /console/jobs?state=&team=&cursor=`: the jobs the viewer may see (members their
//! team's, admins every team's or one), newest first, paginated on the server (the
//! store's cursor), filtered by state; new jobs and state changes arrive live from the
//! team's job feed, and the list then re-reads the job's row (`?part=row` of the job's
//! page) so its standing and its drawn life stay current.

use axum::extract::{Query, State};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::draw::job_gantt;
use super::layout::{self, Nav, state_badge};
use super::present;
use super::session::Viewer;
use super::{Console, PageError};
use crate::auth::Role;
use crate::domain::JobState;
use crate::http::ApiError;
use crate::http::jobs::{list_page, team_filter};
use crate::jobs::QueueEntry;
use crate::state::AppState;
use crate::store::{HistoryEntry, JobRecord, ListQuery, now_ms};

/// Jobs per page.
pub const PAGE: u32 = 50;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct ListParams {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
}

fn blank(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

/// Each job's state history in one store read (empty when it cannot be read: the
/// rows still show).
async fn histories(app: &AppState, jobs: &[JobRecord]) -> Vec<Vec<HistoryEntry>> {
    let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let mut read = app.jobs.store().histories(ids).await.unwrap_or_else(|e| {
        tracing::warn!("console: reading the jobs' histories: {e}");
        Default::default()
    });
    jobs.iter()
        .map(|j| read.remove(&j.id).unwrap_or_default())
        .collect()
}

/// A job's row: its name and id, team, state, standing in the queue, submission and
/// its life drawn.
fn row(
    job: &JobRecord,
    history: &[HistoryEntry],
    standing: Option<&QueueEntry>,
    now: i64,
) -> Markup {
    html! {
        tr id={ "job-" (job.id) } {
            td { a href={ "/console/jobs/" (job.id) } { (job.name) } br; small { (job.id) } }
            td.team { (job.team) }
            td { (state_badge(job.state)) }
            td.standing {
                @if let Some(e) = standing {
                    "#" (e.position) " on " (present::series(&e.series)) ": " (present::message(&e.reason))
                }
            }
            td.when { (present::when(job.created_at_ms)) }
            td.life { (job_gantt::small(history, now)) }
        }
    }
}

/// `GET /console/jobs/{id}?part=row`: the job's row as the list draws it now (the
/// list's script re-reads it when the job's feed reports a change).
pub async fn row_part(app: &AppState, job: &JobRecord) -> Markup {
    let history = histories(app, std::slice::from_ref(job)).await;
    let standing = app.jobs.queue().entry(&job.id);
    row(
        job,
        history.first().map_or(&[][..], Vec::as_slice),
        standing.as_ref(),
        now_ms(),
    )
}

/// `GET /console/jobs`.
pub async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    Query(q): Query<ListParams>,
) -> Result<Response, PageError> {
    let state_filter = blank(q.state)
        .map(|s| s.parse::<JobState>())
        .transpose()
        .map_err(|e| ApiError::bad("invalid-query", "state", e.to_string()))?;
    let asked_team = blank(q.team);
    let team = team_filter(&viewer.caller, asked_team.clone())?;
    let app = &console.app;
    let page = list_page(
        app,
        ListQuery {
            team: team.clone(),
            state: state_filter,
            limit: PAGE,
            after: blank(q.cursor),
        },
    )
    .await?;
    let board = app.jobs.queue().snapshot();
    let histories = histories(app, &page.jobs).await;
    let now = now_ms();
    let feed = match &team {
        Some(t) if viewer.caller.role == Role::Admin => format!("/console/live/jobs?team={t}"),
        _ => "/console/live/jobs".to_string(),
    };
    let chosen = state_filter.map(JobState::as_str).unwrap_or("");
    let next = page.next.map(|c| {
        let mut url = url::Url::parse("http://x/console/jobs").expect("static URL");
        url.query_pairs_mut().append_pair("cursor", &c);
        if let Some(s) = state_filter {
            url.query_pairs_mut().append_pair("state", s.as_str());
        }
        if let Some(t) = &asked_team {
            url.query_pairs_mut().append_pair("team", t);
        }
        format!("{}?{}", url.path(), url.query().unwrap_or(""))
    });
    let body = html! {
        h1 { "Jobs" }
        form method="get" action="/console/jobs" {
            label { "State "
                select name="state" id="state-filter" {
                    option value="" selected[chosen.is_empty()] { "any" }
                    @for s in JobState::ALL {
                        option value=(s.as_str()) selected[chosen == s.as_str()] { (s.as_str()) }
                    }
                }
            }
            @if viewer.caller.role == Role::Admin {
                label { "Team " input type="text" name="team" value=(asked_team.clone().unwrap_or_default()) placeholder="every team"; }
            }
            button type="submit" { "Filter" }
        }
        div.scroll {
            table #jobs data-live=(feed) data-filter=(chosen) {
                caption { "Newest first" }
                thead { tr { th { "Job" } th { "Team" } th { "State" } th { "Queue" } th { "Submitted" } th { "Its life" } } }
                tbody {
                    @for (job, history) in page.jobs.iter().zip(&histories) {
                        (row(job, history, board.get(&job.id), now))
                    }
                }
            }
        }
        @if page.jobs.is_empty() { p #no-jobs { "No jobs to show." } }
        @if let Some(next) = next { p { a href=(next) rel="next" { "Older jobs" } } }
    };
    Ok(layout::page("Jobs", Some(&viewer), Nav::Jobs, body))
}
