//! Rust mirror of the WIT `forge:policy@0.1.0` placement: where each pool of a job runs
//! (series, node selector, Ray custom resources, extra pod labels and annotations).
//! The policy host converts the chain's final placement into this type; the RayJob
//! builder consumes it.

use serde::{Deserialize, Serialize};

use crate::jobspec::JobSpec;

/// Where one pool runs (WIT `pool-placement`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlacement {
    /// The pool's name (as in the job spec).
    pub pool: String,
    /// The chosen GPU series; `None` until a plugin picks one.
    pub series: Option<String>,
    /// Node selector for the pool's pods (ordered as the plugin gave it).
    pub node_selector: Vec<(String, String)>,
    /// Ray custom resources advertised by the pool's nodes (name, amount).
    pub ray_resources: Vec<(String, f64)>,
    /// Extra labels for the pool's pods.
    pub labels: Vec<(String, String)>,
    /// Extra annotations for the pool's pods.
    pub annotations: Vec<(String, String)>,
}

/// Placement of every pool, in the order of the spec's pools (WIT `placement`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// One entry per pool, primary first.
    pub pools: Vec<PoolPlacement>,
}

impl Placement {
    /// The chain's initial placement: one entry per pool with its requested series, if
    /// any, and empty maps (WIT chain semantics, step 1).
    pub fn initial(spec: &JobSpec) -> Self {
        Self {
            pools: spec
                .pools
                .iter()
                .map(|p| PoolPlacement {
                    pool: p.name.clone(),
                    series: p.series.clone(),
                    ..PoolPlacement::default()
                })
                .collect(),
        }
    }
}

impl From<&crate::policy::model::Placement> for Placement {
    /// The policy chain's placement (maps) as the builder's ordered pairs.
    fn from(p: &crate::policy::model::Placement) -> Self {
        let pairs = |m: &std::collections::BTreeMap<String, String>| {
            m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        Self {
            pools: p
                .pools
                .iter()
                .map(|pp| PoolPlacement {
                    pool: pp.pool.clone(),
                    series: pp.series.clone(),
                    node_selector: pairs(&pp.node_selector),
                    ray_resources: pp
                        .ray_resources
                        .iter()
                        .map(|(k, v)| (k.clone(), *v))
                        .collect(),
                    labels: pairs(&pp.labels),
                    annotations: pairs(&pp.annotations),
                })
                .collect(),
        }
    }
}
