//! The queue board: what the dispatcher last published about the gateway queue — each
//! queued job's series, position and current reason, and every team's GPU usage — plus
//! the wake-up signal that makes the dispatcher run again.
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

use forge_policy_host::model::SeriesUsage;

/// Where a queued job stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueEntry {
    /// The series queue it waits in.
    pub series: String,
    /// 1-based position in that series' queue (oldest first).
    pub position: u32,
    /// Stable code of the current reason (e.g. `quota.exceeded`, `capacity.no-room`).
    pub code: String,
    /// Why it waits, for people.
    pub reason: String,
}

/// GPUs per team and series: (running = held by dispatched / initializing / running
/// jobs, queued = wanted by queued jobs).
pub type Ledger = BTreeMap<String, BTreeMap<String, (u32, u32)>>;

/// The board.
#[derive(Debug, Default)]
pub struct QueueBoard {
    wake: Notify,
    entries: ArcSwap<Standings>,
    ledger: ArcSwap<Ledger>,
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

    /// Publish a pass's results.
    pub fn publish(&self, entries: Standings, ledger: Ledger) {
        self.entries.store(Arc::new(entries));
        self.ledger.store(Arc::new(ledger));
    }

    /// Every queued job's standing as the last pass published it.
    pub fn snapshot(&self) -> Arc<Standings> {
        self.entries.load_full()
    }

    /// A queued job's standing, if the last pass saw it.
    pub fn entry(&self, job_id: &str) -> Option<QueueEntry> {
        self.entries.load().get(job_id).cloned()
    }

    /// Queued jobs per series (for metrics).
    pub fn depth_by_series(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.entries.load().values() {
            *out.entry(e.series.clone()).or_default() += 1;
        }
        out
    }

    /// A team's usage as the policy sees it.
    pub fn usage(&self, team: &str) -> Vec<SeriesUsage> {
        usage_of(&self.ledger.load(), team)
    }
}

/// Adds `gpus` of `series` to a team's running or queued column.
pub fn add(ledger: &mut Ledger, team: &str, series: &str, gpus: u64, running: bool) {
    // Keys are allocated only when new (a pass adds every queued job).
    if !ledger.contains_key(team) {
        ledger.insert(team.to_string(), BTreeMap::new());
    }
    let by_series = ledger.get_mut(team).expect("inserted above");
    if !by_series.contains_key(series) {
        by_series.insert(series.to_string(), (0, 0));
    }
    let entry = by_series.get_mut(series).expect("inserted above");
    let g = u32::try_from(gpus).unwrap_or(u32::MAX);
    if running {
        entry.0 = entry.0.saturating_add(g);
    } else {
        entry.1 = entry.1.saturating_add(g);
    }
}

/// A team's usage in a ledger, per series.
pub fn usage_of(ledger: &Ledger, team: &str) -> Vec<SeriesUsage> {
    ledger
        .get(team)
        .map(|by_series| {
            by_series
                .iter()
                .map(|(series, (running, queued))| SeriesUsage {
                    series: series.clone(),
                    running: *running,
                    queued: *queued,
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_reads_the_published_ledger() {
        let board = QueueBoard::new();
        let mut ledger = Ledger::new();
        add(&mut ledger, "vision", "h100", 16, true);
        add(&mut ledger, "vision", "h100", 8, false);
        add(&mut ledger, "nlp", "h200", 8, true);
        let mut entries = Standings::default();
        entries.insert(
            "j1".to_string(),
            QueueEntry {
                series: "h100".into(),
                position: 1,
                code: "quota.exceeded".into(),
                reason: "over quota".into(),
            },
        );
        board.publish(entries, ledger);
        assert_eq!(
            board.usage("vision"),
            vec![SeriesUsage {
                series: "h100".into(),
                running: 16,
                queued: 8
            }]
        );
        assert!(board.usage("nobody").is_empty());
        assert_eq!(board.entry("j1").map(|e| e.position), Some(1));
        assert_eq!(board.depth_by_series().get("h100"), Some(&1));
    }
}
