//! `GET /console/capacity`: per GPU series the total, in-use, blocked and free GPUs
//! and the largest free block, drawn as a stacked bar (the numbers also in a table)
//! from the same live capacity snapshot the scheduler and the policies use (`GET
//! /v1/capacity`), and for admins each series' nodes as a strip; each series' queue
//! drawn as GPUs (the viewer's jobs apart, other teams' only in aggregate for
//! members); the viewer's team usage (running and queued GPUs per series, the
//! dispatcher's ledger) drawn against its fair share and its quota (as the
//! `team-quota` policy in force states it: `quota.rs`), then each team's share of each
//! series against its fair share (`GET /v1/fair-share`: admins see every team, a
//! member their own); for admins, each series' last day (queue wait p50/p99 and
//! GPUs in use per hour, from the store: `jobs/last_day.rs`). Every job change on
//! the viewer's feed re-reads the part (`?part=table`): capacity moves when jobs
//! start and end.

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use std::collections::BTreeMap;

use forge_policy_host::model::{ClusterView, SeriesUsage};

use super::Console;
use super::day_cache;
use super::draw::capacity_bar::{self, Holders};
use super::draw::day_chart;
use super::draw::node_strip;
use super::draw::queue_bar::{self, Queued};
use super::layout::{self, Nav};
use super::present;
use super::quota;
use super::session::Viewer;
use crate::auth::Role;
use crate::cluster::nodes::NodeCell;
use crate::domain::JobState;
use crate::http::fair_share::{FairShareResponse, shares_for};
use crate::http::jobs::list_page;
use crate::jobs::queue::QueueEntry;
use crate::store::{ListQuery, MAX_PAGE, now_ms};

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct PartParams {
    #[serde(default)]
    part: Option<String>,
}

/// Each series' teams against their fair share.
fn fair_shares(shares: Option<&FairShareResponse>) -> Markup {
    let Some(shares) = shares else {
        return html! { p #fair-share { "The usage ledger cannot be read right now." } };
    };
    let rows = shares
        .series
        .iter()
        .flat_map(|s| s.teams.iter().map(move |t| (s, t)));
    html! {
        div.scroll { table #fair-share {
            caption { "Fair share (decayed with a half-life of " (shares.half_life_seconds) " s; weights of global policy version " (shares.policy_version) ")" }
            thead { tr {
                th scope="col" { "Series" } th scope="col" { "Team" } th scope="col" { "Weight" }
                th scope="col" { "Used (GPUs on average)" } th scope="col" { "Holds" } th scope="col" { "Queued" }
                th scope="col" { "Share" } th scope="col" { "Fair share" }
            } }
            tbody {
                @for (s, t) in rows {
                    tr data-series=(s.series) data-team=(t.team) {
                        th scope="row" { (present::series(&s.series)) } td { (t.team) } td { (t.weight) }
                        td { (format!("{:.1}", t.used_gpus)) } td { (t.allocated_gpus) } td { (t.queued_gpus) }
                        td.share { (format!("{:.1}", t.share_gpus)) } td { (format!("{:.1}", t.fair_share_gpus)) }
                    }
                }
            }
        } }
    }
}

/// Each series drawn as a stacked bar (and, for admins, its nodes as a strip).
fn drawn_capacity(console: &Console, viewer: &Viewer, view: &ClusterView) -> Markup {
    let ledger = console.app.jobs.admission.usage().ledger();
    let running = |team: Option<&str>, series: &str| -> u32 {
        ledger
            .iter()
            .filter(|(t, _)| team.is_none_or(|team| team == t.as_str()))
            .filter_map(|(_, by_series)| by_series.get(series).map(|(r, _)| *r))
            .sum()
    };
    let admin = viewer.caller.role == Role::Admin;
    let cells = if admin {
        console.app.capacity().node_cells()
    } else {
        Vec::new()
    };
    html! {
        div #capacity-drawn {
            @for s in &view.series {
                (capacity_bar::series(s, Holders {
                    team_running: running(Some(&viewer.caller.team), &s.series),
                    all_running: running(None, &s.series),
                }))
                @if admin {
                    @let of_series: Vec<&NodeCell> = cells.iter().filter(|c| c.series == s.series).collect();
                    (node_strip::series(&s.series, &of_series))
                }
            }
        }
    }
}

