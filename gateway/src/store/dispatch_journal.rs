//! The dispatch journal (issue 39): for each dispatcher pass that dispatched a job,
//! everything its fair order was computed from, and what it decided — so that a day
//! of dispatches can be replayed and a change of weights previewed on it
//! (`jobs/dispatch/replay.rs`).
//!
//! A record holds the pass's inputs to the order (the weights, each queued team's
//! decayed usage and GPUs held per series, the queued jobs' classes and submission
//! order) and its outcome per job, in the order the pass decided them — every job up
//! to the last dispatch, then each team's next one. The usage is
//! stored as the pass computed it (not recomputed from the ledger later), so a replay
//! ranks with the very numbers the pass ranked with.
//!
//! Only the leader writes it, fenced with its term, and each write forgets records
//! older than what a replay needs (`keep_since_ms`, see [`journal_keep_ms`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The journal's record of one pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PassRecord {
    /// Unix milliseconds the pass began.
    pub at_ms: i64,
    /// The global policy's weights at the pass (teams not listed weigh 1).
    pub weights: BTreeMap<String, f64>,
    /// GPUs free per series when the pass began (after the machines of dispatched
    /// jobs the scheduler had not bound yet).
    pub free: BTreeMap<String, u32>,
    /// The usage of each team with a queued job, per series, when the pass began.
    pub teams: Vec<TeamUsageAtPass>,
    /// The queued jobs in the order the pass decided them: every one up to its last
    /// dispatch, then the next job of each team and class (`jobs/dispatch/journal.rs`).
    pub decided: Vec<DecidedJob>,
    /// Queued jobs the pass decided after those, not recorded.
    #[serde(default)]
    pub omitted: usize,
}

/// One team's usage of one series as a pass ranked it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamUsageAtPass {
    pub team: String,
    pub series: String,
    /// Decayed usage, as GPUs held on average.
    pub used: f64,
    /// GPUs held when the pass began.
    pub held: u32,
}

/// One queued job as a pass decided it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecidedJob {
    pub job: String,
    pub team: String,
    /// The series it waited on (its team's rank is read there).
    pub series: String,
    /// Its priority in the order (as the policy capped it when it last decided).
    pub priority: i32,
    /// Whether it held GPUs freed for it by a preemption.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holding: bool,
    /// Its submission order.
    pub seq: i64,
    pub outcome: Outcome,
}

/// What a pass did with a queued job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Outcome {
    /// Admitted by the policy, its gang fitted: dispatched, taking these GPUs.
    Dispatched { gpus: Vec<SeriesGpus> },
    /// Admitted by the policy, but its gang did not fit what was left (`code`).
    NoRoom { gpus: Vec<SeriesGpus>, code: String },
    /// Kept waiting by the policy (or its failure), with its code.
    Waits { code: String },
    /// Rejected by the policy: it left the queue.
    Rejected,
}

/// GPUs of one series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeriesGpus {
    pub series: String,
    pub gpus: u32,
}

impl SeriesGpus {
    pub fn new(series: &str, gpus: u32) -> Self {
        SeriesGpus {
            series: series.to_string(),
            gpus,
        }
    }
}

/// The most records one read returns: a day of a busy cluster's dispatching passes.
pub const MAX_PASSES_READ: u32 = 10_000;

/// How long the journal keeps a record, in milliseconds: a day, or the fair share's
/// half-life if longer (a replay's usage is only as relevant as the ledger's).
pub fn journal_keep_ms(half_life_s: u64) -> i64 {
    let s = half_life_s.max(86_400);
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_what_was_written_to_the_last_bit() {
        let rec = PassRecord {
            at_ms: 5,
            weights: BTreeMap::from([("team-a".into(), 2.0)]),
            free: BTreeMap::from([("h100".into(), 8)]),
            teams: vec![TeamUsageAtPass {
                team: "team-a".into(),
                series: "h100".into(),
                used: 0.1 + 0.2,
                held: 8,
            }],
            omitted: 3,
            decided: vec![DecidedJob {
                job: "j1".into(),
                team: "team-a".into(),
                series: "h100".into(),
                priority: 0,
                holding: false,
                seq: 1,
                outcome: Outcome::NoRoom {
                    gpus: vec![SeriesGpus {
                        series: "h100".into(),
                        gpus: 8,
                    }],
                    code: "capacity.no-room".into(),
                },
            }],
        };
        let text = serde_json::to_string(&rec).unwrap();
        let back: PassRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.teams[0].used.to_bits(), (0.1f64 + 0.2).to_bits());
    }

    #[test]
    fn the_journal_keeps_a_day_or_a_half_life() {
        assert_eq!(journal_keep_ms(60), 86_400_000);
        assert_eq!(journal_keep_ms(7 * 86_400), 7 * 86_400_000);
    }
}
