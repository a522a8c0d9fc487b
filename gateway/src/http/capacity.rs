//! `GET /v1/capacity`: live per-series capacity, every fleet summed and each fleet's
//! own (the same snapshot policies see), and the
//! caller's team usage (the dispatcher's ledger plus the team's playground GPUs, the
//! same numbers policies see).

use axum::Json;
use axum::extract::State;
use forge_policy_host::model::{FleetView, SeriesCapacity, SeriesUsage};
use serde::Serialize;

use crate::auth::Caller;
use crate::state::AppState;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityResponse {
    gpu_node_label: String,
    /// Every fleet summed.
    series: Vec<SeriesCapacity>,
    /// Each fleet with its own series.
    fleets: Vec<FleetView>,
    team: TeamUsage,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TeamUsage {
    name: String,
    usage: Vec<SeriesUsage>,
}

/// `GET /v1/capacity`.
pub async fn capacity(State(state): State<AppState>, caller: Caller) -> Json<CapacityResponse> {
    let view = state.capacity().snapshot();
    Json(CapacityResponse {
        fleets: view.fleet_views().into_owned(),
        gpu_node_label: view.gpu_node_label,
        series: view.series,
        team: TeamUsage {
            usage: state.playgrounds.team_usage(&caller.team),
            name: caller.team,
        },
    })
}
