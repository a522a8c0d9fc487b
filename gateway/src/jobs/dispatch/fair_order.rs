//! The order a pass decides the queue in (issue 39): not first come, first served
//! across teams, but
//!
//! 1. a preemptor holding GPUs freed for it first (nobody else takes them);
//! 2. then the higher priority (as the policy capped it when it last decided the
//!    job; the spec's until then);
//! 3. then the team with the lowest share of the job's series — its decayed usage
//!    plus the GPUs it holds, this pass's admissions included ([`Usage::share`]);
//! 4. then submission order, within a team and between equal shares.
//!
//! Each team's jobs of one class (1–2) form a lane in submission order, and a heap
//! picks the lane whose head comes first. A team's share changes only when one of
//! its own jobs is admitted, so only the lane just served is weighed again: a pass
//! over `n` queued jobs of `t` teams costs `O(n log t)`.
//!
//! [`Usage::share`]: super::fair_share::Usage::share

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::store::JobRecord;
use crate::store::dispatch_journal::DecidedJob;

/// The class of a queued job: holding freed GPUs, then priority (higher first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class {
    /// `false` for a preemptor holding freed GPUs (sorts first).
    not_holding: bool,
    priority: Reverse<i32>,
}

impl Class {
    pub fn new(holding: bool, priority: i32) -> Self {
        Class {
            not_holding: !holding,
            priority: Reverse(priority),
        }
    }
}

/// What the order reads of a queued job: the live queue's records, and the dispatch
/// journal's (`replay.rs`), are ordered by the same code.
pub trait Queued {
    /// Its team.
    fn team(&self) -> &str;
    /// The series it waits on (its team's share is read there).
    fn series(&self) -> &str;
    /// Its submission order.
    fn seq(&self) -> i64;
}

impl Queued for Arc<JobRecord> {
    fn team(&self) -> &str {
        &self.team
    }
    fn series(&self) -> &str {
        series_of(self)
    }
    fn seq(&self) -> i64 {
        self.seq
    }
}

impl Queued for DecidedJob {
    fn team(&self) -> &str {
        &self.team
    }
    fn series(&self) -> &str {
        &self.series
    }
    fn seq(&self) -> i64 {
        self.seq
    }
}

/// One team's queued jobs of one class, oldest first.
struct Lane<'q, J> {
    class: Class,
    jobs: VecDeque<&'q J>,
}

/// A lane's head as the heap weighs it.
#[derive(Debug, Clone, Copy)]
struct Head {
    class: Class,
    share: f64,
    seq: i64,
    lane: usize,
}

impl Head {
    fn key(&self) -> (Class, i64, usize) {
        (self.class, self.seq, self.lane)
    }
}

impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        self.class
            .cmp(&other.class)
            .then(self.share.total_cmp(&other.share))
            .then(self.key().cmp(&other.key()))
    }
}

impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head {}

/// The series a queued job waits on.
pub fn series_of(job: &JobRecord) -> &str {
    job.queue_series.as_deref().unwrap_or("unplaced")
}

/// The queue of one pass in fair order; [`FairOrder::next`] hands out one job at a
/// time, weighing the lane it came from again on the next call.
pub struct FairOrder<'q, J> {
    lanes: Vec<Lane<'q, J>>,
    heap: BinaryHeap<Reverse<Head>>,
    /// The lane whose head was handed out last.
    served: Option<usize>,
}

impl<'q, J: Queued> FairOrder<'q, J> {
    /// The lanes of `queued` (in submission order), each job classed by `class`, and
    /// the first heads weighed by `share(team, series)`.
    pub fn new(
        queued: &'q [J],
        class: impl Fn(&J) -> Class,
        share: impl Fn(&str, &str) -> f64,
    ) -> Self {
        let mut index: FxHashMap<(Class, &'q str), usize> = FxHashMap::default();
        let mut lanes: Vec<Lane<'q, J>> = Vec::new();
        for job in queued {
            let c = class(job);
            let i = *index.entry((c, job.team())).or_insert_with(|| {
                lanes.push(Lane {
                    class: c,
                    jobs: VecDeque::new(),
                });
                lanes.len() - 1
            });
            lanes[i].jobs.push_back(job);
        }
        for lane in &mut lanes {
            lane.jobs.make_contiguous().sort_by_key(|j| j.seq());
        }
        let mut order = FairOrder {
            heap: BinaryHeap::with_capacity(lanes.len()),
            lanes,
            served: None,
        };
        for i in 0..order.lanes.len() {
            order.weigh(i, &share);
        }
        order
    }

    /// The next job to decide, `share` answering each team's share now (after the
    /// decisions so far); `None` when every job was handed out.
    pub fn next(&mut self, share: impl Fn(&str, &str) -> f64) -> Option<&'q J> {
        if let Some(i) = self.served.take() {
            self.weigh(i, &share);
        }
        let Reverse(head) = self.heap.pop()?;
        let job = self.lanes[head.lane].jobs.pop_front()?;
        self.served = Some(head.lane);
        Some(job)
    }

