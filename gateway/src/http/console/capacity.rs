//! `GET /console/capacity`: per GPU series the total, in-use, blocked and free GPUs
//! and the largest free block, from the same live capacity snapshot the scheduler and
//! the policies use (`GET /v1/capacity`), and the viewer's team usage (running and
//! queued GPUs per series, the dispatcher's ledger), then each team's share of each
//! series against its fair share (`GET /v1/fair-share`: admins see every team, a
//! member their own). Every job change on the viewer's feed re-reads the tables
//! (`?part=table`): capacity moves when jobs start and end.

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Console;
use super::layout::{self, Nav};
use super::session::Viewer;
use crate::http::fair_share::{FairShareResponse, shares_for};

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
                        th scope="row" { (s.series) } td { (t.team) } td { (t.weight) }
                        td { (format!("{:.1}", t.used_gpus)) } td { (t.allocated_gpus) } td { (t.queued_gpus) }
                        td.share { (format!("{:.1}", t.share_gpus)) } td { (format!("{:.1}", t.fair_share_gpus)) }
                    }
                }
            }
        } }
    }
}

fn tables(console: &Console, viewer: &Viewer, shares: Option<&FairShareResponse>) -> Markup {
    let view = console.app.capacity().snapshot();
    let usage = console
        .app
        .jobs
        .admission
        .usage()
        .usage(&viewer.caller.team);
    html! {
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
        @if view.series.is_empty() { p { "No GPU nodes are known yet." } }
        h2 { "Team " (viewer.caller.team) }
        div.scroll { table #usage {
            thead { tr { th scope="col" { "Series" } th scope="col" { "Running GPUs" } th scope="col" { "Queued GPUs" } } }
            tbody {
                @for u in &usage {
                    tr { th scope="row" { (u.series) } td { (u.running) } td { (u.queued) } }
                }
            }
        } }
        @if usage.is_empty() { p { "The team holds and wants no GPUs." } }
        p { "Quotas are enforced by the admission policy; see " a href="/console/policies" { "Policies" } " for its settings." }
        h2 { "Fair share" }
        (fair_shares(shares))
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
    let tables = tables(&console, &viewer, shares.as_ref());
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
