//! Native test harness: run a policy's logic in ordinary `cargo test`, with the same
//! settings parsing and chain-visible placement as in the host, and capture its logs.
//!
//! ```
//! # use forge_plugin_sdk::prelude::*;
//! # use forge_plugin_sdk::harness::{Harness, RequestBuilder};
//! # struct Allow;
//! # impl Policy for Allow { type Settings = serde_json::Value;
//! #   fn evaluate(_: &serde_json::Value, _: &Request<'_>) -> Decision { Decision::admit() } }
//! let h = Harness::<Allow>::new("{}").unwrap();
//! let req = RequestBuilder::new()
//!     .team("vision")
//!     .pool("train", 2, 8, Some("h100"))
//!     .series("h100", 64, 48, 4)
//!     .build();
//! assert!(matches!(h.evaluate(&req), Decision::Admit(_)));
//! ```

pub use crate::log::take_logs;
use crate::{
    Cluster, Decision, Fleet, Job, NodeAffinity, Placement, PlanVerdict, Policy, Pool,
    PoolPlacement, PreemptionPlan, Request, RequestParts, SeriesCapacity, SeriesTaint, SeriesUsage,
    StorageMode, Taint, TeamShare, WorkloadKind,
};

/// CPU (millicores) [`RequestBuilder::series`] gives a series' machines by default.
pub const DEFAULT_CPU_MILLIS: u64 = 8_000;
/// Memory (bytes) [`RequestBuilder::series`] gives a series' machines by default.
pub const DEFAULT_MEMORY_BYTES: u64 = 32 << 30;

/// A policy with validated settings, run natively.
pub struct Harness<P: Policy> {
    settings: P::Settings,
}

impl<P: Policy> Harness<P> {
    /// Parse and validate settings exactly as `validate-settings` does in the host.
    pub fn new(settings_json: &str) -> Result<Self, String> {
        let settings = crate::parse_settings::<P>(settings_json)?;
        P::validate(&settings)?;
        Ok(Harness { settings })
    }

    /// Evaluate one request.
    pub fn evaluate(&self, request: &Request<'_>) -> Decision {
        P::evaluate(&self.settings, request)
    }

    /// Evaluate one request and return the placement an admit hands on (the one the
    /// policy was given when it admitted unchanged), or the queue/reject decision.
    pub fn placed(&self, request: &Request<'_>) -> Result<Placement, Decision> {
        let decision = self.evaluate(request);
        match decision.placed(request.placement()) {
            Some(p) => Ok(p.clone()),
            None => Err(decision),
        }
    }

    /// Answer a preemption plan.
    pub fn plan_preemption(&self, plan: &PreemptionPlan) -> PlanVerdict {
        P::plan_preemption(&self.settings, plan)
    }
}

/// Run `validate-settings` natively.
pub fn validate<P: Policy>(settings_json: &str) -> Result<(), String> {
    crate::__validate::<P>(settings_json)
}

/// Builds a [`Request`] with sensible defaults: team `team-a`, framework `nemo-rl`, a
/// training job, shared storage, node label `starforge/gpu-series`, and the initial
/// placement the host gives the first plugin.
#[derive(Debug, Clone)]
pub struct RequestBuilder {
    job: Job,
    cluster: Cluster,
    usage: Vec<SeriesUsage>,
    shares: Vec<TeamShare>,
    placement: Option<Placement>,
    /// The fleets, when not the one `default` fleet holding the whole capacity.
    fleets: Option<Vec<Fleet>>,
}

impl Default for RequestBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RequestBuilder {
    pub fn new() -> Self {
        RequestBuilder {
            job: Job {
                id: "job-1".into(),
                team: "team-a".into(),
                name: "train".into(),
                framework: "nemo-rl".into(),
                kind: WorkloadKind::Training,
                priority: 0,
                pools: Vec::new(),
                storage: StorageMode::Shared,
                labels: Vec::new(),
            },
            cluster: Cluster {
                gpu_node_label: "starforge/gpu-series".into(),
                series: Vec::new(),
            },
            usage: Vec::new(),
            shares: Vec::new(),
            placement: None,
            fleets: None,
        }
    }

    /// Fleets named `names` behind the gateway (in that order, each available, the
    /// first holding the whole capacity), instead of the one `default` fleet.
    pub fn fleets(mut self, names: &[&str]) -> Self {
        self.fleets = Some(
            names
                .iter()
                .enumerate()
                .map(|(i, name)| Fleet {
                    name: (*name).into(),
                    labels: Vec::new(),
                    available: true,
                    series: if i == 0 {
                        self.cluster.series.clone()
                    } else {
                        Vec::new()
                    },
                })
                .collect(),
        );
        self
    }

