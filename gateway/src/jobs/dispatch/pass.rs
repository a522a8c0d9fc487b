//! One dispatcher pass over the queue, in three named steps:
//!
//! 1. **reserve** ([`Dispatcher::reserve`]): read the unfinished jobs (only what changed
//!    since the last pass), count every team's usage (and charge what each held since
//!    the last pass to the fair-share ledger), and take out of the free rooms the
//!    machines of dispatched jobs the scheduler has not bound yet;
//! 2. **decide** ([`Decide::job`], for each queued job in fair order, `fair_order.rs`:
//!    priority, then the team with the least share, then submission): ask the policy
//!    — or reuse its last decision while the policy, the view and the team's usage are
//!    what it was made from — then, for an admitted job, check the gang fit against
//!    what this pass has taken so far; a job that waits gets its standing;
//! 3. **create** ([`Dispatcher::create_admitted`]): each admitted job's dispatch, which
//!    starts as soon as it is admitted and placed, while the rest of the queue is still
//!    decided (at most `CREATE_CONCURRENCY` at once).
//!
//! The pass ends by publishing the standings and the usage, and keeping the decisions
//! of the jobs that still wait. A pass whose inputs did not move since a settled one
//! is skipped (`quiet.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use forge_policy_host::model::{ClusterView, Decision, Placement, SeriesUsage, Shares};
use futures::channel::mpsc;
use futures::{SinkExt, StreamExt};

use super::book::Book;
use super::decision_memo::{Remembered, Table};
use super::demand::{
    add_ahead, adjusted, gang, ledger_of, reserve_unbound, series_gpus, usage_ahead,
};
use super::fair_order::{Class, FairOrder};
use super::fair_share::Usage;
use super::journal::PassJournal;
use super::preempt::{Preemptions, admitted_terms};
use super::quiet::Inputs;
use super::standing::Standing;
use super::{CREATE_CONCURRENCY, Dispatcher};
use crate::admission::usage::{self, Ledger};
use crate::admission::{self, Path};
use crate::domain::JobState;
use crate::jobs::error::JobError;
use crate::jobs::fair_shares::{Entitlement, for_policies, table};
use crate::jobs::fit::Rooms;
use crate::jobs::queue::Standings;
use crate::policy::Evaluated;
use crate::store::dispatch_journal::{Outcome, PassRecord, SeriesGpus};
use crate::store::{AdmittedTerms, JobRecord, NewDecision, Transition, now_ms};

/// An admitted job on its way to its create: the job, the fleet its gang fits in, where
/// it goes there, the decision stored with the dispatch, and its admitted terms.
type Admitted = (
    Arc<JobRecord>,
    String,
    Placement,
    NewDecision,
    AdmittedTerms,
);

/// What the reserve step read and counted.
struct Reserved {
    queued: Vec<Arc<JobRecord>>,
    /// The jobs holding GPUs (preemption's candidates).
    active: Vec<Arc<JobRecord>>,
    /// Recent preemptions (the window's counts, the preemptors' holds).
    book: Book,
    free: Rooms,
    ledger: Ledger,
    /// Every team's decayed usage (fair share).
    usage: Usage,
    /// Whether every unfinished job was listed (false: the copy was brought up to date
    /// from the job feed, or nothing was written since the last pass).
    listed: bool,
    /// Records read from the store this time.
    records_read: usize,
    /// Unix milliseconds the pass began.
    at_ms: i64,
    /// Every team's standing, as plugins read it.
    shares: Shares,
    /// The cluster view as the capacity caches had it (the shares' and the pass's).
    snapshot: ClusterView,
}

impl Dispatcher {
    /// One pass over the queue, skipped when nothing it decides from moved since a
    /// settled pass (`quiet.rs`); returns how many jobs were dispatched.
    pub async fn dispatch_pass(&self) -> Result<usize, JobError> {
        let inputs = self.inputs().await?;
        if let Some(i) = &inputs
            && self.quiet.nothing_to_decide(i, Instant::now())
        {
            self.core.metrics.dispatch_pass_quiet();
            return Ok(0);
        }
        let (dispatched, settled) = self.full_pass().await?;
        self.quiet.full_pass(inputs, settled, Instant::now());
        Ok(dispatched)
    }

