//! The host's own view of policy inputs and decisions.
//!
//! These types are independent of any WIT version: every supported contract version
//! (`wit_v0_1_0`, `wit_v0_2_0`, `wit_v0_3_0`) converts to and from them, so the rest of the gateway
//! never depends on generated bindings. They serialize to stable camelCase JSON for
//! the API (decision traces, dry-run reviews) and the job store; fields added after
//! 0.1.0 default when absent, so records written before them still read.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use crate::scheduling::{
    NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredTerm, SelectorOperator,
    SeriesTaint, Taint, TaintEffect, Toleration, TolerationOperator, untolerated,
};

/// Whether the job's storage claim can be mounted by many nodes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StorageMode {
    /// ReadWriteMany.
    Shared,
    /// ReadWriteOnce: one node at a time.
    ReadWriteOnce,
}

/// What is being placed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// A batch training job (a RayJob that runs to completion).
    #[default]
    Training,
    /// A long-running inference server (the playground).
    Inference,
}

/// One pool of identical machines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    pub name: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub series: Option<String>,
    /// CPU per machine in millicores, if the job names it (else the series default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_millis: Option<u64>,
    /// Memory per machine in bytes, if the job names it (else the series default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// The job as policy sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobView {
    pub id: String,
    pub team: String,
    pub name: String,
    pub framework: String,
    #[serde(default)]
    pub kind: WorkloadKind,
    pub priority: i32,
    pub pools: Vec<PoolView>,
    pub storage: StorageMode,
    pub labels: BTreeMap<String, String>,
}

impl JobView {
    /// Total machines over all pools.
    pub fn total_nodes(&self) -> u64 {
        self.pools.iter().map(|p| u64::from(p.nodes)).sum()
    }
}

/// Live capacity of one GPU series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesCapacity {
    pub series: String,
    pub total: u32,
    pub allocatable: u32,
    pub in_use: u32,
    pub blocked: u32,
    pub free: u32,
    pub largest_free_block: u32,
    pub nodes: u32,
    /// GPUs on schedulable, Ready nodes with a blocking taint Forge's pods do not
    /// tolerate (not in `allocatable`/`free`).
    #[serde(default)]
    pub tainted: u32,
    /// The distinct taints on the series' nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<SeriesTaint>,
    /// CPU (millicores) a machine placed here gets when its pool names none.
    #[serde(default)]
    pub default_cpu_millis: u64,
    /// Memory (bytes) a machine placed here gets when its pool names none.
    #[serde(default)]
    pub default_memory_bytes: u64,
}

/// The pod annotation by which a quota policy marks an admission as **borrowing**
/// (issue 39 §3): its value is how many of the job's GPUs lie beyond the team's
/// guaranteed quota, on idle GPUs that are reclaimed — by preemption, least lost work
/// first — when the teams they are guaranteed to need them. Contract 0.3.0 has no field
/// for it (a later version will), so the placement carries it, and it stays on the
/// pods for operators to see. The host reads the largest value over the pools.
pub const BORROWED_GPUS_ANNOTATION: &str = "forge.dev/borrowed-gpus";

/// The name of the fleet (cluster) of a gateway configured without fleets: what
/// contract 0.3.0 shows as `request.fleets()` when a view names none.
pub const DEFAULT_FLEET: &str = "default";

/// The cluster as the scheduler sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub gpu_node_label: String,
    /// Every fleet summed.
    pub series: Vec<SeriesCapacity>,
    /// The fleets behind the gateway, each with its own capacity; empty: one fleet,
    /// [`DEFAULT_FLEET`], with all of `series` ([`ClusterView::fleet_views`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleets: Vec<FleetView>,
}

/// One fleet (a cluster with KubeRay) behind the gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    /// Its unique name.
    pub name: String,
    /// Labels from its configuration, e.g. `region`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `false` while the gateway cannot reach it.
    pub available: bool,
    /// Live capacity of its own nodes.
    pub series: Vec<SeriesCapacity>,
}

impl ClusterView {
    /// The fleets as policies see them: [`ClusterView::fleets`], or the one fleet
    /// [`DEFAULT_FLEET`] holding every series when the view names none.
    pub fn fleet_views(&self) -> std::borrow::Cow<'_, [FleetView]> {
        if self.fleets.is_empty() {
            std::borrow::Cow::Owned(vec![FleetView {
                name: DEFAULT_FLEET.to_string(),
                labels: BTreeMap::new(),
                available: true,
                series: self.series.clone(),
            }])
        } else {
            std::borrow::Cow::Borrowed(&self.fleets)
        }
    }

    /// Whether `name` is one of its fleets.
    pub fn has_fleet(&self, name: &str) -> bool {
        if self.fleets.is_empty() {
            name == DEFAULT_FLEET
        } else {
            self.fleets.iter().any(|f| f.name == name)
        }
    }
}

