//! Preemption as the dispatcher decides it (issue 38 §3): when an admitted job does
//! not fit, the pass looks for running jobs of strictly lower priority whose GPUs
//! would make it fit, and gives them notice.
//!
//! The steps (the policy is asked about one plan per series per pass; the candidates
//! of a series are read once per pass):
//! 1. **candidates**: running jobs of lower priority (their admitted terms: spec
//!    priority capped by the policy) — and, for a job its team's guarantee covers
//!    (its admission borrowed nothing), other teams' jobs on borrowed GPUs, whatever
//!    their priority (issue 39 §3) — preemptible, not preempted
//!    `FORGE_PREEMPTION_MAX_IN_WINDOW` times within `FORGE_PREEMPTION_WINDOW_S`,
//!    whole jobs with their GPUs on the series;
//! 2. **plan** (`preemption_plan.rs`): the set losing the least work — GPU-seconds
//!    since each one's last acknowledged checkpoint, plus GPUs × grace; for a job
//!    released from a notice within the window, as that notice went (the book, `book.rs`);
//! 3. **policy** (contract 0.3.0's `plan-preemption`): the plan first, then the other
//!    candidates, shown to the global chain (accept, reorder, veto) and to the chains
//!    of the victims' teams (veto); the host takes the shortest prefix of the final
//!    order that frees enough GPUs **and** makes the whole gang fit (the victims'
//!    pods taken out of the rooms);
//! 4. **notice**: each victim moves `running → preempting` in a fenced write with its
//!    preemption record. The leader's lifecycle loop (`lifecycle/release.rs`) sends
//!    the SIGTERM and releases it.
//!
//! The preemptor then **holds**: while its victims' notices run (and for a while
//! after they are released, as their pods go), it is decided first in every pass —
//! so no other job takes the freed GPUs — and plans no other preemption.

use std::collections::BTreeSet;
use std::sync::Arc;

use forge_policy_host::model::Decision;
use forge_policy_host::preemption::{PlanOutcome, PreemptionPlan, Victim};
use rustc_hash::{FxHashMap, FxHashSet};

use super::Dispatcher;
use super::book::Book;
use super::demand::{demands, reserve_unbound};
use crate::domain::JobState;
use crate::jobs::fit::{PoolDemand, Rooms};
use crate::jobs::preemption_plan::{Claim, Plan, PreemptionPlanner, Running};
use crate::store::preemptions::{AdmittedTerms, NewPreemption, PreemptionWrite};
use crate::store::{JobRecord, StoreError, Transition, now_ms};

/// The terms a job runs at: stored with its dispatch; a job dispatched before terms
/// were stored runs at its spec's priority, preemptible.
pub fn terms_of(job: &JobRecord) -> AdmittedTerms {
    job.terms.unwrap_or(AdmittedTerms {
        priority: job.spec.priority,
        preemptible: true,
        borrowed_gpus: 0,
    })
}

/// The terms an admission grants a job asking for `priority`: the lowest of it and
/// the policy's cap, preemptible unless a policy said otherwise, and the GPUs a quota
/// policy marked as borrowed.
pub fn admitted_terms(priority: i32, decision: &Decision) -> AdmittedTerms {
    match decision {
        Decision::Admit {
            priority_cap,
            preemptible,
            placement,
        } => AdmittedTerms {
            priority: priority_cap.map_or(priority, |cap| priority.min(cap)),
            preemptible: preemptible.unwrap_or(true),
            borrowed_gpus: placement.borrowed_gpus(),
        },
        _ => AdmittedTerms {
            priority,
            preemptible: true,
            borrowed_gpus: 0,
        },
    }
}

/// The pass's preemption state: what it read, and what it did so far.
pub(super) struct Preemptions<'q> {
    /// The jobs holding GPUs.
    active: &'q [Arc<JobRecord>],
    book: Book,
    /// Series the policy was asked about a plan on in this pass (one per series).
    tried: FxHashSet<String>,
    /// Each series' running jobs as candidates, read once per pass.
    running: FxHashMap<String, Vec<Running>>,
    /// Jobs given notice in this pass.
    noticed: FxHashSet<String>,
    /// The running candidates' records as read for a plan.
    fresh: FxHashMap<String, JobRecord>,
    /// A store read or write of a plan failed in this pass.
    failed: bool,
}

impl<'q> Preemptions<'q> {
    /// Whether `job` holds GPUs freed for it (it is decided first).
    pub(super) fn holds(&self, job: &str) -> bool {
        self.book.holds(job)
    }

