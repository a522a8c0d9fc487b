//! Which running jobs to preempt for a higher-priority job that cannot fit (issue 38
//! §3): the set of whole jobs — never part of a RayJob — whose GPUs make room, chosen
//! to lose the least work.
//!
//! A victim's cost is the work preempting it throws away: the GPU-seconds since its
//! last acknowledged checkpoint (since it started, if it never acknowledged one), plus
//! its GPUs × the grace it is given to checkpoint and exit. A job that answered a
//! notice within the policy's window is costed by how it answered ([`LastNotice`]):
//! one that acknowledged a checkpoint after it lost only the time it took, and is
//! expected to again; one that did not lost its unsaved work and the time until it
//! was released. Among the sets that free
//! enough GPUs, the planner takes the one of least total cost (a covering knapsack,
//! solved exactly over GPU counts), then the one with fewer victims, then lower
//! priorities, then job ids: the same inputs always give the same plan.
//!
//! Only jobs of strictly lower priority are candidates (equal priorities never preempt
//! each other) — or, for a job its team's guaranteed quota covers ([`Claim`]), jobs
//! of other teams running on borrowed GPUs, whatever their priority (issue 39 §3:
//! borrowed GPUs are reclaimed from borrowers only) — and not jobs a policy made
//! non-preemptible, nor jobs preempted
//! `max_in_window` times in the policy's window (so nothing cycles). The result is
//! per series of GPUs; the dispatcher still checks the gang fit with the victims'
//! machines freed before it acts, and shows the candidates to `plan-preemption`
//! (contract 0.3.0) in [`PreemptionPlanner::candidates`]' order.

use std::cmp::Ordering;

/// A running job the planner may preempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Running {
    pub job_id: String,
    pub team: String,
    /// Its priority (after the policy's cap).
    pub priority: i32,
    /// GPUs of the whole job on the series being planned for.
    pub gpus: u32,
    /// Seconds since this run started.
    pub running_s: u64,
    /// Seconds since its last acknowledged checkpoint (`None`: none this run).
    pub checkpoint_age_s: Option<u64>,
    /// The grace it gets between the notice and its release.
    pub grace_s: u32,
    /// Times it was preempted within the policy's window.
    pub preemptions_in_window: u32,
    /// `false`: a policy protected it.
    pub preemptible: bool,
    /// GPUs it runs on beyond its team's guarantee (0: none borrowed).
    pub borrowed_gpus: u32,
    /// How it answered its last notice within the window.
    pub last_notice: LastNotice,
}

/// How a job answered its last preemption notice, as its release showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LastNotice {
    /// No notice within the window (or one still running): the planner assumes the
    /// worst a notice can cost, the unsaved work and the whole grace.
    #[default]
    Unknown,
    /// It acknowledged a checkpoint after the notice and was released `after_s`
    /// seconds after it: nothing before the notice was lost.
    Saved { after_s: u32 },
    /// It was released `after_s` seconds after the notice without a checkpoint since
    /// (it exited, or its grace ran out): its unsaved work was lost.
    Lost { after_s: u32 },
}

/// Who asks for GPUs: a job's priority and, when its team's guaranteed quota covers
/// it, its team (it may then reclaim other teams' borrowed GPUs). A priority alone
/// converts into a claim that reclaims nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim<'t> {
    pub priority: i32,
    /// `Some(team)`: the job is within `team`'s guarantee.
    pub reclaims_for: Option<&'t str>,
}

impl From<i32> for Claim<'_> {
    fn from(priority: i32) -> Self {
        Claim {
            priority,
            reclaims_for: None,
        }
    }
}

impl Claim<'_> {
    /// Whether `r` may be preempted for this claim (its protections aside).
    pub fn may_take(&self, r: &Running) -> bool {
        self.takes(&r.team, r.priority, r.borrowed_gpus)
    }

    /// Whether a job of `team` running at `priority` with `borrowed` GPUs may be
    /// preempted for this claim: a lower priority, or borrowed GPUs of another team
    /// when the claim reclaims.
    pub fn takes(&self, team: &str, priority: i32, borrowed: u32) -> bool {
        priority < self.priority
            || self
                .reclaims_for
                .is_some_and(|own| borrowed > 0 && team != own)
    }
}