/// A team's usage of one series.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesUsage {
    pub series: String,
    pub running: u32,
    pub queued: u32,
}

/// One team's fair-share standing on one series (contract 0.3.0's `team-share`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamShare {
    pub team: String,
    pub series: String,
    /// GPU-seconds on the series, decayed with the fair share's half-life.
    pub decayed_gpu_seconds: f64,
    /// GPUs its dispatched jobs hold there now.
    pub allocated_gpus: u32,
    /// Its weight (1 unless the global policy says otherwise).
    pub weight: f64,
    /// (decayed use + allocation) / weight, normalised over the teams using the
    /// series (0..=1).
    pub share: f64,
    /// weight / the weights of the teams using the series (0..=1).
    pub fair_share: f64,
}

/// Every team's standing on every series, as the dispatcher last computed it: shared
/// by every request of a pass (the host copies it into a plugin only when asked).
/// Two are equal when they hold the same standings (none is ever NaN).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shares(pub Arc<Vec<TeamShare>>);

impl Eq for Shares {}

impl Shares {
    /// Whether `self` and `other` are the very same publication.
    pub fn same(&self, other: &Shares) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Everything the chain is asked about one job. The initial placement is derived
/// from the job (see [`Placement::initial`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRequest {
    pub job: JobView,
    pub cluster: ClusterView,
    pub usage: Vec<SeriesUsage>,
    /// The teams' fair-share standings (contract 0.3.0's `request.shares()`; not
    /// recorded with decisions).
    #[serde(skip)]
    pub shares: Shares,
}

/// Where one pool runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolPlacement {
    pub pool: String,
    pub series: Option<String>,
    pub node_selector: BTreeMap<String, String>,
    pub ray_resources: BTreeMap<String, f64>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Tolerations added to the pool's pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node affinity of the pool's pods.
    #[serde(default, skip_serializing_if = "NodeAffinity::is_empty")]
    pub affinity: NodeAffinity,
    /// The fleets the pool may run in (contract 0.3.0); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fleets: Vec<String>,
}

/// Placement of every pool, in the order of the job's pools.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    pub pools: Vec<PoolPlacement>,
}

impl Placement {
    /// GPUs a quota policy marked as borrowed ([`BORROWED_GPUS_ANNOTATION`]; 0 when
    /// unmarked or unreadable).
    pub fn borrowed_gpus(&self) -> u32 {
        self.pools
            .iter()
            .filter_map(|p| p.annotations.get(BORROWED_GPUS_ANNOTATION))
            .filter_map(|v| v.parse::<u32>().ok())
            .max()
            .unwrap_or(0)
    }

    /// The placement the first plugin sees: one entry per pool carrying its
    /// requested series (if any) and nothing else.
    pub fn initial(job: &JobView) -> Self {
        Placement {
            pools: job
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

/// A policy's (or the chain's) decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Decision {
    /// The job may run with this placement (shared: a link that admits unchanged, the
    /// chain and its trace hold the same one).
    Admit {
        placement: Arc<Placement>,
        /// The highest priority it may run at (contract 0.3.0; the chain keeps the
        /// lowest cap of its links).
        #[serde(
            default,
            rename = "priorityCap",
            skip_serializing_if = "Option::is_none"
        )]
        priority_cap: Option<i32>,
        /// `Some(false)`: it may not be preempted (any link saying so wins).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preemptible: Option<bool>,
    },
    /// The job waits; re-evaluated when capacity or usage changes.
    Queue { code: String, message: String },
    /// The job is refused.
    Reject {
        code: String,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        field: Option<String>,
    },
}

impl Decision {
    /// An admit with this placement and no terms (no priority cap, the host's
    /// preemptible default): what every 0.1.0 and 0.2.0 admit means.
    pub fn admit(placement: Placement) -> Self {
        Decision::Admit {
            placement: Arc::new(placement),
            priority_cap: None,
            preemptible: None,
        }
    }

    /// Short name of the decision kind, for metrics and traces.
    pub fn kind(&self) -> &'static str {
        match self {
            Decision::Admit { .. } => "admit",
            Decision::Queue { .. } => "queue",
            Decision::Reject { .. } => "reject",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admit_serializes_its_terms_in_camel_case_and_reads_back() {
        let admit = Decision::Admit {
            placement: Arc::new(Placement::default()),
            priority_cap: Some(100),
            preemptible: Some(false),
        };
        let json = serde_json::to_value(&admit).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"kind": "admit", "placement": {"pools": []},
                "priorityCap": 100, "preemptible": false})
        );
        assert_eq!(
            serde_json::from_value::<Decision>(json).expect("reads"),
            admit
        );
        // A record written before the terms existed still reads, without them.
        let old = serde_json::json!({"kind": "admit", "placement": {"pools": []}});
        assert_eq!(
            serde_json::from_value::<Decision>(old).expect("reads"),
            Decision::admit(Placement::default())
        );
    }
}
