//! Bindings for the contract `forge:policy@0.2.0` and conversions between its generated
//! types and the host's [`model`](super::model): the 0.1.0 request and placement plus
//! the workload kind, per-pool CPU and memory, per-series taints and default resources,
//! and per-pool tolerations and node affinity.

use crate::error::PluginError;
use crate::model;
use crate::sandbox::HostState;
use crate::wit_convert::{pool_placement_conversions, shared_conversions};
use crate::wit_maps::{map_from_wit, map_to_wit};

wasmtime::component::bindgen!({
    path: "../../wit/policy@0.2.0",
    world: "forge:policy/policy@0.2.0",
});

pub use self::forge::policy::types as wit;

/// The interface name a 0.2.0 plugin may import.
pub const HOST_IMPORT: &str = "forge:policy/host@0.2.0";

/// The implicit import of the shared types interface (types only, no functions).
pub const TYPES_IMPORT: &str = "forge:policy/types@0.2.0";

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

shared_conversions!();
// The fields added after 0.2.0 (fleets) carry forward from the placement given.
pool_placement_conversions!(pp, [], given, fleets: carried_fleets(&pp, given));

/// The fleets the pool had in the placement a 0.2.0 plugin was given (it cannot see
/// them, so it keeps them).
fn carried_fleets(pp: &wit::PoolPlacement, given: &model::Placement) -> Vec<String> {
    given
        .pools
        .iter()
        .find(|g| g.pool == pp.pool)
        .map(|g| g.fleets.clone())
        .unwrap_or_default()
}

/// Host request + placement so far → the generated `request` record.
pub fn request_to_wit(req: &model::PolicyRequest, placement: &model::Placement) -> wit::Request {
    wit::Request {
        job: job_to_wit(&req.job),
        cluster: wit::Cluster {
            gpu_node_label: req.cluster.gpu_node_label.clone(),
            series: req.cluster.series.iter().map(series_to_wit).collect(),
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
        placement: wit::Placement {
            pools: placement.pools.iter().map(pool_placement_to_wit).collect(),
        },
    }
}

/// Generated `decision` → host decision; `given` is the placement the plugin was shown,
/// whose post-0.2.0 fields each returned pool keeps. Structural checks of the placement
/// happen in the chain, which knows the job.
pub fn decision_from_wit(
    d: wit::Decision,
    given: &model::Placement,
) -> Result<model::Decision, PluginError> {
    Ok(match d {
        wit::Decision::Admit(p) => model::Decision::admit(model::Placement {
            pools: p
                .pools
                .into_iter()
                .map(|pp| pool_placement_from_wit(pp, given))
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