impl Running {
    /// GPU-seconds preempting it is expected to lose, what the planner minimises: the
    /// work since its last acknowledged checkpoint (or its start) and the time it
    /// keeps its GPUs after the notice — as its last notice went ([`LastNotice`]),
    /// else the worst case ([`Running::worst_case_lost_gpu_seconds`]).
    pub fn lost_gpu_seconds(&self) -> f64 {
        let grace = self.grace_s;
        let seconds = match self.last_notice {
            LastNotice::Unknown => return self.worst_case_lost_gpu_seconds(),
            LastNotice::Saved { after_s } => f64::from(after_s.min(grace)),
            LastNotice::Lost { after_s } => self.unsaved_s() + f64::from(after_s.min(grace)),
        };
        f64::from(self.gpus) * seconds
    }

    /// The most preempting it can lose: all the work since its last acknowledged
    /// checkpoint (or its start) and its GPUs × the whole grace — contract 0.3.0's
    /// `lost-gpu-seconds`, which policies are shown.
    pub fn worst_case_lost_gpu_seconds(&self) -> f64 {
        f64::from(self.gpus) * (self.unsaved_s() + f64::from(self.grace_s))
    }

    fn unsaved_s(&self) -> f64 {
        self.checkpoint_age_s.unwrap_or(self.running_s) as f64
    }
}

/// The planner's settings (policy settings; the defaults are the issue's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreemptionPlanner {
    /// A job preempted this many times within the window is not preempted again.
    pub max_in_window: u32,
}

impl Default for PreemptionPlanner {
    fn default() -> Self {
        PreemptionPlanner { max_in_window: 3 }
    }
}

/// What the planner decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Nothing to preempt: the GPUs are free already.
    Fits,
    /// Preempt these jobs (cheapest first); together they lose `lost_gpu_seconds`.
    Preempt {
        victims: Vec<Running>,
        lost_gpu_seconds: f64,
    },
    /// No set of candidates frees enough GPUs.
    NoRoom,
}

impl PreemptionPlanner {
    /// The jobs that may be preempted for `claim` (a job's priority, or a [`Claim`]),
    /// least lost work per GPU freed first (the order policies are shown).
    pub fn candidates<'a, 't>(
        &self,
        claim: impl Into<Claim<'t>>,
        running: &'a [Running],
    ) -> Vec<&'a Running> {
        let claim = claim.into();
        let mut out: Vec<&Running> = running
            .iter()
            .filter(|r| {
                claim.may_take(r)
                    && r.preemptible
                    && r.gpus > 0
                    && r.preemptions_in_window < self.max_in_window
            })
            .collect();
        out.sort_by(|a, b| {
            let per_gpu = |r: &Running| r.lost_gpu_seconds() / f64::from(r.gpus);
            per_gpu(a)
                .partial_cmp(&per_gpu(b))
                .unwrap_or(Ordering::Equal)
                .then(a.priority.cmp(&b.priority))
                .then(a.job_id.cmp(&b.job_id))
        });
        out
    }

    /// The cheapest set of whole jobs to preempt so that a job of `claim` (its
    /// priority, or a [`Claim`]) needing `needed` GPUs fits where `free` are free.
    pub fn plan<'t>(
        &self,
        claim: impl Into<Claim<'t>>,
        needed: u32,
        free: u32,
        running: &[Running],
    ) -> Plan {
        let Some(short) = needed.checked_sub(free).filter(|s| *s > 0) else {
            return Plan::Fits;
        };
        let candidates = self.candidates(claim, running);
        match cheapest_cover(&candidates, short) {
            Some(mut victims) => {
                victims.sort_by(|a, b| {
                    a.lost_gpu_seconds()
                        .partial_cmp(&b.lost_gpu_seconds())
                        .unwrap_or(Ordering::Equal)
                        .then(a.job_id.cmp(&b.job_id))
                });
                let lost_gpu_seconds = victims.iter().map(Running::lost_gpu_seconds).sum();
                Plan::Preempt {
                    victims,
                    lost_gpu_seconds,
                }
            }
            None => Plan::NoRoom,
        }
    }
}

/// The best way found so far to free at least `g` GPUs: its cost, victim count, sum of
/// priorities, and the candidates taken (indices).
#[derive(Debug, Clone)]
struct Best {
    cost: f64,
    count: usize,
    priorities: i64,
    taken: Vec<usize>,
}