/// For admins: each series' last day, queue waits and GPUs in use per hour.
async fn drawn_day(console: &Console, view: &ClusterView) -> Markup {
    let (day, cut) = match console.day.get(&console.app).await {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("console: reading the last day: {e}");
            return html! { p #last-day { "The last day cannot be read right now." } };
        }
    };
    let now = now_ms();
    html! {
        section #last-day aria-labelledby="last-day-title" {
            h2 #last-day-title { "The last " (day_cache::HOURS) " hours" }
            @if cut { p.warning { "Drawn from the newest " (day_cache::MAX_JOBS) " jobs only." } }
            @if day.is_empty() { p.empty { "No job held or waited for GPUs in the last day." } }
            @for (series, hours) in day.iter() {
                @let gpus = view.series.iter().find(|s| &s.series == series).map_or(0, |s| s.total);
                (day_chart::waits(present::series(series), hours))
                (day_chart::utilisation(present::series(series), hours, gpus, now))
            }
        }
    }
}

/// Each series' queue drawn as a bar of GPUs: the viewer's jobs apart, the others in
/// runs (per team for admins, anonymous for members).
async fn drawn_queues(console: &Console, viewer: &Viewer) -> Markup {
    let board = console.app.jobs.queue().snapshot();
    let mut by_series: BTreeMap<&str, Vec<(&str, &QueueEntry)>> = BTreeMap::new();
    for (id, e) in board.iter() {
        by_series
            .entry(e.series.as_str())
            .or_default()
            .push((id.as_str(), e));
    }
    for queue in by_series.values_mut() {
        queue.sort_by_key(|(_, e)| e.position);
    }
    // Names are read only when the viewer's team has a job in the queue.
    let names = if board.values().any(|e| e.team == viewer.caller.team) {
        own_queued_names(console, viewer).await
    } else {
        BTreeMap::new()
    };
    let admin = viewer.caller.role == Role::Admin;
    let team = viewer.caller.team.as_str();
    html! {
        div #queues-drawn {
            @for (series, queue) in &by_series {
                @let queued = queued_of(queue, team, &names);
                (queue_bar::series(present::series(series), &queued, team, admin))
            }
            @if by_series.is_empty() { p #no-queue { "No job waits." } }
        }
    }
}

/// One series' queue as the drawing reads it. The standing sentence is built only
/// for the team's jobs the bar draws one by one (the first [`queue_bar::OWN_DRAWN`]):
/// a team with thousands queued does not pay for sentences nobody sees.
fn queued_of<'a>(
    queue: &[(&'a str, &'a QueueEntry)],
    team: &str,
    names: &'a BTreeMap<String, String>,
) -> Vec<Queued<'a>> {
    let mut own = 0;
    queue
        .iter()
        .map(|(id, e)| {
            let drawn = e.team == team && {
                own += 1;
                own <= queue_bar::OWN_DRAWN
            };
            Queued {
                id,
                team: &e.team,
                gpus: e.gpus,
                name: names.get(*id).map(String::as_str),
                standing: drawn.then(|| e.standing_sentence()).flatten(),
            }
        })
        .collect()
}

/// The names of the viewer's team's queued jobs (the newest page of them).
async fn own_queued_names(console: &Console, viewer: &Viewer) -> BTreeMap<String, String> {
    let query = ListQuery {
        team: Some(viewer.caller.team.clone()),
        state: Some(JobState::Queued),
        limit: MAX_PAGE,
        after: None,
    };
    match list_page(&console.app, query).await {
        Ok(page) => page.jobs.into_iter().map(|j| (j.id, j.name)).collect(),
        Err(e) => {
            tracing::warn!("console: listing the team's queued jobs: {e:?}");
            BTreeMap::new()
        }
    }
}

