//! Bindings for the contract `forge:policy@0.2.0` and conversions between its generated
//! types and the host's [`model`](super::model): the 0.1.0 request and placement plus
//! the workload kind, per-pool CPU and memory, per-series taints and default resources,
//! and per-pool tolerations and node affinity.

use crate::error::PluginError;
use crate::model;
use crate::sandbox::HostState;
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

fn effect_to_wit(e: model::TaintEffect) -> wit::TaintEffect {
    match e {
        model::TaintEffect::NoSchedule => wit::TaintEffect::NoSchedule,
        model::TaintEffect::PreferNoSchedule => wit::TaintEffect::PreferNoSchedule,
        model::TaintEffect::NoExecute => wit::TaintEffect::NoExecute,
    }
}

fn effect_from_wit(e: wit::TaintEffect) -> model::TaintEffect {
    match e {
        wit::TaintEffect::NoSchedule => model::TaintEffect::NoSchedule,
        wit::TaintEffect::PreferNoSchedule => model::TaintEffect::PreferNoSchedule,
        wit::TaintEffect::NoExecute => model::TaintEffect::NoExecute,
    }
}

fn pool_to_wit(p: &model::PoolView) -> wit::Pool {
    wit::Pool {
        name: p.name.clone(),
        nodes: p.nodes,
        gpus_per_node: p.gpus_per_node,
        series: p.series.clone(),
        cpu_millis: p.cpu_millis,
        memory_bytes: p.memory_bytes,
    }
}

fn series_to_wit(s: &model::SeriesCapacity) -> wit::SeriesCapacity {
    wit::SeriesCapacity {
        series: s.series.clone(),
        total: s.total,
        allocatable: s.allocatable,
        in_use: s.in_use,
        blocked: s.blocked,
        free: s.free,
        largest_free_block: s.largest_free_block,
        nodes: s.nodes,
        tainted: s.tainted,
        taints: s
            .taints
            .iter()
            .map(|t| wit::SeriesTaint {
                taint: wit::Taint {
                    key: t.taint.key.clone(),
                    value: t.taint.value.clone(),
                    effect: effect_to_wit(t.taint.effect),
                },
                nodes: t.nodes,
            })
            .collect(),
        default_cpu_millis: s.default_cpu_millis,
        default_memory_bytes: s.default_memory_bytes,
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
            kind: match job.kind {
                model::WorkloadKind::Training => wit::WorkloadKind::Training,
                model::WorkloadKind::Inference => wit::WorkloadKind::Inference,
            },
            priority: job.priority,
            pools: job.pools.iter().map(pool_to_wit).collect(),
            storage: match job.storage {
                model::StorageMode::Shared => wit::StorageMode::Shared,
                model::StorageMode::ReadWriteOnce => wit::StorageMode::ReadWriteOnce,
            },
            labels: map_to_wit(&job.labels),
        },
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

fn toleration_to_wit(t: &model::Toleration) -> wit::Toleration {
    wit::Toleration {
        key: t.key.clone(),
        operator: match t.operator {
            model::TolerationOperator::Equal => wit::TolerationOperator::Equal,
            model::TolerationOperator::Exists => wit::TolerationOperator::Exists,
        },
        value: t.value.clone(),
        effect: t.effect.map(effect_to_wit),
    }
}

fn toleration_from_wit(t: wit::Toleration) -> model::Toleration {
    model::Toleration {
        key: t.key,
        operator: match t.operator {
            wit::TolerationOperator::Equal => model::TolerationOperator::Equal,
            wit::TolerationOperator::Exists => model::TolerationOperator::Exists,
        },
        value: t.value,
        effect: t.effect.map(effect_from_wit),
    }
}

fn term_to_wit(t: &model::NodeSelectorTerm) -> wit::NodeSelectorTerm {
    use model::SelectorOperator as M;
    use wit::SelectorOperator as W;
    wit::NodeSelectorTerm {
        match_expressions: t
            .match_expressions
            .iter()
            .map(|r| wit::NodeSelectorRequirement {
                key: r.key.clone(),
                operator: match r.operator {
                    M::In => W::IsIn,
                    M::NotIn => W::NotIn,
                    M::Exists => W::Exists,
                    M::DoesNotExist => W::DoesNotExist,
                    M::Gt => W::Gt,
                    M::Lt => W::Lt,
                },
                values: r.values.clone(),
            })
            .collect(),
    }
}

fn term_from_wit(t: wit::NodeSelectorTerm) -> model::NodeSelectorTerm {
    use model::SelectorOperator as M;
    use wit::SelectorOperator as W;
    model::NodeSelectorTerm {
        match_expressions: t
            .match_expressions
            .into_iter()
            .map(|r| model::NodeSelectorRequirement {
                key: r.key,
                operator: match r.operator {
                    W::IsIn => M::In,
                    W::NotIn => M::NotIn,
                    W::Exists => M::Exists,
                    W::DoesNotExist => M::DoesNotExist,
                    W::Gt => M::Gt,
                    W::Lt => M::Lt,
                },
                values: r.values,
            })
            .collect(),
    }
}

fn pool_placement_to_wit(pp: &model::PoolPlacement) -> wit::PoolPlacement {
    wit::PoolPlacement {
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
        tolerations: pp.tolerations.iter().map(toleration_to_wit).collect(),
        affinity: wit::NodeAffinity {
            required: pp.affinity.required.iter().map(term_to_wit).collect(),
            preferred: pp
                .affinity
                .preferred
                .iter()
                .map(|p| wit::PreferredTerm {
                    weight: p.weight,
                    term: term_to_wit(&p.term),
                })
                .collect(),
        },
    }
}

fn pool_placement_from_wit(pp: wit::PoolPlacement) -> model::PoolPlacement {
    model::PoolPlacement {
        pool: pp.pool,
        series: pp.series,
        node_selector: map_from_wit(pp.node_selector),
        ray_resources: pp.ray_resources.into_iter().collect(),
        labels: map_from_wit(pp.labels),
        annotations: map_from_wit(pp.annotations),
        tolerations: pp
            .tolerations
            .into_iter()
            .map(toleration_from_wit)
            .collect(),
        affinity: model::NodeAffinity {
            required: pp
                .affinity
                .required
                .into_iter()
                .map(term_from_wit)
                .collect(),
            preferred: pp
                .affinity
                .preferred
                .into_iter()
                .map(|p| model::PreferredTerm {
                    weight: p.weight,
                    term: term_from_wit(p.term),
                })
                .collect(),
        },
    }
}

/// Generated `decision` → host decision. Structural checks of the placement happen in
/// the chain, which knows the job.
pub fn decision_from_wit(d: wit::Decision) -> Result<model::Decision, PluginError> {
    Ok(match d {
        wit::Decision::Admit(p) => model::Decision::Admit {
            placement: model::Placement {
                pools: p.pools.into_iter().map(pool_placement_from_wit).collect(),
            },
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
