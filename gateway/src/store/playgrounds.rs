//! Playgrounds ([`PlaygroundStore`]): one row per inference server a team started —
//! what it serves, on how many GPUs, its three clocks (the hard TTL as an absolute
//! expiry, the idle TTL measured from the last proxied request, the reclaim warning)
//! and how it ended. The state lives here, not in the gateway's memory, so a restart
//! (or another replica taking the lead) keeps every TTL and reclaims what it must.
//!
//! State changes are compare-and-set on the state a caller saw, so the TTL controller,
//! a user's DELETE and the pod watcher cannot both end one playground.

use async_trait::async_trait;
use serde::Serialize;

use super::StoreError;
use crate::domain::{EndReason, PlaygroundState};

/// A playground to record (it starts `pending`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPlayground {
    /// Its id (also the name suffix of its Kubernetes objects).
    pub id: String,
    /// The owning team.
    pub team: String,
    /// The token name that created it.
    pub created_by: String,
    /// The model: a model id or a path on the team's storage.
    pub model: String,
    /// The GPU series asked for (`None`: any).
    pub series: Option<String>,
    /// GPUs (the tensor-parallel size).
    pub gpus: u32,
    /// Extra server arguments.
    pub args: Vec<String>,
    /// Creation time, Unix ms (the idle clock starts here too).
    pub created_at_ms: i64,
    /// When the hard TTL ends, Unix ms.
    pub expires_at_ms: i64,
    /// The idle TTL in seconds (`None`: no idle reclaim).
    pub idle_seconds: Option<u64>,
}

/// A stored playground.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlaygroundRecord {
    /// Id.
    pub id: String,
    /// Owning team.
    pub team: String,
    /// Creating token.
    pub created_by: String,
    /// Model.
    pub model: String,
    /// GPU series asked for.
    pub series: Option<String>,
    /// GPUs.
    pub gpus: u32,
    /// Extra server arguments.
    pub args: Vec<String>,
    /// State.
    pub state: PlaygroundState,
    /// Why it ended (terminal states), e.g. `ttl-expired`.
    pub reason: Option<String>,
    /// Created, Unix ms.
    pub created_at_ms: i64,
    /// Hard TTL end, Unix ms.
    pub expires_at_ms: i64,
    /// Idle TTL, seconds.
    pub idle_seconds: Option<u64>,
    /// Last proxied request (before the first: when it became ready, or its creation
    /// while pending), Unix ms.
    pub last_request_at_ms: i64,
    /// When the reclaim warning was given (cleared by `extend`), Unix ms.
    pub warned_at_ms: Option<i64>,
    /// When it ended, Unix ms.
    pub ended_at_ms: Option<i64>,
}

impl PlaygroundRecord {
    /// When the idle TTL ends (if it has one), Unix ms. The idle clock runs only once
    /// the server is ready: loading a model can take longer than the idle TTL.
    pub fn idle_deadline_ms(&self) -> Option<i64> {
        if self.state != PlaygroundState::Ready {
            return None;
        }
        self.idle_seconds.map(|s| {
            self.last_request_at_ms
                .saturating_add(i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))
        })
    }

    /// The earlier of the hard and idle deadlines and which one it is.
    pub fn next_deadline_ms(&self) -> (i64, EndReason) {
        match self.idle_deadline_ms() {
            Some(idle) if idle < self.expires_at_ms => (idle, EndReason::Idle),
            _ => (self.expires_at_ms, EndReason::TtlExpired),
        }
    }
}

