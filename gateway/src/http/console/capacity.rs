//! `GET /console/capacity`: per GPU series the total, in-use, blocked and free GPUs
//! and the largest free block, from the same live capacity snapshot the scheduler and
//! the policies use (`GET /v1/capacity`), and the viewer's team usage (running and
//! queued GPUs per series, the dispatcher's ledger). Every job change on the viewer's
//! feed re-reads the table (`?part=table`): capacity moves when jobs start and end.

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Console;
use super::layout::{self, Nav};
use super::session::Viewer;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct PartParams {
    #[serde(default)]
    part: Option<String>,
}

fn tables(console: &Console, viewer: &Viewer) -> Markup {
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
    }
}

/// `GET /console/capacity`.
pub async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    Query(q): Query<PartParams>,
) -> Response {
    let tables = tables(&console, &viewer);
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
