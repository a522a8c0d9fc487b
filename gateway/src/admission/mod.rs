//! Admission: how a job meets the policy. Builds the policy's view of a job (with the
//! live cluster snapshot and the team's usage — its jobs and its playgrounds — or the
//! dispatcher's adjusted ones), asks
//! the active chain, and turns the outcome into what is recorded and where the job
//! queues. Submission, the dispatcher and the dry-run review all come through here, so
//! they cannot disagree about what a policy sees.

pub mod decision;
pub mod usage;

use std::sync::Arc;

use forge_policy_host::ChainOutcome;
use forge_policy_host::model::{
    ClusterView, JobView, PolicyRequest, PoolView, SeriesUsage, Shares, StorageMode, WorkloadKind,
};

pub use decision::{decision_record, primary_series, rejecting_plugin, waiting_series};

use crate::cluster::Capacities;
use crate::config::Config;
use crate::jobspec::JobSpec;
use crate::policy::{EvalError, Evaluated, PolicyManager};
use usage::UsageBoard;

/// How long a request waits for the capacity caches of a starting gateway.
const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The cluster view is not ready (the capacity caches are still syncing).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the cluster view is not ready yet (Node/Pod caches syncing); try again")]
pub struct NotReady;

/// Where an evaluation comes from (the `path` label of the decision metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A submission.
    Submit,
    /// A dispatcher pass re-evaluating a queued job.
    Queue,
    /// A dry-run review.
    Review,
}

impl Path {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Path::Submit => "submit",
            Path::Queue => "queue",
            Path::Review => "review",
        }
    }
}

/// `usage` with the playground GPUs per series `(running, pending)` added.
fn with_playgrounds(
    mut usage: Vec<SeriesUsage>,
    playgrounds: std::collections::BTreeMap<String, (u32, u32)>,
) -> Vec<SeriesUsage> {
    for (series, (running, pending)) in playgrounds {
        match usage.iter_mut().find(|u| u.series == series) {
            Some(u) => {
                u.running = u.running.saturating_add(running);
                u.queued = u.queued.saturating_add(pending);
            }
            None => usage.push(SeriesUsage {
                series,
                running,
                queued: pending,
            }),
        }
    }
    usage
}

/// Admission's inputs: configuration, live capacity, the dispatcher's usage ledger and
/// the active policy.
#[derive(Clone, Debug)]
pub struct Admission {
    config: Arc<Config>,
    capacity: Capacities,
    usage: Arc<UsageBoard>,
    policies: Arc<PolicyManager>,
}

impl Admission {
    /// Admission over these sources.
    pub fn new(
        config: Arc<Config>,
        capacity: Capacities,
        usage: Arc<UsageBoard>,
        policies: Arc<PolicyManager>,
    ) -> Self {
        Admission {
            config,
            capacity,
            usage,
            policies,
        }
    }

    /// Where the dispatcher publishes the teams' usage.
    pub fn usage(&self) -> &Arc<UsageBoard> {
        &self.usage
    }

    /// The policy's view of a job spec.
    pub fn job_view(&self, job_id: &str, team: &str, spec: &JobSpec) -> JobView {
        JobView {
            id: job_id.to_string(),
            team: team.to_string(),
            name: spec.name.clone(),
            framework: spec.framework.clone(),
            kind: WorkloadKind::Training,
            priority: spec.priority,
            pools: spec
                .pools
                .iter()
                .map(|p| PoolView {
                    name: p.name.clone(),
                    nodes: p.nodes,
                    gpus_per_node: p.gpus_per_node,
                    series: p.series.clone(),
                    cpu_millis: p.cpus_per_node.map(|c| u64::from(c) * 1000),
                    memory_bytes: p.memory_bytes(),
                })
                .collect(),
            storage: if self.config.storage.shared {
                StorageMode::Shared
            } else {
                StorageMode::ReadWriteOnce
            },
            labels: spec.labels.clone(),
        }
    }

    /// The request for a job with the live cluster snapshot and the team's usage (GPUs
    /// its dispatched and queued jobs hold or want, as the dispatcher last counted).
    /// While the capacity caches are still syncing (a starting gateway) it waits for
    /// them a little, then refuses: a decision on an empty cluster view would be wrong.
    pub async fn live_request(
        &self,
        job_id: &str,
        team: &str,
        spec: &JobSpec,
    ) -> Result<PolicyRequest, NotReady> {
        if !self.capacity.synced_within(SYNC_WAIT).await {
            return Err(NotReady);
        }
        Ok(PolicyRequest {
            job: self.job_view(job_id, team, spec),
            cluster: self.capacity.snapshot(),
            usage: self.team_usage(team),
            shares: self.usage.shares(),
        })
    }

