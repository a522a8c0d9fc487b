//! Node and pod accounting, pure functions over the Node and Pod caches: what each
//! node of a GPU series has free (GPUs, CPU, memory), its labels and taints, and the
//! per-series snapshot policies and users see.
//!
//! - A node's GPUs are its `nvidia.com/gpu`; a node without it (GPU-less clusters,
//!   `FORGE_K8S_GPU_PASSTHROUGH=0`) counts the value of `FORGE_K8S_GPU_COUNT_LABEL`, else
//!   `FORGE_K8S_GPUS_PER_NODE` for its series, else none.
//! - A pod holds the GPUs of its containers' `nvidia.com/gpu` limits, else (a Forge pod
//!   on a GPU-less cluster) its `forge.dev/gpus` annotation; and its effective CPU and
//!   memory requests (the larger of its containers' sum and its largest init container,
//!   a limit standing in for a missing request), as the scheduler counts them.
//! - A node is usable when it is Ready, not cordoned, and Forge's pods
//!   (`FORGE_K8S_GPU_TOLERATIONS`) tolerate its `NoSchedule`/`NoExecute` taints; the
//!   GPUs of Ready, uncordoned nodes they do not tolerate are reported as `tainted`.

use std::collections::BTreeMap;
use std::sync::Arc;

use forge_policy_host::model::{
    ClusterView, SeriesCapacity, SeriesTaint, Taint, TaintEffect, untolerated,
};
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::labels::{ANNOTATION_GPUS, GPU_RESOURCE};
use crate::config::PodsConfig;
use crate::domain::quantity;

/// What the accounting needs to know about the cluster's conventions.
#[derive(Debug, Clone)]
pub struct NodeConventions {
    /// `FORGE_K8S_GPU_NODE_LABEL`.
    pub gpu_label: String,
    /// Tolerations, default resources and the GPU count fallbacks.
    pub pods: PodsConfig,
}

/// The series of a node without the GPU series label (a CPU node) in its room.
pub const NO_SERIES: &str = "";

/// One schedulable node and what is free on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRoom {
    /// The fleet (cluster) the node is in.
    pub fleet: String,
    pub name: String,
    pub series: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// Free GPUs.
    pub gpus: u32,
    /// Free CPU, millicores.
    pub cpu_millis: u64,
    /// Free memory, bytes.
    pub memory_bytes: u64,
}

/// One node of a GPU series as people see it (the console's node strip).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCell {
    pub name: String,
    pub series: String,
    /// Its GPUs (allocatable).
    pub gpus: u32,
    /// Those no pod holds.
    pub free: u32,
    /// Cordoned, NotReady, or tainted against Forge's pods: nothing is placed here.
    pub blocked: bool,
}

/// What a pod holds on its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub gpus: u32,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

impl Held {
    fn add(&mut self, other: Held) {
        self.gpus = self.gpus.saturating_add(other.gpus);
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
    }
}

fn get<'a>(map: Option<&'a BTreeMap<String, Quantity>>, key: &str) -> Option<&'a str> {
    map.and_then(|m| m.get(key)).map(|q| q.0.as_str())
}

fn whole(q: &str) -> u32 {
    q.trim().parse::<u32>().unwrap_or_else(|_| {
        tracing::warn!(quantity = q, "ignoring a non-integer GPU quantity");
        0
    })
}

/// GPUs a container asks for: its `nvidia.com/gpu` limit.
fn container_gpus(c: &Container) -> u32 {
    get(
        c.resources.as_ref().and_then(|r| r.limits.as_ref()),
        GPU_RESOURCE,
    )
    .map_or(0, whole)
}

/// CPU and memory a container requests (its limit where it sets no request, as the
/// API server defaults it).
fn container_requests(c: &Container) -> (u64, u64) {
    let r = c.resources.as_ref();
    let (req, lim) = (
        r.and_then(|r| r.requests.as_ref()),
        r.and_then(|r| r.limits.as_ref()),
    );
    let one = |key: &str, parse: fn(&str) -> Option<u64>| {
        get(req, key)
            .or_else(|| get(lim, key))
            .and_then(parse)
            .unwrap_or(0)
    };
    (
        one("cpu", quantity::cpu_millis),
        one("memory", quantity::bytes),
    )
}

/// What a pod holds on its node (GPUs, effective CPU and memory requests).
pub fn pod_held(pod: &Pod) -> Held {
    let Some(spec) = &pod.spec else {
        return Held::default();
    };
    let mut gpus: u32 = spec.containers.iter().map(container_gpus).sum();
    if gpus == 0 {
        gpus = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_GPUS))
            .map_or(0, |v| whole(v));
    }
    let (mut cpu, mut mem) = (0u64, 0u64);
    for c in &spec.containers {
        let (c_cpu, c_mem) = container_requests(c);
        cpu = cpu.saturating_add(c_cpu);
        mem = mem.saturating_add(c_mem);
    }
    for c in spec.init_containers.iter().flatten() {
        let (i_cpu, i_mem) = container_requests(c);
        cpu = cpu.max(i_cpu);
        mem = mem.max(i_mem);
    }
    Held {
        gpus,
        cpu_millis: cpu,
        memory_bytes: mem,
    }
}

/// A pod that holds node resources: bound and not finished.
pub fn holds_resources(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

/// Resources held per node name.
fn held_by_node(pods: &[Arc<Pod>]) -> BTreeMap<&str, Held> {
    let mut held: BTreeMap<&str, Held> = BTreeMap::new();
    for pod in pods.iter().filter(|p| holds_resources(p)) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            held.entry(node).or_default().add(pod_held(pod));
        }
    }
    held
}