impl Best {
    fn better_than(&self, other: &Best) -> bool {
        const EPS: f64 = 1e-9;
        if (self.cost - other.cost).abs() > EPS {
            return self.cost < other.cost;
        }
        (self.count, self.priorities, &self.taken) < (other.count, other.priorities, &other.taken)
    }
}

/// The least-cost set of candidates whose GPUs add up to at least `short`: a 0/1
/// covering knapsack over GPU counts (capped at `short`), exact and deterministic.
fn cheapest_cover(candidates: &[&Running], short: u32) -> Option<Vec<Running>> {
    let cap = short as usize;
    // best[g]: the best set freeing min(total, cap) = g GPUs, over the candidates so far.
    let mut best: Vec<Option<Best>> = vec![None; cap + 1];
    best[0] = Some(Best {
        cost: 0.0,
        count: 0,
        priorities: 0,
        taken: Vec::new(),
    });
    for (i, c) in candidates.iter().enumerate() {
        let gpus = c.gpus as usize;
        // Downwards over the previous row (each candidate taken at most once).
        for g in (0..=cap).rev() {
            let Some(from) = best[g].clone() else {
                continue;
            };
            let to = (g + gpus).min(cap);
            let mut taken = from.taken.clone();
            taken.push(i);
            let next = Best {
                cost: from.cost + c.lost_gpu_seconds(),
                count: from.count + 1,
                priorities: from.priorities + i64::from(c.priority),
                taken,
            };
            if best[to].as_ref().is_none_or(|b| next.better_than(b)) {
                best[to] = Some(next);
            }
        }
    }
    best[cap]
        .take()
        .map(|b| b.taken.into_iter().map(|i| candidates[i].clone()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: &str, priority: i32, gpus: u32, ckpt_age: Option<u64>) -> Running {
        Running {
            job_id: id.into(),
            team: "t".into(),
            priority,
            gpus,
            running_s: 7_200,
            checkpoint_age_s: ckpt_age,
            grace_s: 60,
            preemptions_in_window: 0,
            preemptible: true,
            borrowed_gpus: 0,
            last_notice: LastNotice::Unknown,
        }
    }

    fn victims(p: Plan) -> Vec<String> {
        match p {
            Plan::Preempt { victims, .. } => victims.into_iter().map(|v| v.job_id).collect(),
            other => panic!("expected a preemption, got {other:?}"),
        }
    }

    #[test]
    fn a_job_that_checkpointed_on_its_last_notice_is_costed_at_the_time_it_took() {
        let answered = |id: &str, age: u64, last_notice| Running {
            last_notice,
            ..job(id, 0, 8, Some(age))
        };
        let saver = answered("saver", 1_800, LastNotice::Saved { after_s: 20 });
        assert_eq!(
            saver.lost_gpu_seconds(),
            8.0 * 20.0,
            "its unsaved work is not"
        );
        let ignorer = answered("ignorer", 30, LastNotice::Lost { after_s: 60 });
        assert_eq!(ignorer.lost_gpu_seconds(), 8.0 * (30.0 + 60.0));
        let quitter = answered("quitter", 30, LastNotice::Lost { after_s: 5 });
        assert_eq!(quitter.lost_gpu_seconds(), 8.0 * (30.0 + 5.0));
        let slow = answered("slow", 30, LastNotice::Saved { after_s: 600 });
        assert_eq!(
            slow.lost_gpu_seconds(),
            8.0 * 60.0,
            "never more than the grace"
        );
        for r in [&saver, &ignorer, &quitter, &slow] {
            let worst = 8.0 * (r.checkpoint_age_s.unwrap_or(0) as f64 + 60.0);
            assert_eq!(r.worst_case_lost_gpu_seconds(), worst, "{}", r.job_id);
            assert!(r.lost_gpu_seconds() <= worst, "{}", r.job_id);
        }
        // An unknown job with a fresh checkpoint still costs its whole grace: the one
        // known to checkpoint on notice is taken instead, though its checkpoint is old.
        let unknown = job("unknown", 0, 8, Some(10));
        let plan = PreemptionPlanner::default().plan(100, 8, 0, &[unknown, ignorer, saver]);
        assert_eq!(victims(plan), ["saver"]);
    }

    #[test]
    fn the_freshest_checkpoint_is_preempted() {
        let running = [
            job("old", 0, 8, Some(1_800)),
            job("fresh", 0, 8, Some(30)),
            job("mid", 0, 8, Some(600)),
        ];
        let plan = PreemptionPlanner::default().plan(100, 8, 0, &running);
        assert_eq!(victims(plan), ["fresh"]);
    }

    #[test]
    fn whole_gangs_only_and_the_cheapest_set_that_covers() {
        // 8 GPUs are needed. A 16-GPU gang with a fresh checkpoint loses less than
        // two 4-GPU jobs that never checkpointed; it goes whole.
        let running = [
            job("gang", 0, 16, Some(10)),
            job("a", 0, 4, None),
            job("b", 0, 4, None),
        ];
        let plan = PreemptionPlanner::default().plan(100, 8, 0, &running);
        match &plan {
            Plan::Preempt {
                victims,
                lost_gpu_seconds,
            } => {
                assert_eq!(victims.len(), 1);
                assert_eq!(victims[0].gpus, 16, "never part of a job");
                assert_eq!(*lost_gpu_seconds, 16.0 * 70.0);
            }
            other => panic!("{other:?}"),
        }
        // Two small ones together when they are the cheaper cover.
        let running = [
            job("gang", 0, 16, Some(3_000)),
            job("a", 0, 4, Some(10)),
            job("b", 0, 4, Some(20)),
        ];
        assert_eq!(
            victims(PreemptionPlanner::default().plan(100, 8, 0, &running)),
            ["a", "b"]
        );
    }

    #[test]
    fn a_job_that_never_acknowledged_goes_only_when_nothing_cheaper_exists() {
        let never = job("never", 0, 8, None);
        let acked = job("acked", 0, 8, Some(3_600));
        let plan = PreemptionPlanner::default().plan(100, 8, 0, &[never.clone(), acked]);
        assert_eq!(victims(plan), ["acked"]);
        let plan = PreemptionPlanner::default().plan(100, 8, 0, &[never]);
        assert_eq!(victims(plan), ["never"]);
    }

    #[test]
    fn equal_priorities_protected_and_repeat_victims_are_never_candidates() {
        let mut protected = job("protected", 0, 8, Some(1));
        protected.preemptible = false;
        let mut repeated = job("repeated", 0, 8, Some(1));
        repeated.preemptions_in_window = 3;
        let running = [
            job("peer", 100, 8, Some(1)),
            protected,
            repeated,
            job("small", 0, 4, Some(1)),
        ];
        let planner = PreemptionPlanner::default();
        assert_eq!(planner.plan(100, 8, 0, &running), Plan::NoRoom);
        assert_eq!(
            victims(planner.plan(100, 8, 4, &running)),
            ["small"],
            "4 free + the small job's 4"
        );
        assert_eq!(planner.plan(100, 8, 8, &running), Plan::Fits);
        assert!(
            planner
                .candidates(100, &running)
                .iter()
                .all(|c| c.job_id == "small")
        );
    }

    #[test]
    fn a_team_within_its_guarantee_reclaims_borrowed_gpus_from_other_teams_only() {
        let lent = |id: &str, team: &str, borrowed: u32, age: u64| Running {
            team: team.into(),
            borrowed_gpus: borrowed,
            ..job(id, 0, 8, Some(age))
        };
        let running = [
            lent("a-guaranteed", "team-a", 0, 10),
            lent("a-borrowing", "team-a", 8, 3_000),
            lent("b-borrowing", "team-b", 8, 20),
        ];
        let claim = Claim {
            priority: 0,
            reclaims_for: Some("team-b"),
        };
        let planner = PreemptionPlanner::default();
        // Equal priorities: only the borrowers of other teams, the cheapest of them
        // (the guaranteed job would lose less, and is not a candidate).
        assert_eq!(
            victims(planner.plan(claim, 8, 0, &running)),
            ["a-borrowing"]
        );
        assert_eq!(
            planner.plan(0, 8, 0, &running),
            Plan::NoRoom,
            "no claim, no reclaim"
        );
        let borrowing_claim = Claim {
            reclaims_for: None,
            ..claim
        };
        assert_eq!(planner.plan(borrowing_claim, 8, 0, &running), Plan::NoRoom);
    }
}
