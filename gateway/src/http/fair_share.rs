//! `GET /v1/fair-share`: every team's standing on every series against its fair
//! share ([`crate::jobs::fair_shares`]). Admins see every team; a member sees only
//! their own team's rows (teams are isolated; the series' GPUs are public through
//! `/v1/capacity` anyway). Any replica answers, from the store's usage ledger.
//!
//! `POST /v1/fair-share/replay` (admins only: the journal names every team's jobs):
//! the dispatch journal's passes ordered again, as they were or with other weights
//! (`jobs/dispatch/replay.rs`).

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::body::{JsonBody, JsonDocument};
use super::error::ApiError;
use crate::auth::{Caller, Role};
use crate::domain::FairShareSettings;
use crate::jobs::dispatch::replay::Replay;
use crate::jobs::fair_shares::{SeriesShares, table};
use crate::state::AppState;
use crate::store::dispatch_journal::MAX_PASSES_READ;
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

/// `POST /v1/fair-share/replay`'s document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplayRequest {
    /// Unix milliseconds of the window's end; now if omitted.
    #[serde(default)]
    pub to: Option<i64>,
    /// The window's length in seconds, up to `to`; a day if omitted.
    #[serde(default)]
    pub seconds: Option<i64>,
    /// Weights to preview the passes with; omitted or null: replay them as they were.
    #[serde(default)]
    pub fair_share: Option<FairShareSettings>,
}

impl JsonDocument for ReplayRequest {
    const INVALID: &'static str = "invalid-replay";
    const WHAT: &'static str = "a replay request";

    fn when_empty() -> Option<Self> {
        Some(ReplayRequest {
            to: None,
            seconds: None,
            fair_share: None,
        })
    }
}

/// `POST /v1/fair-share/replay`'s answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayResponse {
    pub from: i64,
    pub to: i64,
    /// Recorded passes replayed (each one that dispatched a job).
    pub passes: usize,
    /// Whether the window held more passes than one answer replays
    /// ([`MAX_PASSES_READ`]): the rest start after the last one here.
    pub truncated: bool,
    #[serde(flatten)]
    pub replay: Replay,
}

/// A day, the window a replay covers by default.
const DAY_S: i64 = 86_400;
/// The longest window: a year (the journal keeps a day or a half-life).
pub const MAX_WINDOW_S: i64 = 366 * DAY_S;
/// The largest time a replay accepts (JSON's largest exact integer).
pub const MAX_MS: i64 = 9_007_199_254_740_991;

/// `POST /v1/fair-share/replay` (admins): the dispatch journal's passes of the
/// `seconds` up to `to` ordered again — as they were (byte-identical or not), or with the weights of
/// `fairShare` as a preview. Nothing is changed.
pub async fn replay(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(r): JsonBody<ReplayRequest>,
) -> Result<Json<ReplayResponse>, ApiError> {
    caller.require_admin()?;
    if r.to.is_some_and(|ms| !(0..=MAX_MS).contains(&ms)) {
        let why = format!("to must be Unix milliseconds, from 0 to {MAX_MS}");
        return Err(ApiError::bad("invalid-replay", "to", why));
    }
    if r.seconds.is_some_and(|s| !(1..=MAX_WINDOW_S).contains(&s)) {
        let why = format!("seconds must be from 1 to {MAX_WINDOW_S} (a year)");
        return Err(ApiError::bad("invalid-replay", "seconds", why));
    }
    let to = r.to.unwrap_or_else(now_ms);
    let from = to.saturating_sub(r.seconds.unwrap_or(DAY_S) * 1000).max(0);
    if let Some(w) = &r.fair_share {
        w.validate()
            .map_err(|e| ApiError::bad("invalid-replay", e.field, e.why))?;
    }
    let limit = MAX_PASSES_READ;
    let mut passes = state.jobs.core.store.passes(from, to, limit + 1).await?;
    let truncated = passes.len() > limit as usize;
    passes.truncate(limit as usize);
    let replay = crate::jobs::dispatch::replay::replay(&passes, r.fair_share.as_ref());
    Ok(Json(ReplayResponse {
        from,
        to,
        passes: passes.len(),
        truncated,
        replay,
    }))
}