fn node_series<'a>(node: &'a Node, label: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

fn schedulable(node: &Node) -> bool {
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    ready && !cordoned
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().filter(|v| !v.is_empty()),
                effect: TaintEffect::parse(&t.effect)?,
            })
        })
        .collect()
}

impl NodeConventions {
    /// GPUs of a node (capacity, or allocatable): `nvidia.com/gpu`, else the count
    /// label, else the per-series setting.
    pub fn node_gpus(&self, node: &Node, series: &str, allocatable: bool) -> u32 {
        let status = node.status.as_ref();
        let map = if allocatable {
            status.and_then(|s| s.allocatable.as_ref())
        } else {
            status.and_then(|s| s.capacity.as_ref())
        };
        if let Some(q) = get(map, GPU_RESOURCE) {
            return whole(q);
        }
        let labelled = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(&self.pods.gpu_count_label));
        match labelled {
            Some(v) => whole(v),
            None => self.pods.gpus_per_node.get(series).copied().unwrap_or(0),
        }
    }

    fn node_resource(node: &Node, key: &str, parse: fn(&str) -> Option<u64>) -> u64 {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        get(allocatable, key).and_then(parse).unwrap_or(0)
    }

    /// Every schedulable (Ready, uncordoned) node of fleet `fleet`, with what is free
    /// on it: the nodes of a GPU series, and the others as of series [`NO_SERIES`] (a
    /// job's submitter pod may run there). Tainted nodes are included: whether a pod
    /// may use them depends on its tolerations ([`untolerated`]).
    pub fn rooms(&self, fleet: &str, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Vec<NodeRoom> {
        let held = held_by_node(pods);
        nodes
            .iter()
            .filter(|n| schedulable(n))
            .map(|node| {
                let series = node_series(node, &self.gpu_label).unwrap_or(NO_SERIES);
                let name = node.metadata.name.clone().unwrap_or_default();
                let used = held.get(name.as_str()).copied().unwrap_or_default();
                NodeRoom {
                    fleet: fleet.to_string(),
                    series: series.to_string(),
                    labels: node.metadata.labels.clone().unwrap_or_default(),
                    taints: taints(node),
                    gpus: self.node_gpus(node, series, true).saturating_sub(used.gpus),
                    cpu_millis: Self::node_resource(node, "cpu", quantity::cpu_millis)
                        .saturating_sub(used.cpu_millis),
                    memory_bytes: Self::node_resource(node, "memory", quantity::bytes)
                        .saturating_sub(used.memory_bytes),
                    name,
                }
            })
            .collect()
    }

    /// Every node of a GPU series with its GPUs and what is free on it, by series then
    /// name.
    pub fn cells(&self, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Vec<NodeCell> {
        let held = held_by_node(pods);
        let tolerations = &self.pods.tolerations;
        let mut cells: Vec<NodeCell> = nodes
            .iter()
            .filter_map(|node| {
                let series = node_series(node, &self.gpu_label)?;
                let name = node.metadata.name.clone().unwrap_or_default();
                let gpus = self.node_gpus(node, series, true);
                let used = held.get(name.as_str()).map_or(0, |h| h.gpus);
                let blocked =
                    !schedulable(node) || untolerated(&taints(node), tolerations).next().is_some();
                Some(NodeCell {
                    series: series.to_string(),
                    gpus,
                    free: gpus.saturating_sub(used),
                    blocked,
                    name,
                })
            })
            .collect();
        cells.sort_by(|a, b| (&a.series, &a.name).cmp(&(&b.series, &b.name)));
        cells
    }

    /// The per-series snapshot (pure; unit-tested).
    pub fn compute(&self, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> ClusterView {
        let held = held_by_node(pods);
        let tolerations = &self.pods.tolerations;
        let mut by_series: BTreeMap<&str, SeriesCapacity> = BTreeMap::new();
        for node in nodes {
            let Some(series) = node_series(node, &self.gpu_label) else {
                continue;
            };
            let name = node.metadata.name.as_deref().unwrap_or_default();
            let entry = by_series.entry(series).or_insert_with(|| SeriesCapacity {
                series: series.to_string(),
                default_cpu_millis: self.pods.cpu_millis(series),
                default_memory_bytes: self.pods.memory_bytes(series),
                ..SeriesCapacity::default()
            });
            let capacity = self.node_gpus(node, series, false);
            let allocatable = self.node_gpus(node, series, true);
            let in_use = held.get(name).map_or(0, |h| h.gpus);
            let node_taints = taints(node);
            for t in &node_taints {
                match entry.taints.iter_mut().find(|s| s.taint == *t) {
                    Some(s) => s.nodes += 1,
                    None => entry.taints.push(SeriesTaint {
                        taint: t.clone(),
                        nodes: 1,
                    }),
                }
            }
            entry.nodes += 1;
            entry.total += capacity;
            if !schedulable(node) {
                entry.blocked += capacity;
            } else if untolerated(&node_taints, tolerations).next().is_some() {
                entry.tainted += allocatable;
            } else {
                entry.allocatable += allocatable;
                entry.in_use += in_use;
                let free = allocatable.saturating_sub(in_use);
                entry.free += free;
                entry.largest_free_block = entry.largest_free_block.max(free);
            }
        }
        ClusterView {
            fleets: Vec::new(),
            gpu_node_label: self.gpu_label.clone(),
            series: by_series.into_values().collect(),
        }
    }
}

#[cfg(test)]
mod tests;
