//! Bindings for the contract `forge:policy@0.3.0` and conversions between its
//! generated types and the host's [`model`](super::model) and
//! [`preemption`](super::preemption) types.
//!
//! The request is a host resource ([`RequestRep`]): the store's resource table holds
//! one entry per `evaluate` call, sharing the evaluation's request and placement, and
//! each method converts only the part the plugin asks for. The entry is removed when
//! the call returns, so a plugin cannot use it later.
//!
//! `shares()` hands over the request's [`model::Shares`] (a team link: only its team's
//! entries) and records that the plugin read them ([`RequestRep::read_shares`]).
//!
//! What the host does not give yet is shown as what it is: one fleet named `default`
//! (the one cluster the gateway drives) and no
//! borrowed GPUs in `usage` (a quota plugin marks a borrowing admission with
//! [`BORROWED_GPUS_ANNOTATION`](crate::model::BORROWED_GPUS_ANNOTATION) and knows its
//! own guarantees; the host does not count them per team yet).

use std::sync::Arc;

use wasmtime::component::Resource;

use crate::error::PluginError;
use crate::model;
use crate::preemption as plan;
use crate::sandbox::HostState;
use crate::wit_convert::{pool_placement_conversions, shared_conversions};
use crate::wit_maps::{map_from_wit, map_to_wit};

wasmtime::component::bindgen!({
    path: "../../wit/policy@0.3.0",
    world: "forge:policy/policy@0.3.0",
    imports: { default: trappable },
    with: { "forge:policy/request-view.request": RequestRep },
});

pub use self::forge::policy::types as wit;

/// The interface name of the log import.
pub const HOST_IMPORT: &str = "forge:policy/host@0.3.0";

/// The implicit import of the shared types interface (types only, no functions).
pub const TYPES_IMPORT: &str = "forge:policy/types@0.3.0";

/// The request resource's interface.
pub const REQUEST_IMPORT: &str = "forge:policy/request-view@0.3.0";

/// What a `request` handle stands for during one call.
pub struct RequestRep {
    request: Arc<model::PolicyRequest>,
    placement: Arc<model::Placement>,
    /// A team link's call: only the job's team's shares are shown.
    team_link: bool,
    /// Whether the plugin called `shares()`.
    read_shares: bool,
}

impl RequestRep {
    pub(crate) fn new(
        request: Arc<model::PolicyRequest>,
        placement: Arc<model::Placement>,
        team_link: bool,
    ) -> Self {
        RequestRep {
            request,
            placement,
            team_link,
            read_shares: false,
        }
    }

    /// Whether the plugin read the shares during its call.
    pub(crate) fn read_shares(&self) -> bool {
        self.read_shares
    }
}

impl self::forge::policy::types::Host for HostState {}

impl self::forge::policy::host::Host for HostState {
    fn log(
        &mut self,
        level: self::forge::policy::host::Level,
        message: String,
    ) -> wasmtime::Result<()> {
        use self::forge::policy::host::Level;
        let level = match level {
            Level::Debug => tracing::Level::DEBUG,
            Level::Info => tracing::Level::INFO,
            Level::Warn => tracing::Level::WARN,
            Level::Error => tracing::Level::ERROR,
        };
        self.log(level, message);
        Ok(())
    }
}

impl self::forge::policy::request_view::Host for HostState {}

