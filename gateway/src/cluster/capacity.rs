//! Live GPU capacity per series, from Node and Pod reflectors.
//!
//! The same caches feed `GET /v1/capacity` and the cluster snapshot every policy
//! evaluation sees, so the capacity users are shown and the capacity admission decides
//! on come from one source (the one the scheduler uses: Node objects and bound pods).
//! Nothing is listed per request: kube-runtime watchers keep the caches current and
//! relist after 410 Gone or a dropped watch.
//!
//! Starting does not wait for the first list: the gateway comes up (and answers
//! `/readyz` with "caches not synced") while the caches fill. Whoever needs them whole
//! waits for [`Capacity::synced`] — the dispatcher before its first pass, admission
//! (bounded) before deciding on an empty view.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use forge_policy_host::model::{ClusterView, SeriesCapacity};

use super::labels::{GPU_RESOURCE, LABEL_JOB_ID};

/// Reader side of the Node and Pod caches.
#[derive(Clone)]
pub struct Capacity {
    nodes: Store<Node>,
    pods: Store<Pod>,
    gpu_label: Arc<str>,
    /// Bumped on every Node or Pod event: the dispatcher waits on it to re-run the
    /// queue when capacity may have changed.
    changes: tokio::sync::watch::Receiver<u64>,
    /// The last snapshot and the change generation it was computed at: requests reuse
    /// it until a Node or Pod event arrives (computing it walks every node and pod).
    cached: Arc<arc_swap::ArcSwapOption<(u64, ClusterView)>>,
    /// Becomes true once both caches have listed.
    synced: tokio::sync::watch::Receiver<bool>,
}

/// Free GPUs of each schedulable node, per series (input of the gang fit).
pub type FreeByNode = BTreeMap<String, Vec<u32>>;

impl std::fmt::Debug for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capacity")
            .field("gpu_label", &self.gpu_label)
            .finish()
    }
}

impl Capacity {
    /// Start cluster-wide Node and Pod reflectors (they list in the background; see
    /// [`Capacity::synced`]).
    pub fn start(client: Client, gpu_label: &str) -> Self {
        let (tx, changes) = tokio::sync::watch::channel(0u64);
        let tx = Arc::new(tx);
        let nodes = spawn_reflector(Api::<Node>::all(client.clone()), tx.clone());
        let pods = spawn_reflector(Api::<Pod>::all(client), tx);
        let (synced_tx, synced) = tokio::sync::watch::channel(false);
        let (n, p) = (nodes.clone(), pods.clone());
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            if n.wait_until_ready().await.is_ok() && p.wait_until_ready().await.is_ok() {
                tracing::info!(took = ?started.elapsed(), "Node and Pod caches synced");
                synced_tx.send_replace(true);
            }
        });
        Capacity {
            nodes,
            pods,
            gpu_label: gpu_label.into(),
            changes,
            cached: Arc::default(),
            synced,
        }
    }

    /// Whether both caches have listed (readiness).
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until both caches have listed.
    pub async fn synced(&self) {
        let mut rx = self.synced.clone();
        // An error means the sync task ended without syncing (the caches are gone).
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Waits at most `within` for the caches; whether they are synced.
    pub async fn synced_within(&self, within: Duration) -> bool {
        tokio::time::timeout(within, self.synced()).await.is_ok() && self.is_synced()
    }

    /// A receiver that changes whenever a Node or Pod event arrives.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The node label that names a node's GPU series.
    pub fn gpu_label(&self) -> &str {
        &self.gpu_label
    }

    /// Free GPUs per schedulable node, per series.
    pub fn free_by_node(&self) -> FreeByNode {
        free_by_node(&self.gpu_label, &self.nodes.state(), &self.pods.state())
    }

    /// GPUs held by bound, unfinished pods of each Forge job (by the job-id label).
    pub fn bound_gpus_by_job(&self) -> BTreeMap<String, u32> {
        let mut out = BTreeMap::new();
        for pod in self.pods.state().iter().filter(|p| holds_resources(p)) {
            if let Some(id) = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_JOB_ID))
            {
                *out.entry(id.clone()).or_default() += pod_gpus(pod);
            }
        }
        out
    }

    /// The cluster snapshot policies and users see (recomputed only after a Node or
    /// Pod event; otherwise the cached one).
    pub fn snapshot(&self) -> ClusterView {
        let generation = *self.changes.borrow();
        if let Some(hit) = self.cached.load().as_ref()
            && hit.0 == generation
        {
            return hit.1.clone();
        }
        let view = compute(&self.gpu_label, &self.nodes.state(), &self.pods.state());
        self.cached
            .store(Some(Arc::new((generation, view.clone()))));
        view
    }
}

fn spawn_reflector<K>(api: Api<K>, changed: Arc<tokio::sync::watch::Sender<u64>>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + serde::de::DeserializeOwned
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => changed.send_modify(|n| *n = n.wrapping_add(1)),
                Err(e) => tracing::warn!("capacity watch error (retrying with backoff): {e}"),
            }
        }
    });
    reader
}

/// GPUs requested by a pod: the sum of its containers' `nvidia.com/gpu` limits.
pub fn pod_gpus(pod: &Pod) -> u32 {
    let Some(spec) = &pod.spec else { return 0 };
    spec.containers
        .iter()
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(GPU_RESOURCE))
        .map(|q| quantity_u32(&q.0))
        .sum()
}