    /// Whether what this pass found of preemption may change with time alone, or
    /// failed (`quiet.rs`): a preemptor of `queued` holding GPUs freed for it (its hold
    /// ends with time), a notice given in this pass, or a store read or write that
    /// failed (the next pass tries again).
    pub(super) fn unsettled(&self, queued: &[Arc<JobRecord>]) -> bool {
        self.failed || !self.noticed.is_empty() || queued.iter().any(|j| self.book.holds(&j.id))
    }

    pub(super) fn new(active: &'q [Arc<JobRecord>], book: Book) -> Self {
        Preemptions {
            active,
            book,
            tried: FxHashSet::default(),
            running: FxHashMap::default(),
            noticed: FxHashSet::default(),
            fresh: FxHashMap::default(),
            failed: false,
        }
    }
}

/// Why an admitted job that does not fit keeps waiting, when preemption had a say.
pub(super) struct Waits {
    pub code: String,
    pub reason: String,
}

impl Waits {
    /// A preemptor whose `n` victims are releasing their GPUs.
    fn releasing(n: u32) -> Waits {
        Waits {
            code: "preemption.releasing".into(),
            reason: format!(
                "{n} lower-priority job(s) preempted for it are releasing their GPUs; they are held for it"
            ),
        }
    }
}

/// The job the plan is for, as the planner and the policy see it.
struct Preemptor<'a> {
    job: &'a JobRecord,
    terms: AdmittedTerms,
    series: String,
    wanted: &'a [PoolDemand],
}

impl Dispatcher {
    /// Plans and gives notice for `job` (admitted by `decision`, asking `wanted`),
    /// which does not fit in `free`; `None`: preemption cannot help, it waits for the
    /// reason it does not fit.
    pub(super) async fn preempt_for(
        &self,
        st: &mut Preemptions<'_>,
        job: &JobRecord,
        decision: &Decision,
        wanted: &[PoolDemand],
        free: &mut Rooms,
    ) -> Option<Waits> {
        let cfg = &self.core.config.gateway;
        if cfg.preemption_max_in_window == 0 {
            return None;
        }
        if let Some(n) = st.book.holding.get(&job.id) {
            return Some(Waits::releasing(*n));
        }
        let series = wanted.first()?.series.clone();
        if st.tried.contains(&series) {
            return None;
        }
        let p = Preemptor {
            job,
            terms: admitted_terms(job.spec.priority, decision),
            series,
            wanted,
        };
        let short = self.shortfall(&p, free);
        // Within its team's guarantee (not borrowing), it may reclaim borrowed GPUs.
        let claim = Claim {
            priority: p.terms.priority,
            reclaims_for: (p.terms.borrowed_gpus == 0).then_some(job.team.as_str()),
        };
        let takeable = |j: &&Arc<JobRecord>| {
            let t = terms_of(j);
            j.state == JobState::Running && claim.takes(&j.team, t.priority, t.borrowed_gpus)
        };
        if !st.active.iter().any(|j| takeable(&j)) {
            return None;
        }
        if !st.running.contains_key(&p.series) {
            let running = self.running_on(st, &p.series).await;
            st.running.insert(p.series.clone(), running);
        }
        let running: Vec<Running> = st.running[&p.series]
            .iter()
            .filter(|r| !st.noticed.contains(&r.job_id))
            .cloned()
            .collect();
        let planner = PreemptionPlanner {
            max_in_window: cfg.preemption_max_in_window,
        };
        let Plan::Preempt { victims, .. } = planner.plan(claim, short, 0, &running) else {
            return None;
        };
        st.tried.insert(p.series.clone());
        let mut view = self.admission.job_view(&job.id, &job.team, &job.spec);
        view.priority = p.terms.priority;
        // A candidate's last acknowledged step, and the fleet it runs in.
        let step = |id: &str| {
            let j = st.fresh.get(id);
            (
                j.and_then(|j| j.last_checkpoint).map(|c| c.step),
                j.and_then(|j| j.fleet.clone())
                    .unwrap_or_else(|| self.fleets.first().fleet.clone()),
            )
        };
        let candidates = planner.candidates(claim, &running);
        let plan = plan_shown(&p, view, short, &victims, &candidates, step);
        let order = match self.consult(job, &plan).await {
            Ok(order) => order,
            Err(waits) => return Some(waits),
        };
        let chosen = self.fitting_prefix(st, &p, &plan, &order, short)?;
        self.give_notice(st, &p, &plan, &chosen).await
    }

