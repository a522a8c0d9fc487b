//! Conversions between the host's [`model`](crate::model) and the generated types that
//! contract versions 0.2.0 and 0.3.0 share field for field (the job, series capacity,
//! taints, tolerations, node affinity, pool placements but for their fleets). Each
//! version's bindings are distinct Rust types, so the functions are stamped into each
//! binding module by [`shared_conversions!`] and [`pool_placement_conversions!`]
//! instead of being written twice.

/// Expands, inside a binding module that has `wit` (its generated types), `model` and
/// `map_to_wit` in scope, to the conversions both 0.2.0 and 0.3.0 use.
macro_rules! shared_conversions {
    () => {
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

        fn affinity_to_wit(a: &model::NodeAffinity) -> wit::NodeAffinity {
            wit::NodeAffinity {
                required: a.required.iter().map(term_to_wit).collect(),
                preferred: a
                    .preferred
                    .iter()
                    .map(|p| wit::PreferredTerm {
                        weight: p.weight,
                        term: term_to_wit(&p.term),
                    })
                    .collect(),
            }
        }

        fn affinity_from_wit(a: wit::NodeAffinity) -> model::NodeAffinity {
            model::NodeAffinity {
                required: a.required.into_iter().map(term_from_wit).collect(),
                preferred: a
                    .preferred
                    .into_iter()
                    .map(|p| model::PreferredTerm {
                        weight: p.weight,
                        term: term_from_wit(p.term),
                    })
                    .collect(),
            }
        }

        fn job_to_wit(job: &model::JobView) -> wit::Job {
            wit::Job {
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
            }
        }
    };
}

pub(crate) use shared_conversions;

/// Expands to `pool_placement_to_wit` and `pool_placement_from_wit(pp, given)` over the
/// pool-placement fields 0.2.0 and 0.3.0 share. `$pp` and `$given` name the
/// parameters; `[…]` are the fields to add to the generated record (0.3.0's `fleets`);
/// `fleets:` is the host pool's fleets (read from `$pp`, or carried from `$given`).
macro_rules! pool_placement_conversions {
    ($pp:ident, [$($to_extra:tt)*], $given:ident, fleets: $fleets:expr) => {
        fn pool_placement_to_wit($pp: &model::PoolPlacement) -> wit::PoolPlacement {
            wit::PoolPlacement {
                pool: $pp.pool.clone(),
                series: $pp.series.clone(),
                node_selector: map_to_wit(&$pp.node_selector),
                ray_resources: $pp
                    .ray_resources
                    .iter()
                    .map(|(k, v)| (k.clone(), *v))
                    .collect(),
                labels: map_to_wit(&$pp.labels),
                annotations: map_to_wit(&$pp.annotations),
                tolerations: $pp.tolerations.iter().map(toleration_to_wit).collect(),
                affinity: affinity_to_wit(&$pp.affinity),
                $($to_extra)*
            }
        }

        fn pool_placement_from_wit(
            $pp: wit::PoolPlacement,
            $given: &model::Placement,
        ) -> model::PoolPlacement {
            let fleets = $fleets;
            model::PoolPlacement {
                pool: $pp.pool,
                series: $pp.series,
                node_selector: map_from_wit($pp.node_selector),
                ray_resources: $pp.ray_resources.into_iter().collect(),
                labels: map_from_wit($pp.labels),
                annotations: map_from_wit($pp.annotations),
                tolerations: $pp
                    .tolerations
                    .into_iter()
                    .map(toleration_from_wit)
                    .collect(),
                affinity: affinity_from_wit($pp.affinity),
                fleets,
            }
        }
    };
}

pub(crate) use pool_placement_conversions;
