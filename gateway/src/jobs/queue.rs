//! The queue board: what the dispatcher last published about the gateway queue — each
//! queued job's series, position and current reason — plus the wake-up signal that
//! makes the dispatcher run again. (The teams' usage it counts goes to admission:
//! `admission::usage`.)
//!
//! The queue itself is durable (queued jobs in the store, oldest first); this board is
//! the in-memory view the API reads so that `GET /v1/jobs/{id}` never waits on a
//! dispatcher pass. It is swapped whole (`arc-swap`), never locked.

use std::collections::BTreeMap;

/// Queue standings by job id (keys are the gateway's own ids).
pub type Standings = rustc_hash::FxHashMap<String, QueueEntry>;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::Notify;

/// Where a queued job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    /// The job's team (for the per-team depth metric; the API's job view says it).
    #[serde(skip)]
    pub team: String,
    /// The series queue it waits in.
    pub series: String,
    /// 1-based position in that series' queue (oldest first).
    pub position: u32,
    /// Stable code of the current reason (e.g. `quota.exceeded`, `capacity.no-room`).
    pub code: String,
    /// Why it waits, for people.
    pub reason: String,
}

/// The board.
#[derive(Debug, Default)]
pub struct QueueBoard {
    wake: Notify,
    entries: ArcSwap<Standings>,
}

impl QueueBoard {
    /// An empty board.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Ask the dispatcher for a pass (coalesces: many wakes, one pass).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait for the next wake.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Publish a pass's standings.
    pub fn publish(&self, entries: Standings) {
        self.entries.store(Arc::new(entries));
    }

    /// Every queued job's standing as the last pass published it.
    pub fn snapshot(&self) -> Arc<Standings> {
        self.entries.load_full()
    }

    /// A queued job's standing, if the last pass saw it.
    pub fn entry(&self, job_id: &str) -> Option<QueueEntry> {
        self.entries.load().get(job_id).cloned()
    }

    /// Queued jobs per team (for metrics).
    pub fn depth_by_team(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.entries.load().values() {
            *out.entry(e.team.clone()).or_default() += 1;
        }
        out
    }

    /// Queued jobs per series (for metrics).
    pub fn depth_by_series(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.entries.load().values() {
            *out.entry(e.series.clone()).or_default() += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_shows_what_the_last_pass_published() {
        let board = QueueBoard::new();
        let mut entries = Standings::default();
        entries.insert(
            "j1".to_string(),
            QueueEntry {
                team: "team-a".into(),
                series: "h100".into(),
                position: 1,
                code: "quota.exceeded".into(),
                reason: "over quota".into(),
            },
        );
        board.publish(entries);
        assert_eq!(board.entry("j1").map(|e| e.position), Some(1));
        assert_eq!(board.depth_by_series().get("h100"), Some(&1));
        assert!(board.entry("j2").is_none());
    }
}