    /// The policy's order for `plan`, or why the preemptor waits: a veto, or the
    /// policy failing (closed: no preemption).
    async fn consult(&self, job: &JobRecord, plan: &PreemptionPlan) -> Result<Vec<String>, Waits> {
        match self.admission.plan_preemption(plan.clone()).await {
            Ok(PlanOutcome::Proceed { order }) => Ok(order),
            Ok(PlanOutcome::Vetoed {
                plugin,
                code,
                message,
            }) => Err(Waits {
                reason: format!("a preemption for it was vetoed by {plugin}: {message}"),
                code,
            }),
            Err(e) => {
                tracing::warn!(job = %job.id, "the policy failed on a preemption plan (none made): {e}");
                Err(Waits {
                    code: "preemption.policy-failed".into(),
                    reason: format!("the policy failed on a preemption plan: {e}"),
                })
            }
        }
    }

    /// How many GPUs of its series the preemptor lacks in `free`.
    fn shortfall(&self, p: &Preemptor<'_>, free: &mut Rooms) -> u32 {
        let cfg = &self.core.config;
        let needed: u64 = p
            .wanted
            .iter()
            .filter(|d| d.series == p.series)
            .map(PoolDemand::gpus)
            .sum();
        let free_gpus = free
            .totals(&cfg.pods.tolerations)
            .get(&p.series)
            .map_or(0, |t| t.0);
        u32::try_from(needed)
            .unwrap_or(u32::MAX)
            .saturating_sub(free_gpus)
            .max(1)
    }