    /// What a pass decides from, as versions (`None`: the store cannot tell cheaply
    /// whether it changed).
    async fn inputs(&self) -> Result<Option<Inputs>, JobError> {
        let Some(store) = self.core.store.change_version().await? else {
            return Ok(None);
        };
        Ok(Some(Inputs {
            store,
            cluster: self.fleets.capacity().generation(),
            policy: self.admission.policy_generation(),
        }))
    }

    /// One pass that decides the whole queue, even when nothing changed; how many jobs
    /// it dispatched, and whether it settled (`quiet.rs`).
    pub async fn full_pass(&self) -> Result<(usize, bool), JobError> {
        let started = Instant::now();
        let Reserved {
            queued,
            active,
            book,
            free,
            ledger,
            usage,
            listed,
            records_read,
            at_ms,
            shares,
            snapshot,
        } = self.reserve().await?;
        if queued.is_empty() {
            self.publish(Standings::default(), ledger, &Default::default());
            self.decisions.keep(Table::default());
            return Ok((0, true));
        }
        let read = started.elapsed();
        let (to_create, admitted) = mpsc::channel::<Admitted>(CREATE_CONCURRENCY);
        let preemptions = Preemptions::new(&active, book);
        let decide = async {
            let mut decide = Decide::new(
                self,
                free,
                ledger,
                (&queued, at_ms),
                to_create,
                preemptions,
                (usage, shares, snapshot),
            );
            let mut order = decide.order(&queued);
            while let Some(job) = order.next(|team, series| decide.rank(team, series)) {
                decide.job(job).await;
            }
            let decided = started.elapsed();
            let settled =
                decide.settled && !decide.preemptions.unsettled(&queued) && self.fair.ledger_read();
            let journaled = decide.finish(&queued);
            (decided, journaled, settled)
        };
        let ((decided, journaled, settled), dispatched) =
            tokio::join!(decide, self.create_admitted(admitted));
        if let Some(record) = journaled {
            self.journal(record).await;
        }
        // Where a pass's time goes: reading the queue, deciding it (creates run
        // meanwhile), the creates still running after the last decision.
        tracing::debug!(
            queued = queued.len(),
            listed,
            records_read,
            dispatched,
            read_ms = read.as_millis(),
            decide_ms = (decided - read).as_millis(),
            creates_after_ms = (started.elapsed() - decided).as_millis(),
            "dispatcher pass"
        );
        Ok((dispatched, settled))
    }

