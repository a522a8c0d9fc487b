//! `GET /v1/fair-share`: every team's standing on every series against its fair
//! share ([`crate::jobs::fair_shares`]). Admins see every team; a member sees only
//! their own team's rows (teams are isolated; the series' GPUs are public through
//! `/v1/capacity` anyway). Any replica answers, from the store's usage ledger.

use axum::Json;
use axum::extract::State;
use serde::Serialize;

use super::error::ApiError;
use crate::auth::{Caller, Role};
use crate::jobs::fair_shares::{SeriesShares, table};
use crate::state::AppState;
use crate::store::now_ms;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FairShareResponse {
    /// `FORGE_FAIR_SHARE_HALF_LIFE_S`.
    pub half_life_seconds: u64,
    /// The global policy version the weights are from.
    pub policy_version: u64,
    pub series: Vec<SeriesShares>,
}

/// `GET /v1/fair-share`.
pub async fn fair_share(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<FairShareResponse>, ApiError> {
    Ok(Json(shares_for(&state, &caller).await?))
}

/// The table `caller` may see now (the API's answer and the console's section).
pub async fn shares_for(
    state: &AppState,
    caller: &Caller,
) -> Result<FairShareResponse, crate::store::StoreError> {
    let half_life = state.config.gateway.fair_share_half_life_s;
    let usage = state.jobs.core.store.usage().await?;
    let policy = state.policies.current();
    let global = policy.global();
    let only = (caller.role != Role::Admin).then_some(caller.team.as_str());
    let series = table(
        &state.capacity().snapshot(),
        &state.jobs.admission.usage().ledger(),
        &usage,
        global.fair_share.clone(),
        half_life,
        now_ms(),
        only,
    );
    Ok(FairShareResponse {
        half_life_seconds: half_life,
        policy_version: global.version,
        series,
    })
}