    /// The running jobs holding GPUs of `series`, as the planner sees them: their
    /// records read afresh (the pass's copy is re-read only when a state changes, and
    /// a checkpoint changes none).
    async fn running_on(&self, st: &mut Preemptions<'_>, series: &str) -> Vec<Running> {
        let cfg = &self.core.config;
        let ids: Vec<String> = st
            .active
            .iter()
            .filter(|j| j.state == JobState::Running && !st.noticed.contains(&j.id))
            .filter(|j| {
                demands(j, j.placement.as_ref(), cfg)
                    .iter()
                    .any(|d| d.series == series)
            })
            .map(|j| j.id.clone())
            .collect();
        let fresh = match self.core.store.get_many(ids).await {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!("reading the running jobs for a preemption plan: {e}");
                st.failed = true;
                return Vec::new();
            }
        };
        let now = now_ms();
        let running = fresh
            .iter()
            .filter(|j| j.state == JobState::Running)
            .filter_map(|j| {
                let gpus: u64 = demands(j, j.placement.as_ref(), cfg)
                    .iter()
                    .filter(|d| d.series == series)
                    .map(PoolDemand::gpus)
                    .sum();
                let terms = terms_of(j);
                let since = attempt_started_ms(j);
                Some(Running {
                    job_id: j.id.clone(),
                    team: j.team.clone(),
                    priority: terms.priority,
                    gpus: u32::try_from(gpus).ok().filter(|g| *g > 0)?,
                    running_s: secs(now - since),
                    checkpoint_age_s: j
                        .last_checkpoint
                        .filter(|c| c.at_ms >= since)
                        .map(|c| secs(now - c.at_ms)),
                    grace_s: grace_s(j),
                    preemptions_in_window: st.book.in_window.get(&j.id).copied().unwrap_or(0),
                    preemptible: terms.preemptible,
                    borrowed_gpus: terms.borrowed_gpus,
                    last_notice: st.book.last_notice(&j.id),
                })
            })
            .collect();
        for j in fresh {
            st.fresh.insert(j.id.clone(), j);
        }
        running
    }

    /// The shortest prefix of the policy's `order` that frees `short` GPUs and lets
    /// the whole gang fit with the victims' pods gone; `None` if none does.
    fn fitting_prefix(
        &self,
        st: &Preemptions<'_>,
        p: &Preemptor<'_>,
        plan: &PreemptionPlan,
        order: &[String],
        short: u32,
    ) -> Option<Vec<Victim>> {
        let mut chosen: Vec<Victim> = Vec::new();
        let mut freed = 0u32;
        for id in order {
            let v = plan.candidates.iter().find(|v| &v.job_id == id)?;
            chosen.push(v.clone());
            freed = freed.saturating_add(v.gpus);
            if freed >= short && self.fits_without(st, p, &chosen) {
                return Some(chosen);
            }
        }
        None
    }

    /// Whether the preemptor's gang fits once `victims`' pods are gone (the other
    /// active jobs' unbound machines still reserved).
    fn fits_without(&self, st: &Preemptions<'_>, p: &Preemptor<'_>, victims: &[Victim]) -> bool {
        let cfg = &self.core.config;
        let capacity = self.fleets.capacity();
        let gone: BTreeSet<&str> = victims.iter().map(|v| v.job_id.as_str()).collect();
        let mut trial = Rooms::new(capacity.rooms_without(&gone));
        let others = st
            .active
            .iter()
            .filter(|j| !gone.contains(j.id.as_str()))
            .map(|j| &**j);
        reserve_unbound(&mut trial, others, &capacity.bound_machines(), cfg);
        trial.reserve(p.wanted).is_ok()
    }

    /// Gives each victim notice (`running → preempting`, fenced, with its record);
    /// the preemptor then waits for them.
    async fn give_notice(
        &self,
        st: &mut Preemptions<'_>,
        p: &Preemptor<'_>,
        plan: &PreemptionPlan,
        victims: &[Victim],
    ) -> Option<Waits> {
        let at_ms = now_ms();
        let mut given = Vec::new();
        for v in victims {
            let grace = i64::from(v.grace_seconds) * 1000;
            let reason = format!(
                "preemption.notice: preempted by job {} (priority {} over {}); it has {}s to checkpoint and exit",
                p.job.id, p.terms.priority, v.priority, v.grace_seconds
            );
            let mut t = Transition::new(
                &v.job_id,
                JobState::Running,
                JobState::Preempting,
                Some(reason),
            );
            t.preemption = Some(PreemptionWrite::Notice(NewPreemption {
                by_job: p.job.id.clone(),
                at_ms,
                notice_ms: grace,
                gpus: v.gpus,
                series: plan.series.clone(),
                planned_lost_gpu_seconds: v.lost_gpu_seconds,
                attempt_started_ms: st.fresh.get(&v.job_id).map_or(at_ms, attempt_started_ms),
            }));
            match self.core.transition(t).await {
                Ok(_) => {
                    st.noticed.insert(v.job_id.clone());
                    self.core.metrics.preempted(&plan.series, "priority");
                    given.push(v.job_id.clone());
                }
                // It ended or was preempted meanwhile: the next pass plans again.
                Err(StoreError::Conflict { .. }) => {}
                Err(e) => {
                    tracing::warn!(job = %v.job_id, "a preemption notice was not recorded: {e}");
                    st.failed = true;
                    break;
                }
            }
        }
        if given.is_empty() {
            return None;
        }
        st.book.holding.insert(
            p.job.id.clone(),
            u32::try_from(given.len()).unwrap_or(u32::MAX),
        );
        tracing::info!(job = %p.job.id, victims = ?given, series = %plan.series, "preemption planned");
        Some(Waits {
            code: "preemption.notice".into(),
            reason: format!(
                "preempting {} lower-priority job(s) ({}) to free {} GPU(s) for it",
                given.len(),
                given.join(", "),
                victims.iter().map(|v| v.gpus).sum::<u32>()
            ),
        })
    }
}

/// When running job `j`'s attempt started: a running job's row last changed state
/// when it started running. Stored with its notice, so the release measures the work
/// lost from the same instant the plan costed it from.
fn attempt_started_ms(j: &JobRecord) -> i64 {
    j.updated_at_ms
}

/// What the policy is shown: the planned victims first (cheapest first), then the
/// other candidates in the planner's order (`preemptor`: the job as policies see it,
/// at its admitted priority; `step`: a candidate's last acknowledged step and its
/// fleet).
fn plan_shown(
    p: &Preemptor<'_>,
    preemptor: forge_policy_host::model::JobView,
    short: u32,
    victims: &[Running],
    candidates: &[&Running],
    step: impl Fn(&str) -> (Option<u64>, String),
) -> PreemptionPlan {
    let victim = |r: &Running| {
        let (step, fleet) = step(&r.job_id);
        shown_victim(r, &p.series, step, fleet)
    };
    let mut shown: Vec<Victim> = victims.iter().map(victim).collect();
    for c in candidates {
        if !victims.iter().any(|v| v.job_id == c.job_id) {
            shown.push(victim(c));
        }
    }
    PreemptionPlan {
        preemptor,
        series: p.series.clone(),
        gpus_needed: short,
        candidates: shown,
    }
}