    pub fn team(mut self, team: &str) -> Self {
        self.job.team = team.into();
        self
    }

    pub fn job_id(mut self, id: &str) -> Self {
        self.job.id = id.into();
        self
    }

    pub fn name(mut self, name: &str) -> Self {
        self.job.name = name.into();
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.job.labels.push((key.into(), value.into()));
        self
    }

    pub fn storage(mut self, storage: StorageMode) -> Self {
        self.job.storage = storage;
        self
    }

    /// The workload kind (training by default).
    pub fn kind(mut self, kind: WorkloadKind) -> Self {
        self.job.kind = kind;
        self
    }

    /// CPU (millicores) and memory (bytes) per machine of the last added pool.
    pub fn resources(mut self, cpu_millis: u64, memory_bytes: u64) -> Self {
        if let Some(p) = self.job.pools.last_mut() {
            p.cpu_millis = Some(cpu_millis);
            p.memory_bytes = Some(memory_bytes);
        }
        self
    }

    /// Add a pool (`nodes` machines with `gpus` GPUs each, optional requested series).
    pub fn pool(mut self, name: &str, nodes: u32, gpus: u32, series: Option<&str>) -> Self {
        self.job.pools.push(Pool {
            name: name.into(),
            nodes,
            gpus_per_node: gpus,
            series: series.map(str::to_string),
            cpu_millis: None,
            memory_bytes: None,
        });
        self
    }

    pub fn gpu_node_label(mut self, key: &str) -> Self {
        self.cluster.gpu_node_label = key.into();
        self
    }

    /// Add a series with `total` GPUs, `free` of them free, on `nodes` nodes (8 GPUs
    /// each is assumed for the largest free block unless set with [`Self::capacity`]).
    pub fn series(self, name: &str, total: u32, free: u32, nodes: u32) -> Self {
        let largest = free.min(total.checked_div(nodes).unwrap_or(0));
        self.capacity(SeriesCapacity {
            series: name.into(),
            total,
            allocatable: total,
            in_use: total - free.min(total),
            blocked: 0,
            free,
            largest_free_block: largest,
            nodes,
            tainted: 0,
            taints: Vec::new(),
            default_cpu_millis: DEFAULT_CPU_MILLIS,
            default_memory_bytes: DEFAULT_MEMORY_BYTES,
        })
    }

    /// Mark `gpus` GPUs on `nodes` nodes of the last added series as tainted with
    /// `taint` (not tolerated by Forge's pods: moved out of allocatable and free).
    pub fn tainted(mut self, taint: Taint, nodes: u32, gpus: u32) -> Self {
        if let Some(s) = self.cluster.series.last_mut() {
            s.tainted += gpus;
            s.allocatable = s.allocatable.saturating_sub(gpus);
            s.free = s.free.saturating_sub(gpus);
            s.largest_free_block = s.largest_free_block.min(s.free);
            s.taints.push(SeriesTaint { taint, nodes });
        }
        self
    }

    /// Add a series with every field given.
    pub fn capacity(mut self, c: SeriesCapacity) -> Self {
        self.cluster.series.push(c);
        self
    }

    /// The team's usage of a series.
    pub fn usage(mut self, series: &str, running: u32, queued: u32) -> Self {
        self.usage.push(SeriesUsage {
            series: series.into(),
            running,
            queued,
            borrowed: 0,
        });
        self
    }

    /// A team's fair-share standing on a series.
    pub fn share(mut self, share: TeamShare) -> Self {
        self.shares.push(share);
        self
    }

    /// Override the placement so far (as if earlier plugins had run).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = Some(placement);
        self
    }

    pub fn build(self) -> Request<'static> {
        let placement = self.placement.unwrap_or_else(|| Placement {
            pools: self
                .job
                .pools
                .iter()
                .map(|p| PoolPlacement {
                    pool: p.name.clone(),
                    series: p.series.clone(),
                    node_selector: Vec::new(),
                    ray_resources: Vec::new(),
                    labels: Vec::new(),
                    annotations: Vec::new(),
                    tolerations: Vec::new(),
                    affinity: NodeAffinity {
                        required: Vec::new(),
                        preferred: Vec::new(),
                    },
                    fleets: Vec::new(),
                })
                .collect(),
        });
        // One cluster: one fleet named `default` with the whole capacity, as the host
        // shows it.
        let fleets = self.fleets.unwrap_or_else(|| {
            vec![Fleet {
                name: "default".into(),
                labels: Vec::new(),
                available: true,
                series: self.cluster.series.clone(),
            }]
        });
        Request::from_parts(RequestParts {
            job: self.job,
            cluster: self.cluster,
            fleets,
            usage: self.usage,
            shares: self.shares,
            placement,
        })
    }
}