    /// Puts lane `i`'s head (if any) on the heap with its team's share now.
    fn weigh(&mut self, i: usize, share: &impl Fn(&str, &str) -> f64) {
        let lane = &self.lanes[i];
        if let Some(job) = lane.jobs.front() {
            self.heap.push(Reverse(Head {
                class: lane.class,
                share: share(job.team(), job.series()),
                seq: job.seq(),
                lane: i,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use super::*;
    use crate::store::conformance::jobs::queued_record;

    fn queued(specs: &[(&str, i64, i32)]) -> Vec<Arc<JobRecord>> {
        specs
            .iter()
            .map(|(team, seq, priority)| queued_record(team, *seq, *priority))
            .collect()
    }

    /// The order with each team's share = its base + 8 per job handed out (every
    /// job admitted, 8 GPUs each).
    fn order(jobs: &[Arc<JobRecord>], base: &[(&str, f64)], holding: &[&str]) -> Vec<String> {
        let shares: RefCell<BTreeMap<String, f64>> =
            RefCell::new(base.iter().map(|(t, s)| ((*t).to_string(), *s)).collect());
        let share = |team: &str, _: &str| shares.borrow().get(team).copied().unwrap_or(0.0);
        let class =
            |j: &Arc<JobRecord>| Class::new(holding.contains(&j.id.as_str()), j.spec.priority);
        let mut order = FairOrder::new(jobs, class, share);
        let mut out = Vec::new();
        while let Some(job) = order.next(share) {
            *shares.borrow_mut().entry(job.team.clone()).or_default() += 8.0;
            out.push(job.id.clone());
        }
        out
    }

    #[test]
    fn a_team_with_less_share_goes_before_a_busy_teams_backlog() {
        // team-b holds 16 GPUs and queued four jobs before team-c's one.
        let jobs = queued(&[
            ("team-b", 1, 0),
            ("team-b", 2, 0),
            ("team-b", 3, 0),
            ("team-b", 4, 0),
            ("team-c", 5, 0),
        ]);
        assert_eq!(
            order(&jobs, &[("team-b", 16.0)], &[]),
            ["team-c-5", "team-b-1", "team-b-2", "team-b-3", "team-b-4"]
        );
    }

    #[test]
    fn equal_shares_alternate_and_keep_submission_order_within_a_team() {
        let jobs = queued(&[
            ("team-a", 1, 0),
            ("team-a", 2, 0),
            ("team-b", 3, 0),
            ("team-b", 4, 0),
        ]);
        assert_eq!(
            order(&jobs, &[], &[]),
            ["team-a-1", "team-b-3", "team-a-2", "team-b-4"]
        );
    }

    #[test]
    fn priority_comes_before_share_and_a_holding_preemptor_before_all() {
        let jobs = queued(&[
            ("team-a", 1, 0),
            ("team-b", 2, 50),
            ("team-c", 3, 0),
            ("team-a", 4, 10),
        ]);
        assert_eq!(
            order(&jobs, &[("team-b", 100.0), ("team-a", 50.0)], &[]),
            ["team-b-2", "team-a-4", "team-c-3", "team-a-1"]
        );
        assert_eq!(
            order(&jobs, &[], &["team-c-3"]),
            ["team-c-3", "team-b-2", "team-a-4", "team-a-1"]
        );
    }

    #[test]
    fn one_team_alone_is_first_come_first_served() {
        let jobs = queued(&[("team-a", 3, 0), ("team-a", 1, 0), ("team-a", 2, 0)]);
        assert_eq!(
            order(&jobs, &[("team-a", 5.0)], &[]),
            ["team-a-1", "team-a-2", "team-a-3"]
        );
    }
}