/// A pod that holds node resources: bound and not finished.
fn holds_resources(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    bound && !matches!(phase, Some("Succeeded" | "Failed"))
}

fn quantity_u32(q: &str) -> u32 {
    q.trim().parse::<u32>().unwrap_or_else(|_| {
        tracing::warn!(quantity = q, "ignoring a non-integer GPU quantity");
        0
    })
}

fn node_gpus(node: &Node, allocatable: bool) -> u32 {
    let status = node.status.as_ref();
    let map = if allocatable {
        status.and_then(|s| s.allocatable.as_ref())
    } else {
        status.and_then(|s| s.capacity.as_ref())
    };
    map.and_then(|m| m.get(GPU_RESOURCE))
        .map(|q| quantity_u32(&q.0))
        .unwrap_or(0)
}

fn node_schedulable(node: &Node) -> bool {
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

fn node_series<'a>(node: &'a Node, label: &str) -> Option<&'a str> {
    node.metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

/// GPUs held per node name.
fn used_by_node(pods: &[Arc<Pod>]) -> BTreeMap<&str, u32> {
    let mut used: BTreeMap<&str, u32> = BTreeMap::new();
    for pod in pods.iter().filter(|p| holds_resources(p)) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            *used.entry(node).or_default() += pod_gpus(pod);
        }
    }
    used
}

/// Aggregate nodes and pods into the per-series snapshot (pure; unit-tested).
pub fn compute(gpu_label: &str, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> ClusterView {
    let used = used_by_node(pods);
    let mut by_series: BTreeMap<&str, SeriesCapacity> = BTreeMap::new();
    for node in nodes {
        let Some(series) = node_series(node, gpu_label) else {
            continue;
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let entry = by_series.entry(series).or_insert_with(|| SeriesCapacity {
            series: series.to_string(),
            ..SeriesCapacity::default()
        });
        let capacity = node_gpus(node, false);
        let allocatable = node_gpus(node, true);
        let in_use = used.get(name).copied().unwrap_or(0);
        entry.nodes += 1;
        entry.total += capacity;
        if node_schedulable(node) {
            entry.allocatable += allocatable;
            entry.in_use += in_use;
            let free = allocatable.saturating_sub(in_use);
            entry.free += free;
            entry.largest_free_block = entry.largest_free_block.max(free);
        } else {
            entry.blocked += capacity;
        }
    }
    ClusterView {
        gpu_node_label: gpu_label.to_string(),
        series: by_series.into_values().collect(),
    }
}

/// Free GPUs of every schedulable node, grouped by series (pure; unit-tested).
pub fn free_by_node(gpu_label: &str, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> FreeByNode {
    let used = used_by_node(pods);
    let mut out = FreeByNode::new();
    for node in nodes.iter().filter(|n| node_schedulable(n)) {
        let Some(series) = node_series(node, gpu_label) else {
            continue;
        };
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let free = node_gpus(node, true).saturating_sub(used.get(name).copied().unwrap_or(0));
        out.entry(series.to_string()).or_default().push(free);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, series: &str, gpus: u32, ready: bool, cordoned: bool) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"starforge/gpu-series": series}},
                "spec": {"unschedulable": cordoned},
                "status": {
                    "capacity": {"nvidia.com/gpu": gpus.to_string()},
                    "allocatable": {"nvidia.com/gpu": gpus.to_string()},
                    "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]
                }
            }))
            .unwrap(),
        )
    }

    fn pod(node: &str, gpus: u32, phase: &str, team: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("p-{node}-{gpus}"), "labels": {"forge.dev/team": team}},
                "spec": {"nodeName": node, "containers": [
                    {"name": "ray", "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}},
                    {"name": "sidecar"}
                ]},
                "status": {"phase": phase}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn aggregates_per_series_with_blocked_and_largest_block() {
        let nodes = vec![
            node("a1", "h100", 8, true, false),
            node("a2", "h100", 8, true, false),
            node("a3", "h100", 8, false, false),
            node("b1", "h200", 8, true, true),
        ];
        let pods = vec![
            pod("a1", 6, "Running", "t"),
            pod("a2", 2, "Pending", "t"),
            pod("a2", 8, "Succeeded", "t"),
        ];
        let view = compute("starforge/gpu-series", &nodes, &pods);
        let h100 = &view.series[0];
        assert_eq!(
            (
                h100.series.as_str(),
                h100.total,
                h100.allocatable,
                h100.in_use,
                h100.blocked,
                h100.free
            ),
            ("h100", 24, 16, 8, 8, 8)
        );
        assert_eq!((h100.largest_free_block, h100.nodes), (6, 3));
        let h200 = &view.series[1];
        assert_eq!(
            (h200.total, h200.allocatable, h200.blocked, h200.free),
            (8, 0, 8, 0)
        );
    }

    #[test]
    fn free_by_node_skips_blocked_nodes_and_finished_pods() {
        let nodes = vec![
            node("a1", "h100", 8, true, false),
            node("a2", "h100", 8, true, false),
            node("a3", "h100", 8, false, false),
            node("b1", "h200", 8, true, true),
        ];
        let pods = vec![pod("a1", 6, "Running", "t"), pod("a2", 8, "Succeeded", "t")];
        let free = free_by_node("starforge/gpu-series", &nodes, &pods);
        assert_eq!(free.get("h100"), Some(&vec![2, 8]));
        assert_eq!(free.get("h200"), None);
    }
}
