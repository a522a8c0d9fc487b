//! One pass's entry in the dispatch journal (`store/dispatch_journal.rs`), gathered
//! as the pass decides: what its order was computed from when it began, then each
//! queued job's class and outcome in the order it was decided. Only a pass that
//! dispatched something is written (by the leader, fenced with its term); the jobs
//! are kept by reference until then, so a pass that dispatches nothing copies none.
//!
//! A record holds the jobs decided up to the pass's last dispatch and, after it, only
//! the next job of each lane (team and class). That is enough to replay the order
//! exactly: a lane's jobs are handed out oldest first, so the recorded jobs hold every
//! lane head the pass compared, and after the last dispatch no team's rank moves, so
//! the recorded heads keep their order. A preview sees every waiting team's next
//! job, not its whole backlog; a queue of 10 000 jobs is not copied on each dispatch.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

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
        self.decided.push((job, outcome));
    }

    /// The record to write, if the pass dispatched anything: the jobs decided up to
    /// its last dispatch, then the next job of each lane (team and class) after it —
    /// what a replay needs to give the same order, and a preview to weigh every team
    /// — not the whole queue.
    pub fn finish(mut self) -> Option<PassRecord> {
        let last = self
            .decided
            .iter()
            .rposition(|(_, o)| matches!(o, Outcome::Dispatched { .. }))?;
        let all = std::mem::take(&mut self.decided);
        let total = all.len();
        let mut lanes: FxHashSet<(bool, i32, &str)> = FxHashSet::default();
        let decided: Vec<DecidedJob> = all
            .into_iter()
            .enumerate()
            .filter(|(i, (job, _))| {
                let (holding, priority) = self.class(job);
                *i <= last || lanes.insert((holding, priority, job.team.as_str()))
            })
            .map(|(_, (job, outcome))| {
                let (holding, priority) = self.class(job);
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
            omitted: total - decided.len(),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::admission::usage;
    use crate::jobs::dispatch::fair_order::{Class, FairOrder};
    use crate::jobs::dispatch::replay::replay;
    use crate::jobs::fair_shares::Entitlement;
    use crate::store::conformance::jobs::queued_record;
    use crate::store::dispatch_journal::SeriesGpus;

    fn job(team: &str, seq: i64) -> Arc<JobRecord> {
        queued_record(team, seq, 0)
    }

    #[test]
    fn a_pass_keeps_its_jobs_to_the_last_dispatch_and_each_teams_next_and_replays_exactly() {
        // Three teams, three 8-GPU jobs each, 16 GPUs free; team-c used least.
        let queued: Vec<Arc<JobRecord>> = ["team-a", "team-b", "team-c"]
            .iter()
            .enumerate()
            .flat_map(|(t, team)| (0..3).map(move |i| job(team, (t * 3 + i) as i64)))
            .collect();
        let used = Usage::of_gpus([
            ("team-a".to_string(), [("h100".to_string(), 10.0)]),
            ("team-b".to_string(), [("h100".to_string(), 5.0)]),
        ]);
        let mut ledger = Ledger::new();
        let weights = FairShareSettings::default();
        let entitled = Entitlement::of_weights(Arc::new(weights.clone()));
        let free = BTreeMap::from([("h100".to_string(), 16)]);
        let mut journal = PassJournal::begin(1_000, &weights, free, &queued, &used, &ledger);
        for j in &queued {
            journal.classed(j, false, 0);
        }
        // The live pass: the dispatcher's order, a job dispatched while 8 GPUs are left.
        let mut left = 16;
        let mut order = FairOrder::new(
            &queued,
            |_| Class::new(false, 0),
            |t, s| used.weighted_rank(&ledger, &entitled, t, s),
        );
        while let Some(j) = order.next(|t, s| used.weighted_rank(&ledger, &entitled, t, s)) {
            let gpus = vec![SeriesGpus::new("h100", 8)];
            let outcome = if left >= 8 {
                left -= 8;
                usage::add(&mut ledger, &j.team, "h100", 8, true);
                Outcome::Dispatched { gpus }
            } else {
                Outcome::NoRoom {
                    gpus,
                    code: "capacity.no-room".into(),
                }
            };
            journal.decided(j, outcome);
        }
        let record = journal.finish().expect("it dispatched");
        let ids: Vec<&str> = record.decided.iter().map(|d| d.job.as_str()).collect();
        assert_eq!(
            ids,
            ["team-c-6", "team-c-7", "team-c-8", "team-b-3", "team-a-0"],
            "to the last dispatch, then each team's next"
        );
        assert_eq!(record.omitted, 4);
        let r = replay(std::slice::from_ref(&record), None);
        assert!(r.identical, "{r:?}");
        assert_eq!(r.replayed[0].dispatched, ["team-c-6", "team-c-7"]);
    }

    #[test]
    fn a_pass_that_dispatched_nothing_writes_nothing() {
        let queued = vec![job("team-a", 1)];
        let weights = FairShareSettings::default();
        let mut journal = PassJournal::begin(
            1,
            &weights,
            BTreeMap::new(),
            &queued,
            &Usage::default(),
            &Ledger::new(),
        );
        journal.decided(
            &queued[0],
            Outcome::Waits {
                code: "quota.exceeded".into(),
            },
        );
        assert!(journal.finish().is_none());
    }
}
