//! Live GPU capacity per series, from Node and Pod reflectors.
//!
//! The same caches feed `GET /v1/capacity`, the cluster snapshot every policy
//! evaluation sees and the gang fit's per-node room, so the capacity users are shown
//! and the capacity admission decides on come from one source (the one the scheduler
//! uses: Node objects and bound pods; the accounting is [`super::nodes`]). Nothing is
//! listed per request: kube-runtime watchers keep the caches current and relist after
//! 410 Gone or a dropped watch.
//!
//! A fleet whose API server stops answering is marked unavailable
//! ([`super::availability`]): its rooms read as empty until it answers again, so
//! nothing is placed there meanwhile; its snapshot keeps the last known series, marked
//! unavailable (a job that could run there is admitted and waits, not rejected).
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

use forge_policy_host::model::{ClusterView, FleetView};

use super::availability::Availability;
use super::labels::{
    ANNOTATION_GPUS, JOB_NAME, LABEL_JOB_ID, LABEL_PLAYGROUND_ID, LABEL_TEAM, RAY_GROUP,
    SUBMITTER_GROUP,
};
use super::nodes::{NodeCell, NodeConventions, NodeRoom, holds_resources};

/// Team → series → playground GPUs `(running, pending)`.
type PlaygroundGpus = BTreeMap<String, BTreeMap<String, (u32, u32)>>;

/// Reader side of the Node and Pod caches.
#[derive(Clone)]
pub struct Capacity {
    nodes: Store<Node>,
    pods: Store<Pod>,
    conventions: Arc<NodeConventions>,
    /// The fleet these caches watch (its name and labels; its series are each
    /// snapshot's).
    fleet: Arc<FleetView>,
    /// Bumped on every Node or Pod event: the dispatcher waits on it to re-run the
    /// queue when capacity may have changed.
    changes: tokio::sync::watch::Receiver<u64>,
    /// The last snapshot and the change generation it was computed at: requests reuse
    /// it until a Node or Pod event arrives (computing it walks every node and pod).
    cached: Arc<arc_swap::ArcSwapOption<(u64, ClusterView)>>,
    /// Every team's playground GPUs at a change generation (a walk of every pod,
    /// reused like the snapshot: admission asks for it on every request).
    playgrounds: Arc<arc_swap::ArcSwapOption<(u64, Arc<PlaygroundGpus>)>>,
    /// The gang fit's rooms at a change generation (walks every node and pod).
    rooms: Arc<arc_swap::ArcSwapOption<(u64, Arc<Vec<NodeRoom>>)>>,
    /// Becomes true once both caches have listed.
    synced: tokio::sync::watch::Receiver<bool>,
    /// Whether the fleet's API server answers.
    availability: Availability,
}

impl std::fmt::Debug for Capacity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capacity")
            .field("gpu_label", &self.conventions.gpu_label)
            .finish()
    }
}