/// A candidate as contract 0.3.0 shows it to policies (`step`: its last acknowledged
/// checkpoint's; `fleet`: the one it runs in).
fn shown_victim(r: &Running, series: &str, step: Option<u64>, fleet: String) -> Victim {
    Victim {
        job_id: r.job_id.clone(),
        team: r.team.clone(),
        priority: r.priority,
        gpus: r.gpus,
        series: series.to_string(),
        fleet,
        running_seconds: r.running_s,
        checkpoint_age_seconds: r.checkpoint_age_s,
        checkpoint_step: step,
        // Contract 0.3.0 is frozen with the worst case as this figure; the plan's
        // order (the host's) weighs what the job's last notice showed.
        lost_gpu_seconds: r.worst_case_lost_gpu_seconds(),
        grace_seconds: r.grace_s,
        preemptions_in_window: r.preemptions_in_window,
    }
}

/// Milliseconds as whole seconds (negative: 0).
fn secs(ms: i64) -> u64 {
    u64::try_from(ms / 1000).unwrap_or(0)
}

/// The grace a job gets once noticed, in seconds.
fn grace_s(job: &JobRecord) -> u32 {
    u32::try_from(job.spec.deadlines.checkpoint_grace_s()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use forge_policy_host::model::{DEFAULT_FLEET, Decision, Placement};

    use super::*;
    use crate::jobs::preemption_plan::LastNotice;

    /// Policies are shown contract 0.3.0's `lost-gpu-seconds` as that frozen version
    /// defines it, the worst case, even when the planner expects less (the job
    /// checkpointed on its last notice).
    #[test]
    fn policies_are_shown_the_worst_case_whatever_the_last_notice_showed() {
        let running = |last_notice| Running {
            job_id: "saver".into(),
            team: "team-a".into(),
            priority: 0,
            gpus: 8,
            running_s: 3600,
            checkpoint_age_s: Some(600),
            grace_s: 60,
            preemptions_in_window: 1,
            preemptible: true,
            borrowed_gpus: 0,
            last_notice,
        };
        let worst = 8.0 * (600.0 + 60.0);
        for last_notice in [
            LastNotice::Unknown,
            LastNotice::Saved { after_s: 5 },
            LastNotice::Lost { after_s: 60 },
        ] {
            let r = running(last_notice);
            let shown = shown_victim(&r, "h100", Some(42), DEFAULT_FLEET.into());
            assert_eq!(shown.lost_gpu_seconds, worst, "{last_notice:?}");
            assert_eq!(
                (
                    shown.checkpoint_step,
                    shown.checkpoint_age_seconds,
                    shown.grace_seconds
                ),
                (Some(42), Some(600), 60)
            );
        }
        assert!(
            running(LastNotice::Saved { after_s: 5 }).lost_gpu_seconds() < worst,
            "the planner itself expects less of a job that saved"
        );
    }

    #[test]
    fn terms_are_the_spec_priority_under_the_policy_cap() {
        let admit = |cap: Option<i32>, preemptible: Option<bool>| Decision::Admit {
            placement: Arc::new(Placement::default()),
            priority_cap: cap,
            preemptible,
        };
        assert_eq!(
            admitted_terms(500, &admit(Some(100), None)),
            AdmittedTerms {
                priority: 100,
                preemptible: true,
                borrowed_gpus: 0,
            },
            "a member cannot promote itself past the cap"
        );
        let mut borrowing = Placement::default();
        borrowing.pools.push(Default::default());
        borrowing.pools[0].annotations.insert(
            forge_policy_host::model::BORROWED_GPUS_ANNOTATION.into(),
            "8".into(),
        );
        let marked = Decision::Admit {
            placement: Arc::new(borrowing),
            priority_cap: None,
            preemptible: None,
        };
        assert_eq!(admitted_terms(0, &marked).borrowed_gpus, 8);
        let said = admitted_terms(0, &marked).sentence();
        assert!(
            said.starts_with("Runs at priority 0, preemptible; 8 of its GPUs are borrowed"),
            "{said}"
        );
        assert_eq!(
            admitted_terms(50, &admit(Some(100), Some(false))).priority,
            50
        );
        assert!(!admitted_terms(50, &admit(None, Some(false))).preemptible);
        assert_eq!(admitted_terms(-5, &admit(None, None)).priority, -5);
    }
}