/// Durable playground state.
#[async_trait]
pub trait PlaygroundStore: Send + Sync {
    /// Records a new `pending` playground; [`StoreError::Duplicate`] if the id exists.
    async fn insert_playground(&self, new: &NewPlayground) -> Result<PlaygroundRecord, StoreError>;
    /// One playground.
    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>, StoreError>;
    /// A team's playgrounds (`None`: every team's), newest first, at most `limit`.
    async fn list_playgrounds(
        &self,
        team: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlaygroundRecord>, StoreError>;
    /// Every playground that has not ended (the TTL controller's work list).
    async fn active_playgrounds(&self) -> Result<Vec<PlaygroundRecord>, StoreError>;
    /// Moves `id` from `from` to `to` (with `reason` and the end time when `to` is
    /// terminal); `false` when it is not in `from` any more (someone else moved it).
    async fn set_playground_state(
        &self,
        id: &str,
        from: PlaygroundState,
        to: PlaygroundState,
        reason: Option<EndReason>,
        at_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Sets the hard TTL end of an active playground and clears its warning; `false`
    /// when it has ended (or does not exist).
    async fn extend_playground(&self, id: &str, expires_at_ms: i64) -> Result<bool, StoreError>;
    /// Records a proxied request at `at_ms` (the idle clock restarts; never moves back)
    /// and clears the warning.
    async fn touch_playground(&self, id: &str, at_ms: i64) -> Result<(), StoreError>;
    /// Records the reclaim warning once; `false` if it was already given or the
    /// playground has ended.
    async fn warn_playground(&self, id: &str, at_ms: i64) -> Result<bool, StoreError>;
}

/// The columns every query reads, in [`PlaygroundRecord`] order.
pub const COLUMNS: &str = "id, team, created_by, model, series, gpus, args, state, reason, \
     created_at_ms, expires_at_ms, idle_seconds, last_request_at_ms, warned_at_ms, ended_at_ms";

/// A row's raw values, as both backends read them.
#[derive(Debug)]
pub struct RawRow {
    pub id: String,
    pub team: String,
    pub created_by: String,
    pub model: String,
    pub series: Option<String>,
    pub gpus: i64,
    pub args: String,
    pub state: String,
    pub reason: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub idle_seconds: Option<i64>,
    pub last_request_at_ms: i64,
    pub warned_at_ms: Option<i64>,
    pub ended_at_ms: Option<i64>,
}

impl RawRow {
    /// The record, or [`StoreError::Corrupt`] naming what does not read back.
    pub fn into_record(self) -> Result<PlaygroundRecord, StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("playground {}: {what}", self.id));
        let state = self.state.parse().map_err(|_| corrupt("state"))?;
        let args: Vec<String> = serde_json::from_str(&self.args).map_err(|_| corrupt("args"))?;
        let gpus = u32::try_from(self.gpus).map_err(|_| corrupt("gpus"))?;
        let idle_seconds = match self.idle_seconds {
            Some(s) => Some(u64::try_from(s).map_err(|_| corrupt("idle_seconds"))?),
            None => None,
        };
        Ok(PlaygroundRecord {
            id: self.id,
            team: self.team,
            created_by: self.created_by,
            model: self.model,
            series: self.series,
            gpus,
            args,
            state,
            reason: self.reason,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            idle_seconds,
            last_request_at_ms: self.last_request_at_ms,
            warned_at_ms: self.warned_at_ms,
            ended_at_ms: self.ended_at_ms,
        })
    }
}

/// The `args` column of `new`.
pub fn args_json(new: &NewPlayground) -> String {
    serde_json::to_string(&new.args).unwrap_or_else(|_| "[]".into())
}

/// The record a fresh insert of `new` reads back as.
pub fn inserted(new: &NewPlayground) -> PlaygroundRecord {
    PlaygroundRecord {
        id: new.id.clone(),
        team: new.team.clone(),
        created_by: new.created_by.clone(),
        model: new.model.clone(),
        series: new.series.clone(),
        gpus: new.gpus,
        args: new.args.clone(),
        state: PlaygroundState::Pending,
        reason: None,
        created_at_ms: new.created_at_ms,
        expires_at_ms: new.expires_at_ms,
        idle_seconds: new.idle_seconds,
        last_request_at_ms: new.created_at_ms,
        warned_at_ms: None,
        ended_at_ms: None,
    }
}
