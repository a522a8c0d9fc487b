//! The GPUs each team holds and wants, per series: the usage a policy sees. The
//! leader's dispatcher counts it on every pass (a follower from the store) and
//! publishes it here as data; admission reads it. It is swapped whole (`arc-swap`),
//! never locked, and admission never calls back into the job domain for it.

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use forge_policy_host::model::{SeriesUsage, Shares, TeamShare};

/// GPUs per team and series: (running = held by dispatched / initializing / running
/// jobs, queued = wanted by queued jobs).
pub type Ledger = BTreeMap<String, BTreeMap<String, (u32, u32)>>;

/// The last published ledger, and the teams' fair-share standings computed with it.
#[derive(Debug, Default)]
pub struct UsageBoard {
    ledger: ArcSwap<Ledger>,
    shares: ArcSwap<Vec<TeamShare>>,
}

impl UsageBoard {
    /// An empty board.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Publishes a newly counted ledger.
    pub fn publish(&self, ledger: Ledger) {
        self.ledger.store(Arc::new(ledger));
    }

    /// Publishes the teams' standings (contract 0.3.0's `request.shares()`).
    pub fn publish_shares(&self, shares: &Shares) {
        self.shares.store(shares.0.clone());
    }

    /// The last published standings.
    pub fn shares(&self) -> Shares {
        Shares(self.shares.load_full())
    }

    /// The last published ledger.
    pub fn ledger(&self) -> Arc<Ledger> {
        self.ledger.load_full()
    }

    /// A team's usage as the policy sees it, per series.
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
        let board = UsageBoard::new();
        let mut ledger = Ledger::new();
        add(&mut ledger, "vision", "h100", 16, true);
        add(&mut ledger, "vision", "h100", 8, false);
        add(&mut ledger, "nlp", "h200", 8, true);
        board.publish(ledger);
        assert_eq!(
            board.usage("vision"),
            vec![SeriesUsage {
                series: "h100".into(),
                running: 16,
                queued: 8
            }]
        );
        assert!(board.usage("nobody").is_empty());
    }
}
