//! One pass's entry in the dispatch journal (`store/dispatch_journal.rs`), gathered
//! as the pass decides: what its order was computed from when it began, then each
//! queued job's class and outcome in the order it was decided. Only a pass that
//! dispatched something is written (by the leader, fenced with its term); the jobs
//! are kept by reference until then, so a pass that dispatches nothing copies none.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::Dispatcher;
use super::fair_order::series_of;
use super::fair_share::Usage;
use crate::admission::usage::Ledger;
use crate::domain::FairShareSettings;
use crate::store::dispatch_journal::{
    DecidedJob, Outcome, PassRecord, TeamUsageAtPass, journal_keep_ms,
};
use crate::store::{JobRecord, StoreError};

/// What a pass records as it decides (`'q`: the pass's queue).
pub struct PassJournal<'q> {
    at_ms: i64,
    weights: BTreeMap<String, f64>,
    free: BTreeMap<String, u32>,
    teams: Vec<TeamUsageAtPass>,
    /// Each queued job's class in the order: (holding freed GPUs, priority).
    classes: FxHashMap<&'q str, (bool, i32)>,
    decided: Vec<(&'q JobRecord, Outcome)>,
    dispatched: bool,
}

impl<'q> PassJournal<'q> {
    /// The inputs of a pass that began at `at_ms`: the weights, the GPUs free per
    /// series, and each queued job's team's usage and GPUs held on its series.
    pub fn begin(
        at_ms: i64,
        weights: &FairShareSettings,
        free: BTreeMap<String, u32>,
        queued: &'q [Arc<JobRecord>],
        usage: &Usage,
        ledger: &Ledger,
    ) -> Self {
        let mut pairs: BTreeMap<(&str, &str), ()> = BTreeMap::new();
        for job in queued {
            pairs.insert((job.team.as_str(), series_of(job)), ());
        }
        let teams = pairs
            .into_keys()
            .map(|(team, series)| TeamUsageAtPass {
                team: team.to_string(),
                series: series.to_string(),
                used: usage.used(team, series),
                held: ledger
                    .get(team)
                    .and_then(|s| s.get(series))
                    .map_or(0, |(running, _)| *running),
            })
            .collect();
        PassJournal {
            at_ms,
            weights: weights.weights.clone(),
            free,
            teams,
            classes: FxHashMap::default(),
            decided: Vec::with_capacity(queued.len()),
            dispatched: false,
        }
    }

    /// The class the order gave `job`.
    pub fn classed(&mut self, job: &'q JobRecord, holding: bool, priority: i32) {
        self.classes.insert(job.id.as_str(), (holding, priority));
    }

    /// The class [`PassJournal::classed`] recorded for `job`.
    pub fn class(&self, job: &JobRecord) -> (bool, i32) {
        self.classes
            .get(job.id.as_str())
            .copied()
            .unwrap_or((false, job.spec.priority))
    }

    /// `job` was decided, with `outcome`.
    pub fn decided(&mut self, job: &'q JobRecord, outcome: Outcome) {
        self.dispatched |= matches!(outcome, Outcome::Dispatched { .. });
        self.decided.push((job, outcome));
    }

    /// The record to write, if the pass dispatched anything.
    pub fn finish(self) -> Option<PassRecord> {
        if !self.dispatched {
            return None;
        }
        let classes = self.classes;
        let decided = self
            .decided
            .into_iter()
            .map(|(job, outcome)| {
                let (holding, priority) = classes
                    .get(job.id.as_str())
                    .copied()
                    .unwrap_or((false, job.spec.priority));
                DecidedJob {
                    job: job.id.clone(),
                    team: job.team.clone(),
                    series: series_of(job).to_string(),
                    priority,
                    holding,
                    seq: job.seq,
                    outcome,
                }
            })
            .collect();
        Some(PassRecord {
            at_ms: self.at_ms,
            weights: self.weights,
            free: self.free,
            teams: self.teams,
            decided,
        })
    }
}

impl Dispatcher {
    /// Writes a pass's record with the term's fence, forgetting what the journal no
    /// longer keeps. A failed write is logged: the dispatches stand, and a replay of
    /// that time misses the pass.
    pub(super) async fn journal(&self, record: PassRecord) {
        let keep_ms = journal_keep_ms(self.core.config.gateway.fair_share_half_life_s);
        let keep_since = record.at_ms.saturating_sub(keep_ms);
        let fence = self.core.term.as_ref().map(crate::leader::Term::fence);
        match self.core.store.record_pass(record, keep_since, fence).await {
            Ok(()) => {}
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::info!("a past term's pass is not journaled: {e}");
            }
            Err(e) => tracing::warn!("writing the dispatch journal: {e}"),
        }
    }
}