impl Capacity {
    /// Start cluster-wide Node and Pod reflectors of fleet `fleet` (name and labels;
    /// they list in the background; see [`Capacity::synced`]).
    pub fn start(client: Client, conventions: NodeConventions, fleet: FleetView) -> Self {
        let (tx, changes) = tokio::sync::watch::channel(0u64);
        let tx = Arc::new(tx);
        let availability = Availability::probe(client.clone(), fleet.name.clone(), tx.clone());
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
            conventions: Arc::new(conventions),
            fleet: Arc::new(fleet),
            changes,
            cached: Arc::default(),
            playgrounds: Arc::default(),
            rooms: Arc::default(),
            synced,
            availability,
        }
    }

    /// Whether the fleet's API server answers its probes (otherwise its capacity reads
    /// as unknown).
    pub fn is_available(&self) -> bool {
        self.availability.is_available()
    }

    /// The fleet's name.
    pub fn fleet(&self) -> &str {
        &self.fleet.name
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

    /// The caches' generation: it moves with every Node or Pod event.
    pub fn generation(&self) -> u64 {
        *self.changes.borrow()
    }

    /// A receiver that changes whenever a Node or Pod event arrives.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.clone()
    }

    /// The node label that names a node's GPU series.
    pub fn gpu_label(&self) -> &str {
        &self.conventions.gpu_label
    }

    /// Every schedulable node of a GPU series and what is free on it (the gang fit's
    /// input), computed once per Node/Pod change and shared.
    pub fn rooms(&self) -> Arc<Vec<NodeRoom>> {
        if !self.is_available() {
            return Arc::default();
        }
        let generation = *self.changes.borrow();
        if let Some(hit) = self.rooms.load().as_ref()
            && hit.0 == generation
        {
            return hit.1.clone();
        }
        let rooms = Arc::new(self.conventions.rooms(
            &self.fleet.name,
            &self.nodes.state(),
            &self.pods.state(),
        ));
        self.rooms
            .store(Some(Arc::new((generation, rooms.clone()))));
        rooms
    }

    /// Every GPU node and its room, for people (computed on each call: an admin
    /// page asks, not the scheduler).
    pub fn node_cells(&self) -> Vec<NodeCell> {
        self.conventions
            .cells(&self.nodes.state(), &self.pods.state())
    }

    /// The gang fit's rooms as they would be without the pods of `jobs` (a planned
    /// preemption's victims): computed afresh, never cached.
    pub fn rooms_without(&self, jobs: &std::collections::BTreeSet<&str>) -> Vec<NodeRoom> {
        if !self.is_available() {
            return Vec::new();
        }
        let pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_JOB_ID))
                    .is_none_or(|id| !jobs.contains(id.as_str()))
            })
            .collect();
        self.conventions
            .rooms(&self.fleet.name, &self.nodes.state(), &pods)
    }

    /// Bound, unfinished pods of each Forge job, per group (`ray.io/group`:
    /// `headgroup` or the pool's name; the submitter Job's pod: [`SUBMITTER_GROUP`]):
    /// the machines the scheduler has placed.
    pub fn bound_machines(&self) -> BTreeMap<(String, String), u32> {
        let mut out = BTreeMap::new();
        for pod in self.pods.state().iter().filter(|p| holds_resources(p)) {
            let Some(labels) = pod.metadata.labels.as_ref() else {
                continue;
            };
            let group = match labels.get(RAY_GROUP) {
                Some(group) => group.as_str(),
                None if labels.contains_key(JOB_NAME) => SUBMITTER_GROUP,
                None => continue,
            };
            if let Some(id) = labels.get(LABEL_JOB_ID) {
                *out.entry((id.clone(), group.to_string())).or_default() += 1;
            }
        }
        out
    }

    /// GPUs of `team`'s playground pods per series, `(running, pending)`: a pod bound
    /// to a node and not finished runs, an unbound one waits (from the same Pod cache
    /// as the capacity, so every replica counts the same).
    pub fn playground_gpus(&self, team: &str) -> BTreeMap<String, (u32, u32)> {
        self.all_playground_gpus()
            .get(team)
            .cloned()
            .unwrap_or_default()
    }

    /// Every team's playground GPUs, computed once per Node/Pod change.
    fn all_playground_gpus(&self) -> Arc<PlaygroundGpus> {
        let generation = *self.changes.borrow();
        if let Some(hit) = self.playgrounds.load().as_ref()
            && hit.0 == generation
        {
            return hit.1.clone();
        }
        let mut out = PlaygroundGpus::new();
        for pod in self.pods.state() {
            let labels = pod.metadata.labels.as_ref();
            let (Some(team), Some(_)) = (
                labels.and_then(|l| l.get(LABEL_TEAM)),
                labels.and_then(|l| l.get(LABEL_PLAYGROUND_ID)),
            ) else {
                continue;
            };
            let spec = pod.spec.as_ref();
            let Some(series) = spec
                .and_then(|s| s.node_selector.as_ref())
                .and_then(|n| n.get(&self.conventions.gpu_label))
            else {
                continue;
            };
            let gpus = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_GPUS))
                .and_then(|g| g.parse::<u32>().ok())
                .unwrap_or(0);
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            let entry = out
                .entry(team.clone())
                .or_default()
                .entry(series.clone())
                .or_default();
            if holds_resources(&pod) {
                entry.0 = entry.0.saturating_add(gpus);
            } else if !matches!(phase, Some("Succeeded" | "Failed")) {
                entry.1 = entry.1.saturating_add(gpus);
            }
        }
        let out = Arc::new(out);
        self.playgrounds
            .store(Some(Arc::new((generation, out.clone()))));
        out
    }

    /// The cluster snapshot policies and users see, with this fleet as its one fleet
    /// (recomputed only after a Node or Pod event; otherwise the cached one).
    pub fn snapshot(&self) -> ClusterView {
        let mut view = self.snapshot_cached();
        // An unavailable fleet's series are its last known ones (admission still
        // queues jobs for them: they wait rather than being rejected), marked so.
        let available = self.is_available();
        for f in &mut view.fleets {
            f.available = available;
        }
        view
    }

    /// The snapshot as the caches last computed it.
    fn snapshot_cached(&self) -> ClusterView {
        let generation = *self.changes.borrow();
        if let Some(hit) = self.cached.load().as_ref()
            && hit.0 == generation
        {
            return hit.1.clone();
        }
        let mut view = self
            .conventions
            .compute(&self.nodes.state(), &self.pods.state());
        view.fleets = vec![FleetView {
            series: view.series.clone(),
            ..(*self.fleet).clone()
        }];
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
    // Every event bumps the generation, deletions and relists included (the cached
    // snapshot and rooms are keyed by it; `applied_objects` would drop deletions and
    // leave a deleted pod's GPUs counted until the next change).
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
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