/// The viewer's team's use of each series drawn against its fair share, and its
/// quota where the policy in force states one (`quota.rs`).
fn drawn_team(
    console: &Console,
    viewer: &Viewer,
    view: &ClusterView,
    shares: Option<&FairShareResponse>,
    usage: &[SeriesUsage],
) -> Markup {
    let policy = console.app.policies.current();
    let team = &viewer.caller.team;
    let fair = |series: &str| -> f64 {
        shares
            .and_then(|s| s.series.iter().find(|s| s.series == series))
            .and_then(|s| s.teams.iter().find(|t| t.team == viewer.caller.team))
            .map_or(0.0, |t| t.fair_share_gpus)
    };
    html! {
        div #team-drawn {
            @for u in usage {
                @let total = view.series.iter().find(|s| s.series == u.series).map_or(0, |s| s.total);
                (capacity_bar::team_use(
                    present::series(&u.series),
                    total,
                    (u.running, u.queued),
                    fair(&u.series),
                    quota::of(&policy, team, &u.series),
                ))
            }
        }
    }
}

async fn tables(console: &Console, viewer: &Viewer, shares: Option<&FairShareResponse>) -> Markup {
    let view = console.app.capacity().snapshot();
    let usage = console
        .app
        .jobs
        .admission
        .usage()
        .usage(&viewer.caller.team);
    html! {
        (drawn_capacity(console, viewer, &view))
        @if view.series.is_empty() { p { "No GPU nodes are known yet." } }
        details {
            summary { "The numbers" }
            div.scroll { table #capacity {
                caption { "GPUs per series (nodes labelled " code { (view.gpu_node_label) } ")" }
                thead { tr {
                    th scope="col" { "Series" } th scope="col" { "Nodes" } th scope="col" { "Total" }
                    th scope="col" { "In use" } th scope="col" { "Blocked" } th scope="col" { "Free" }
                    th scope="col" { "Largest free block" }
                } }
                tbody {
                    @for s in &view.series {
                        tr data-series=(s.series) {
                            th scope="row" { (s.series) } td { (s.nodes) } td { (s.total) }
                            td { (s.in_use) } td { (s.blocked) } td.free { (s.free) }
                            td { (s.largest_free_block) }
                        }
                    }
                }
            } }
        }
        h2 { "Queues" }
        (drawn_queues(console, viewer).await)
        h2 { "Team " (viewer.caller.team) }
        (drawn_team(console, viewer, &view, shares, &usage))
        div.scroll { table #usage {
            thead { tr { th scope="col" { "Series" } th scope="col" { "Running GPUs" } th scope="col" { "Queued GPUs" } } }
            tbody {
                @for u in &usage {
                    tr { th scope="row" { (present::series(&u.series)) } td { (u.running) } td { (u.queued) } }
                }
            }
        } }
        @if usage.is_empty() { p { "The team holds and wants no GPUs." } }
        p { "Quotas are enforced by the admission policy; see " a href="/console/policies" { "Policies" } " for its settings." }
        h2 { "Fair share" }
        (fair_shares(shares))
        @if viewer.caller.role == Role::Admin { (drawn_day(console, &view).await) }
    }
}

/// `GET /console/capacity`.
pub async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    Query(q): Query<PartParams>,
) -> Response {
    let shares = match shares_for(&console.app, &viewer.caller).await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("console: reading the usage ledger: {e}");
            None
        }
    };
    let tables = tables(&console, &viewer, shares.as_ref()).await;
    if q.part.as_deref() == Some("table") {
        return Html(tables.into_string()).into_response();
    }
    let body = html! {
        h1 { "Capacity" }
        section #capacity-live data-refresh="/console/capacity?part=table" data-feed="/console/live/jobs" {
            (tables)
        }
    };
    layout::page("Capacity", Some(&viewer), Nav::Capacity, body)
}