    /// A team's usage as policies and users see it: the dispatcher's ledger (its
    /// jobs) plus its playgrounds' GPUs (bound: running; unbound: queued).
    pub fn team_usage(&self, team: &str) -> Vec<SeriesUsage> {
        with_playgrounds(self.usage.usage(team), self.capacity.playground_gpus(team))
    }

    /// The policy's view of a playground (workload kind `inference`): one pool
    /// `server` of one machine with `gpus` GPUs on `series` (if named), framework
    /// `vllm`, priority 0.
    pub fn inference_view(&self, id: &str, team: &str, gpus: u32, series: Option<&str>) -> JobView {
        JobView {
            id: id.to_string(),
            team: team.to_string(),
            name: format!("playground-{id}"),
            framework: "vllm".into(),
            kind: WorkloadKind::Inference,
            priority: 0,
            pools: vec![PoolView {
                name: "server".into(),
                nodes: 1,
                gpus_per_node: gpus,
                series: series.map(str::to_string),
                cpu_millis: None,
                memory_bytes: None,
            }],
            storage: if self.config.storage.shared {
                StorageMode::Shared
            } else {
                StorageMode::ReadWriteOnce
            },
            labels: Default::default(),
        }
    }

    /// [`Admission::live_request`] for a playground ([`Admission::inference_view`]).
    pub async fn live_inference_request(
        &self,
        id: &str,
        team: &str,
        gpus: u32,
        series: Option<&str>,
    ) -> Result<PolicyRequest, NotReady> {
        if !self.capacity.synced_within(SYNC_WAIT).await {
            return Err(NotReady);
        }
        Ok(PolicyRequest {
            job: self.inference_view(id, team, gpus, series),
            cluster: self.capacity.snapshot(),
            usage: self.team_usage(team),
            shares: self.usage.shares(),
        })
    }

    /// The request for a job against a given cluster view and a usage that already
    /// includes the team's playgrounds ([`Admission::usage_with_playgrounds`]; the
    /// dispatcher computes it once per team and pass), with the pass's shares.
    pub fn request_with_full_usage(
        &self,
        job_id: &str,
        team: &str,
        spec: &JobSpec,
        (cluster, usage, shares): (ClusterView, Vec<SeriesUsage>, Shares),
    ) -> PolicyRequest {
        PolicyRequest {
            job: self.job_view(job_id, team, spec),
            cluster,
            usage,
            shares,
        }
    }

    /// Asks the chain that decides for `team`.
    pub async fn evaluate(
        &self,
        team: &str,
        request: PolicyRequest,
        path: Path,
    ) -> Result<Evaluated, EvalError> {
        self.policies.evaluate(team, request, path.as_str()).await
    }

    /// The policy's say on a planned preemption: the order to preempt in, or a veto
    /// ([`PolicyManager::plan_preemption`]).
    pub async fn plan_preemption(
        &self,
        plan: forge_policy_host::preemption::PreemptionPlan,
    ) -> Result<forge_policy_host::preemption::PlanOutcome, EvalError> {
        self.policies.plan_preemption(plan).await
    }

    /// The fair-share weights of the global policy in force.
    pub fn fair_share(&self) -> Arc<crate::domain::FairShareSettings> {
        self.policies.current().global().fair_share.clone()
    }

    /// The generation of the policy in force ([`PolicyManager::generation`]).
    pub fn policy_generation(&self) -> u64 {
        self.policies.generation()
    }

    /// `usage` (the dispatcher's ledger for `team`) with the team's playgrounds added,
    /// as [`Admission::request_with`] gives it to the policy.
    pub fn usage_with_playgrounds(&self, team: &str, usage: Vec<SeriesUsage>) -> Vec<SeriesUsage> {
        with_playgrounds(usage, self.capacity.playground_gpus(team))
    }

    /// Runs the shadow candidate (if one is set) on a submission's request.
    pub fn shadow(&self, job_id: &str, team: &str, request: PolicyRequest, live: &ChainOutcome) {
        self.policies.shadow_submission(job_id, team, request, live);
    }
}