impl self::forge::policy::request_view::HostRequest for HostState {
    fn job(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<wit::Job> {
        Ok(job_to_wit(&self.request(&this)?.request.job))
    }

    fn cluster(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<wit::Cluster> {
        let cluster = &self.request(&this)?.request.cluster;
        Ok(wit::Cluster {
            gpu_node_label: cluster.gpu_node_label.clone(),
            series: cluster.series.iter().map(series_to_wit).collect(),
        })
    }

    fn fleets(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<Vec<wit::Fleet>> {
        let cluster = &self.request(&this)?.request.cluster;
        Ok(cluster
            .fleet_views()
            .iter()
            .map(|f| wit::Fleet {
                name: f.name.clone(),
                labels: f
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                available: f.available,
                series: f.series.iter().map(series_to_wit).collect(),
            })
            .collect())
    }

    fn usage(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<Vec<wit::SeriesUsage>> {
        Ok(self
            .request(&this)?
            .request
            .usage
            .iter()
            .map(|u| wit::SeriesUsage {
                series: u.series.clone(),
                running: u.running,
                queued: u.queued,
                borrowed: 0,
            })
            .collect())
    }

    fn shares(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<Vec<wit::TeamShare>> {
        let rep = self.requests_mut().get_mut(&this)?;
        rep.read_shares = true;
        let team = rep.team_link.then_some(rep.request.job.team.as_str());
        Ok(rep
            .request
            .shares
            .0
            .iter()
            .filter(|s| team.is_none_or(|t| s.team == t))
            .map(|s| wit::TeamShare {
                team: s.team.clone(),
                series: s.series.clone(),
                decayed_gpu_seconds: s.decayed_gpu_seconds,
                allocated_gpus: s.allocated_gpus,
                weight: s.weight,
                share: s.share,
                fair_share: s.fair_share,
            })
            .collect())
    }

    fn placement(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<wit::Placement> {
        Ok(placement_to_wit(&self.request(&this)?.placement))
    }

    fn drop(&mut self, this: Resource<RequestRep>) -> wasmtime::Result<()> {
        // Plugins only ever borrow a request; the host removes the entry itself.
        self.requests_mut().delete(this)?;
        Ok(())
    }
}

impl HostState {
    fn request(&self, handle: &Resource<RequestRep>) -> wasmtime::Result<&RequestRep> {
        Ok(self.requests().get(handle)?)
    }
}

shared_conversions!();
pool_placement_conversions!(pp, [fleets: pp.fleets.clone(),], _given, fleets: pp.fleets.clone());

fn placement_to_wit(p: &model::Placement) -> wit::Placement {
    wit::Placement {
        pools: p.pools.iter().map(pool_placement_to_wit).collect(),
    }
}

/// Generated `decision` → host decision; an admission without a placement keeps
/// `given`, the placement the plugin was shown (shared, not copied).
pub fn decision_from_wit(
    d: wit::Decision,
    given: &Arc<model::Placement>,
) -> Result<model::Decision, PluginError> {
    Ok(match d {
        wit::Decision::Admit(a) => model::Decision::Admit {
            placement: match a.placement {
                Some(p) => Arc::new(model::Placement {
                    pools: p
                        .pools
                        .into_iter()
                        .map(|pp| pool_placement_from_wit(pp, given))
                        .collect(),
                }),
                None => Arc::clone(given),
            },
            priority_cap: a.priority_cap,
            preemptible: a.preemptible,
        },
        wit::Decision::Queue(h) => model::Decision::Queue {
            code: h.code,
            message: h.message,
        },
        wit::Decision::Reject(r) => model::Decision::Reject {
            code: r.code,
            message: r.message,
            field: r.field,
        },
    })
}

fn victim_to_wit(v: &plan::Victim) -> wit::Victim {
    wit::Victim {
        job_id: v.job_id.clone(),
        team: v.team.clone(),
        priority: v.priority,
        gpus: v.gpus,
        series: v.series.clone(),
        fleet: v.fleet.clone(),
        running_seconds: v.running_seconds,
        checkpoint_age_seconds: v.checkpoint_age_seconds,
        checkpoint_step: v.checkpoint_step,
        lost_gpu_seconds: v.lost_gpu_seconds,
        grace_seconds: v.grace_seconds,
        preemptions_in_window: v.preemptions_in_window,
    }
}

/// Host plan → the generated `preemption-plan`.
pub fn plan_to_wit(p: &plan::PreemptionPlan) -> wit::PreemptionPlan {
    wit::PreemptionPlan {
        preemptor: job_to_wit(&p.preemptor),
        series: p.series.clone(),
        gpus_needed: p.gpus_needed,
        candidates: p.candidates.iter().map(victim_to_wit).collect(),
    }
}

/// Generated `plan-verdict` → host verdict.
pub fn verdict_from_wit(v: wit::PlanVerdict) -> plan::PlanVerdict {
    match v {
        wit::PlanVerdict::Accept => plan::PlanVerdict::Accept,
        wit::PlanVerdict::Reorder(order) => plan::PlanVerdict::Reorder { order },
        wit::PlanVerdict::Veto(h) => plan::PlanVerdict::Veto {
            code: h.code,
            message: h.message,
        },
    }
}