    /// Step 1: the unfinished jobs, every team's usage, and the free rooms less the
    /// machines active jobs hold that the scheduler has not bound yet (bound ones are
    /// in the capacity caches already).
    async fn reserve(&self) -> Result<Reserved, JobError> {
        let unfinished = self.records.unfinished(self.core.store.as_ref()).await?;
        let cfg = &self.core.config;
        let capacity = self.fleets.capacity();
        let mut free = Rooms::new(capacity.rooms());
        let ledger = ledger_of(&unfinished.active, &unfinished.queued, cfg);
        let active = unfinished.active.iter().map(|j| &**j);
        reserve_unbound(&mut free, active, &capacity.bound_machines(), cfg);
        let window_ms =
            i64::try_from(cfg.gateway.preemption_window_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        let now = now_ms();
        let recent = self
            .core
            .store
            .preemptions_since(now.saturating_sub(window_ms))
            .await?;
        let fence = self.core.term.as_ref().map(crate::leader::Term::fence);
        let usage = self
            .fair
            .pass(self.core.store.as_ref(), fence, &ledger, now)
            .await;
        let snapshot = capacity.snapshot();
        let shares = for_policies(&table(
            &snapshot,
            &ledger,
            &self.fair.records(),
            self.admission.fair_share(),
            cfg.gateway.fair_share_half_life_s,
            now,
            None,
        ));
        self.admission.usage().publish_shares(&shares);
        Ok(Reserved {
            queued: unfinished.queued,
            active: unfinished.active,
            book: Book::of(&recent, now),
            free,
            ledger,
            usage,
            listed: unfinished.listed,
            records_read: unfinished.read,
            at_ms: now,
            shares,
            snapshot,
        })
    }

    /// Step 3: dispatches the admitted jobs as they come (at most
    /// `CREATE_CONCURRENCY` at once) until the decide step closes the channel; how
    /// many were dispatched.
    async fn create_admitted(&self, admitted: mpsc::Receiver<Admitted>) -> usize {
        admitted
            .map(|(job, fleet, placement, decision, terms)| async move {
                match self
                    .create(&job, fleet, placement, Some(decision), terms)
                    .await
                {
                    Ok(created) => created,
                    Err(e) => {
                        tracing::warn!(job = %job.id, "dispatch failed: {e}");
                        false
                    }
                }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .filter(|created| std::future::ready(*created))
            .count()
            .await
    }
}

/// The series `job` waits on: `series` (its decision's), else where it was placed
/// when it was submitted.
fn queue_series(job: &JobRecord, series: String) -> String {
    match &job.queue_series {
        Some(queued) if series == "unplaced" => queued.clone(),
        _ => series,
    }
}

/// Step 2, the decide step of one pass: the state it carries from one queued job to
/// the next (`'q`: the pass's queue).
struct Decide<'q> {
    dispatcher: &'q Dispatcher,
    free: Rooms,
    ledger: Ledger,
    /// The cluster view as the capacity caches have it.
    snapshot: ClusterView,
    /// The view as the requests carry it: rebuilt only when a reservation in this pass
    /// changes it.
    view: Arc<ClusterView>,
    /// GPUs of each team's jobs still queued ahead of the one being decided: what its
    /// request's `usage.queued` counts (at submission, a job's is every queued job of
    /// its team; here it is the same, the ones ahead of it), so a job submitted later
    /// changes nothing for the jobs before it.
    ahead: rustc_hash::FxHashMap<&'q str, BTreeMap<&'q str, u32>>,
    standing: Standing,
    /// The policy snapshot's generation the decisions are made under.
    generation: u64,
    /// The last pass's decisions, taken as the jobs are decided.
    remembered: Table,
    /// The decisions of the jobs that keep waiting, for the next pass.
    kept: Table,
    reused: u64,
    to_create: mpsc::Sender<Admitted>,
    /// What the pass read of preemptions, and the notices it gave.
    preemptions: Preemptions<'q>,
    /// Every team's decayed usage (fair share).
    usage: Usage,
    /// Each team's weight and fair share of each series.
    entitled: Entitlement,
    /// What the pass records for the dispatch journal.
    journal: PassJournal<'q>,
    /// Every team's standing, as the requests carry it.
    shares: Shares,
    /// Whether this pass changed nothing and left nothing that time alone may
    /// change: no dispatch, rejection or failed chain, and no preemption involved.
    settled: bool,
}

impl<'q> Decide<'q> {
    fn new(
        dispatcher: &'q Dispatcher,
        mut free: Rooms,
        ledger: Ledger,
        (queued, at_ms): (&'q [Arc<JobRecord>], i64),
        to_create: mpsc::Sender<Admitted>,
        preemptions: Preemptions<'q>,
        (usage, shares, snapshot): (Usage, Shares, ClusterView),
    ) -> Self {
        let weights = dispatcher.admission.fair_share();
        let entitled = Entitlement::new(&snapshot, &ledger, weights.clone());
        let tolerations = &dispatcher.core.config.pods.tolerations;
        let totals = free.totals(tolerations);
        let free_gpus = totals.iter().map(|(s, (n, _))| (s.clone(), *n)).collect();
        let journal = PassJournal::begin(at_ms, &weights, free_gpus, queued, &usage, &ledger);
        let view = Arc::new(adjusted(snapshot.clone(), &totals));
        let remembered = dispatcher.decisions.take();
        let kept = Table::with_capacity_and_hasher(queued.len(), Default::default());
        Decide {
            dispatcher,
            free,
            ledger,
            snapshot,
            view,
            ahead: Default::default(),
            standing: Standing::default(),
            generation: dispatcher.admission.policy_generation(),
            remembered,
            kept,
            reused: 0,
            to_create,
            preemptions,
            usage,
            entitled,
            journal,
            shares,
            settled: true,
        }
    }

    /// Records that `job` keeps waiting, with its team's standing in the series.
    fn waits(&mut self, job: &JobRecord, series: String, code: &str, reason: String) {
        let team_share = self.usage.share(&self.ledger, &job.team, &series);
        let fair = self.entitled.fair_share(&job.team, &series, true);
        self.standing
            .waits(job, series, code, reason, (team_share, fair));
    }

    /// What orders `team` on `series` now: its rank over its weight.
    fn rank(&self, team: &str, series: &str) -> f64 {
        self.usage
            .weighted_rank(&self.ledger, &self.entitled, team, series)
    }

    /// The order this pass decides `queued` in: a preemptor holding freed GPUs first,
    /// then by priority (as the policy capped it when it last decided the job), then
    /// by its team's rank on the series over its weight ([`Usage::rank`], with what
    /// this pass admits), then by submission.
    fn order(&mut self, queued: &'q [Arc<JobRecord>]) -> FairOrder<'q, Arc<JobRecord>> {
        for j in queued {
            let priority = match self.remembered.get(&j.id) {
                Some(r) => admitted_terms(j.spec.priority, &r.evaluated.outcome.decision).priority,
                None => j.spec.priority,
            };
            let holding = self.preemptions.holds(&j.id);
            self.journal.classed(j, holding, priority);
        }
        let journal = &self.journal;
        FairOrder::new(
            queued,
            |j| {
                let (holding, priority) = journal.class(j);
                Class::new(holding, priority)
            },
            |team, series| self.rank(team, series),
        )
    }

    /// Decides one queued job: the policy (or its remembered decision), then what the
    /// decision asks — reject it, keep it waiting with a reason, or reserve its gang
    /// and send it to its create.
    async fn job(&mut self, job: &'q Arc<JobRecord>) {
        let admission = &self.dispatcher.admission;
        let usage = Arc::new(admission.usage_with_playgrounds(
            &job.team,
            usage_ahead(&self.ledger, &job.team, self.ahead.get(job.team.as_str())),
        ));
        let (key, memo) = match self.remembered.remove_entry(&job.id) {
            Some((k, r)) => (k, Some(r)),
            None => (job.id.clone(), None),
        };
        let Some(evaluated) = self.evaluate(job, memo, &usage).await else {
            return;
        };
        let series = queue_series(
            job,
            admission::waiting_series(&job.spec, &evaluated.outcome),
        );
        let keep = Remembered {
            view: self.view.clone(),
            usage,
            shares: self.shares.clone(),
            evaluated,
        };
        match &keep.evaluated.outcome.decision {
            Decision::Reject { code, message, .. } => {
                let reason = format!("{code}: {message}");
                self.settled = false;
                self.journal.decided(job, Outcome::Rejected);
                self.reject(job, &keep, reason).await;
            }
            Decision::Queue { code, message } => {
                self.journal
                    .decided(job, Outcome::Waits { code: code.clone() });
                self.waits(job, series, code, message.clone());
                add_ahead(&mut self.ahead, job);
                self.kept.insert(key, keep);
            }
            Decision::Admit { placement, .. } => {
                let placement = placement.clone();
                self.admit(job, key, keep, Arc::unwrap_or_clone(placement), series)
                    .await;
            }
        }
    }

    /// The job's decision: the remembered one while it holds, else the chain's. A
    /// chain that fails keeps the job waiting (fail closed), with the failure as its
    /// reason (`None`).
    async fn evaluate(
        &mut self,
        job: &'q JobRecord,
        memo: Option<Remembered>,
        usage: &Arc<Vec<SeriesUsage>>,
    ) -> Option<Evaluated> {
        if let Some(r) = memo
            && r.holds(self.generation, &self.view, usage, &self.shares)
        {
            self.reused += 1;
            return Some(r.evaluated);
        }
        let request = self.request(job, &self.view, usage);
        match self
            .dispatcher
            .admission
            .evaluate(&job.team, request, Path::Queue)
            .await
        {
            Ok(e) => Some(e),
            Err(e) => {
                self.settled = false;
                let series = queue_series(job, admission::primary_series(&job.spec, None));
                let reason = format!("the admission policy failed: {e}");
                let code = "policy.failed".to_string();
                self.journal.decided(job, Outcome::Waits { code });
                self.waits(job, series, "policy.failed", reason);
                add_ahead(&mut self.ahead, job);
                None
            }
        }
    }

    /// The admission request of `job` against `view` with `usage`.
    fn request(
        &self,
        job: &JobRecord,
        view: &ClusterView,
        usage: &[SeriesUsage],
    ) -> forge_policy_host::model::PolicyRequest {
        self.dispatcher.admission.request_with_full_usage(
            &job.id,
            &job.team,
            &job.spec,
            (view.clone(), usage.to_vec(), self.shares.clone()),
        )
    }

    /// The decision as it is stored: with the request it was made on (rebuilt only
    /// for a decision that is stored, a dispatch or a rejection).
    fn record(&self, job: &JobRecord, keep: &Remembered) -> NewDecision {
        let request = self.request(job, &keep.view, &keep.usage);
        admission::decision_record(
            &job.id,
            &job.team,
            &keep.evaluated.outcome,
            &keep.evaluated.label,
            Some(&request),
        )
    }

    /// The policy now rejects the queued job: it ends, with the decision recorded.
    async fn reject(&self, job: &JobRecord, keep: &Remembered, reason: String) {
        let mut t = Transition::new(&job.id, JobState::Queued, JobState::Rejected, Some(reason));
        t.decision = Some(self.record(job, keep));
        if let Err(e) = self.dispatcher.core.transition(t).await {
            tracing::warn!(job = %job.id, "recording a rejection: {e}");
        }
    }

    /// The policy admits the job: it goes to its create if its gang fits what this
    /// pass left free (reserved, and counted as running for its team), else it waits
    /// with the reason it does not fit.
    async fn admit(
        &mut self,
        job: &'q Arc<JobRecord>,
        key: String,
        keep: Remembered,
        placement: Placement,
        series: String,
    ) {
        let cfg = &self.dispatcher.core.config;
        let wanted = gang(job, Some(&placement), cfg);
        let per_series: Vec<(&str, u64)> = series_gpus(job, Some(&placement)).collect();
        let gpus: Vec<SeriesGpus> = per_series
            .iter()
            .map(|&(series, n)| SeriesGpus::new(series, u32::try_from(n).unwrap_or(u32::MAX)))
            .collect();
        match self.free.reserve(&wanted) {
            Ok(fleet) => {
                self.settled = false;
                self.journal.decided(job, Outcome::Dispatched { gpus });
                let decision = self.record(job, &keep);
                let terms = admitted_terms(job.spec.priority, &keep.evaluated.outcome.decision);
                for &(series, n) in &per_series {
                    usage::add(&mut self.ledger, &job.team, series, n, true);
                }
                // What this job takes changes the view (and its team's usage) for every
                // job after it.
                let totals = self.free.totals(&cfg.pods.tolerations);
                self.view = Arc::new(adjusted(self.snapshot.clone(), &totals));
                // The receiver lives as long as the pass: a send fails only if the pass
                // is being dropped.
                let _ = self
                    .to_create
                    .send((job.clone(), fleet, placement, decision, terms))
                    .await;
            }
            Err(nofit) => {
                let decision = &keep.evaluated.outcome.decision;
                let (code, reason) = match self
                    .dispatcher
                    .preempt_for(
                        &mut self.preemptions,
                        job,
                        decision,
                        &wanted,
                        &mut self.free,
                    )
                    .await
                {
                    Some(w) => {
                        // Preemption is involved (a notice, a hold, a veto, a policy
                        // failing on the plan): keep looking every pass. A candidate
                        // left alone for its preemption window is not (`preempt_for`
                        // answers `None`): its window's end is caught by the periodic
                        // full pass (`quiet.rs`).
                        self.settled = false;
                        (w.code, w.reason)
                    }
                    None => (nofit.code().to_string(), nofit.to_string()),
                };
                let record = Outcome::NoRoom {
                    gpus,
                    code: code.clone(),
                };
                self.journal.decided(job, record);
                self.waits(job, series, &code, reason);
                add_ahead(&mut self.ahead, job);
                self.kept.insert(key, keep);
            }
        }
    }

    /// The end of the decide step: the creates are told no more come, the waiting
    /// jobs' decisions are kept for the next pass, and the standings and usage are
    /// published; the pass's journal record, if it dispatched anything.
    fn finish(self, queued: &[Arc<JobRecord>]) -> Option<PassRecord> {
        let Decide {
            dispatcher,
            ledger,
            standing,
            kept,
            reused,
            to_create,
            journal,
            ..
        } = self;
        // Closing the channel ends the creates once the last admitted job is sent.
        drop(to_create);
        dispatcher.decisions.keep(kept);
        dispatcher.core.metrics.dispatch_decisions_reused(reused);
        let teams: rustc_hash::FxHashMap<&str, &str> = queued
            .iter()
            .map(|j| (j.id.as_str(), j.team.as_str()))
            .collect();
        dispatcher.publish(standing.entries, ledger, &teams);
        journal.finish()
    }
}
