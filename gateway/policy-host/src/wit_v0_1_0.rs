//! Bindings for the frozen contract `forge:policy@0.1.0` and conversions between its
//! generated types and the host's [`model`](super::model).
//!
//! Each supported WIT version gets one file like this one; the host picks the version a
//! component was built against at load time and keeps running older plugins after newer
//! contract versions are added.
//!
//! A 0.1.0 plugin sees the subset of the request it knows: GPUs on nodes whose taints
//! Forge's pods do not tolerate count as `blocked` (they are not usable), and the job's
//! kind and resources are not shown. Its placement carries the fields added after 0.1.0
//! (tolerations, node affinity, fleets) forward unchanged from the placement it was given.

use crate::error::PluginError;
use crate::model;
use crate::sandbox::HostState;
use crate::wit_maps::{map_from_wit, map_to_wit};

wasmtime::component::bindgen!({
    path: "../../wit/policy@0.1.0",
    world: "forge:policy/policy@0.1.0",
});

pub use self::forge::policy::types as wit;

/// The interface name a 0.1.0 plugin may import.
pub const HOST_IMPORT: &str = "forge:policy/host@0.1.0";

/// The implicit import of the shared types interface (types only, no functions).
pub const TYPES_IMPORT: &str = "forge:policy/types@0.1.0";

impl self::forge::policy::types::Host for HostState {}

impl self::forge::policy::host::Host for HostState {
    fn log(&mut self, level: self::forge::policy::host::Level, message: String) {
        use self::forge::policy::host::Level;
        let level = match level {
            Level::Debug => tracing::Level::DEBUG,
            Level::Info => tracing::Level::INFO,
            Level::Warn => tracing::Level::WARN,
            Level::Error => tracing::Level::ERROR,
        };
        self.log(level, message);
    }
}

/// Host request + placement so far → the generated `request` record.
pub fn request_to_wit(req: &model::PolicyRequest, placement: &model::Placement) -> wit::Request {
    let job = &req.job;
    wit::Request {
        job: wit::Job {
            id: job.id.clone(),
            team: job.team.clone(),
            name: job.name.clone(),
            framework: job.framework.clone(),
            priority: job.priority,
            pools: job
                .pools
                .iter()
                .map(|p| wit::Pool {
                    name: p.name.clone(),
                    nodes: p.nodes,
                    gpus_per_node: p.gpus_per_node,
                    series: p.series.clone(),
                })
                .collect(),
            storage: match job.storage {
                model::StorageMode::Shared => wit::StorageMode::Shared,
                model::StorageMode::ReadWriteOnce => wit::StorageMode::ReadWriteOnce,
            },
            labels: map_to_wit(&job.labels),
        },
        cluster: wit::Cluster {
            gpu_node_label: req.cluster.gpu_node_label.clone(),
            series: req
                .cluster
                .series
                .iter()
                .map(|s| wit::SeriesCapacity {
                    series: s.series.clone(),
                    total: s.total,
                    allocatable: s.allocatable,
                    in_use: s.in_use,
                    blocked: s.blocked.saturating_add(s.tainted),
                    free: s.free,
                    largest_free_block: s.largest_free_block,
                    nodes: s.nodes,
                })
                .collect(),
        },
        usage: req
            .usage
            .iter()
            .map(|u| wit::SeriesUsage {
                series: u.series.clone(),
                running: u.running,
                queued: u.queued,
            })
            .collect(),
        placement: placement_to_wit(placement),
    }
}

fn placement_to_wit(p: &model::Placement) -> wit::Placement {
    wit::Placement {
        pools: p
            .pools
            .iter()
            .map(|pp| wit::PoolPlacement {
                pool: pp.pool.clone(),
                series: pp.series.clone(),
                node_selector: map_to_wit(&pp.node_selector),
                ray_resources: pp
                    .ray_resources
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
                labels: map_to_wit(&pp.labels),
                annotations: map_to_wit(&pp.annotations),
            })
            .collect(),
    }
}

/// Generated `decision` → host decision; `given` is the placement the plugin was
/// shown, whose post-0.1.0 fields each returned pool keeps. Structural checks of the
/// placement happen in the chain, which knows the job.
pub fn decision_from_wit(
    d: wit::Decision,
    given: &model::Placement,
) -> Result<model::Decision, PluginError> {
    let carried = |pool: &str| given.pools.iter().find(|p| p.pool == pool);
    Ok(match d {
        wit::Decision::Admit(p) => model::Decision::admit(model::Placement {
            pools: p
                .pools
                .into_iter()
                .map(|pp| {
                    let before = carried(&pp.pool);
                    model::PoolPlacement {
                        tolerations: before.map(|b| b.tolerations.clone()).unwrap_or_default(),
                        affinity: before.map(|b| b.affinity.clone()).unwrap_or_default(),
                        fleets: before.map(|b| b.fleets.clone()).unwrap_or_default(),
                        pool: pp.pool,
                        series: pp.series,
                        node_selector: map_from_wit(pp.node_selector),
                        ray_resources: pp.ray_resources.into_iter().collect(),
                        labels: map_from_wit(pp.labels),
                        annotations: map_from_wit(pp.annotations),
                    }
                })
                .collect(),
        }),
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
