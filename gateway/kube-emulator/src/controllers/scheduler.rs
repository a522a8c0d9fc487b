//! The simulated default scheduler: binds pending pods (no `spec.nodeName`,
//! `schedulerName` unset or `default-scheduler`) one at a time, oldest first, through
//! the `pods/binding` subresource, using the filters and LeastAllocated score in
//! [`super::fit`] (with VolumeBinding's PreFilter on the pod's claims and
//! VolumeRestrictions' `ReadWriteOncePod` check). An unbindable
//! pod gets `PodScheduled=False` (`Unschedulable`) and a
//! `FailedScheduling` Warning event with the real `FitError` wording, and is retried
//! when nodes or pods change (the real scheduler's unschedulable queue flush); a
//! message is re-emitted only when it changes or after 60 s. No gang logic, no
//! preemption, no priorities.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, PersistentVolumeClaim, Pod};
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

use super::error::ControllerError;
use super::events::{Kind, emit};
use super::fit::{
    NodeInfo, Reject, Resources, claims_prefilter, filter, fit_message, pod_requests,
    prefilter_message, read_write_once_pod_conflict, score,
};
use super::shared::Shared;
use super::status::{merge_status, now};

const REPORTER: &str = "default-scheduler";

/// Bookkeeping of one pod that did not fit.
#[derive(Debug)]
struct Unschedulable {
    message: String,
    at: Instant,
    generation: u64,
}

/// Runs the scheduler until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let notify = Arc::new(Notify::new());
    let generation = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (pods, pods_writer) = reflector::store::<Pod>();
    let (nodes, nodes_writer) = reflector::store::<Node>();
    // A pod finishing or going away frees resources: retry unschedulable pods.
    spawn_reflector(&shared, pods_writer, &notify, &generation, |ev| match ev {
        Ok(watcher::Event::Delete(_) | watcher::Event::InitDone) => true,
        Ok(watcher::Event::Apply(p)) => is_finished(p),
        _ => false,
    });
    // Any node or claim change may make an unschedulable pod fit.
    spawn_reflector(&shared, nodes_writer, &notify, &generation, |_| true);
    let (claims, claims_writer) = reflector::store::<PersistentVolumeClaim>();
    spawn_reflector(&shared, claims_writer, &notify, &generation, |_| true);
    let mut queue = Queue {
        shared: &shared,
        failed: HashMap::new(),
        assumed: HashMap::new(),
    };
    loop {
        tokio::select! {
            () = shared.shutdown.cancelled() => return Ok(()),
            () = notify.notified() => {},
            () = tokio::time::sleep(Duration::from_secs(5)) => {},
        }
        let gen_now = generation.load(std::sync::atomic::Ordering::Relaxed);
        queue.pass(&pods, &nodes, &claims, gen_now).await;
    }
}

/// Keeps `writer`'s store in sync with every object of `K` until shutdown; each
/// event wakes the queue, and bumps `generation` when `may_free` says it may make an
/// unschedulable pod fit.
fn spawn_reflector<K>(
    shared: &Shared,
    writer: reflector::store::Writer<K>,
    notify: &Arc<Notify>,
    generation: &Arc<std::sync::atomic::AtomicU64>,
    may_free: impl Fn(&Result<watcher::Event<K>, watcher::Error>) -> bool + Send + 'static,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (n, g) = (notify.clone(), generation.clone());
    let stream = reflector::reflector(
        writer,
        watcher(
            Api::<K>::all(shared.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff()
    .for_each(move |ev| {
        if may_free(&ev) {
            g.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        n.notify_one();
        futures::future::ready(())
    });
    let token = shared.shutdown.clone();
    tokio::spawn(async move {
        tokio::select! { () = stream => {}, () = token.cancelled() => {} }
    });
}

fn is_pending_for_us(p: &Pod) -> bool {
    let spec = p.spec.as_ref();
    spec.is_some_and(|s| s.node_name.as_deref().unwrap_or("").is_empty())
        && spec
            .and_then(|s| s.scheduler_name.as_deref())
            .is_none_or(|n| n.is_empty() || n == REPORTER)
        && p.metadata.deletion_timestamp.is_none()
        && p.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_none_or(|ph| ph == "Pending")
}

/// A pod in phase Succeeded or Failed (it holds no resources or volumes).
fn is_finished(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|ph| ph == "Succeeded" || ph == "Failed")
}

fn key(p: &Pod) -> String {
    format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any())
}

/// The scheduling queue: pods that did not fit (with their message), and pods bound
/// by us that the reflector has not caught up with yet ("assumed" pods).
struct Queue<'a> {
    shared: &'a Shared,
    failed: HashMap<String, Unschedulable>,
    assumed: HashMap<String, (String, Resources)>,
}

impl Queue<'_> {
    /// One pass over the pending pods, oldest first. `generation` counts the cluster
    /// changes that may make an unschedulable pod fit.
    async fn pass(
        &mut self,
        pods: &Store<Pod>,
        nodes: &Store<Node>,
        claims: &Store<PersistentVolumeClaim>,
        generation: u64,
    ) {
        let all_pods = pods.state();
        let all_claims = claims.state();
        let (mut infos, mut pending) = self.view(&all_pods, &nodes.state());
        pending.sort_by_key(|p| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.name_any(),
            )
        });
        for pod in pending {
            if self.shared.shutdown.is_cancelled() {
                return;
            }
            let k = key(&pod);
            if let Some(f) = self.failed.get(&k)
                && f.generation == generation
                && f.at.elapsed() < Duration::from_secs(60)
            {
                continue;
            }
            if let Some(msg) = claims_prefilter(&pod, &all_claims) {
                let message = prefilter_message(infos.len(), &msg);
                self.unschedulable(&pod, message, generation).await;
                continue;
            }
            let users = all_pods.iter().filter(|p| {
                let assigned = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                (assigned.is_some_and(|n| !n.is_empty()) && !is_finished(p))
                    || self.assumed.contains_key(&key(p))
            });
            let rwop = read_write_once_pod_conflict(&pod, &all_claims, users.map(|p| &**p));
            self.schedule_one(&mut infos, &pod, rwop, generation).await;
        }
    }

    /// The nodes with what bound (and assumed) pods use, and the pods waiting for us.
    fn view(
        &mut self,
        all_pods: &[Arc<Pod>],
        nodes: &[Arc<Node>],
    ) -> (BTreeMap<String, NodeInfo>, Vec<Arc<Pod>>) {
        let mut infos: BTreeMap<String, NodeInfo> = nodes
            .iter()
            .map(|n| {
                let i = NodeInfo::from_node(n);
                (i.name.clone(), i)
            })
            .collect();
        let mut pending: Vec<Arc<Pod>> = Vec::new();
        for p in all_pods {
            let k = key(p);
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty());
            match node {
                Some(node) => {
                    self.assumed.remove(&k);
                    if !is_finished(p)
                        && let Some(info) = infos.get_mut(&node)
                    {
                        info.add(&pod_requests(p));
                    }
                }
                None if is_pending_for_us(p) && !self.assumed.contains_key(&k) => {
                    pending.push(p.clone());
                }
                None => {}
            }
        }
        for (node, req) in self.assumed.values() {
            if let Some(info) = infos.get_mut(node) {
                info.add(req);
            }
        }
        let live: std::collections::HashSet<String> = all_pods.iter().map(|p| key(p)).collect();
        self.failed.retain(|k, _| live.contains(k));
        self.assumed.retain(|k, _| live.contains(k));
        (infos, pending)
    }

    /// Filters and scores the nodes for `pod`, re-checks the choice live and binds it,
    /// or reports why it does not fit.
    async fn schedule_one(
        &mut self,
        infos: &mut BTreeMap<String, NodeInfo>,
        pod: &Pod,
        rwop_conflict: bool,
        generation: u64,
    ) {
        let req = pod_requests(pod);
        let mut best: Option<(i128, &str)> = None;
        let mut rejects: Vec<Reject> = Vec::new();
        for info in infos.values() {
            let rejected = filter(info, pod, &req)
                .or_else(|| rwop_conflict.then_some(Reject::ReadWriteOncePodConflict));
            match rejected {
                None => {
                    let sc = score(info, &req);
                    if best.is_none_or(|(b, _)| sc > b) {
                        best = Some((sc, &info.name));
                    }
                }
                Some(r) => rejects.push(r),
            }
        }
        match best.map(|(_, n)| n.to_owned()) {
            Some(node) => {
                if still_fits(self.shared, infos, &node, pod, &req).await {
                    self.bind(infos, pod, &node, req).await;
                }
            }
            None => {
                let message = fit_message(infos.len(), &rejects);
                self.unschedulable(pod, message, generation).await;
            }
        }
    }

    /// Binds `pod` to `node` and accounts for it until the reflector shows it bound.
    async fn bind(
        &mut self,
        infos: &mut BTreeMap<String, NodeInfo>,
        pod: &Pod,
        node: &str,
        req: Resources,
    ) {
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        if !bind(self.shared, &ns, &name, node).await {
            return;
        }
        let k = key(pod);
        self.failed.remove(&k);
        if let Some(info) = infos.get_mut(node) {
            info.add(&req);
        }
        self.assumed.insert(k, (node.to_owned(), req));
        let note = format!("Successfully assigned {ns}/{name} to {node}");
        emit(
            &self.shared.client,
            REPORTER,
            &pod.object_ref(&()),
            Kind::Normal,
            "Scheduled",
            "Binding",
            &note,
        )
        .await;
    }

    /// Records that `pod` does not fit; tells (condition + event) unless the same
    /// message was told less than 60 s ago.
    async fn unschedulable(&mut self, pod: &Pod, message: String, generation: u64) {
        let k = key(pod);
        let repeat = self
            .failed
            .get(&k)
            .is_some_and(|f| f.message == message && f.at.elapsed() < Duration::from_secs(60));
        self.failed.insert(
            k,
            Unschedulable {
                message: message.clone(),
                at: Instant::now(),
                generation,
            },
        );
        if repeat {
            return;
        }
        let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
        mark_unschedulable(self.shared, &ns, &name, &message).await;
        emit(
            &self.shared.client,
            REPORTER,
            &pod.object_ref(&()),
            Kind::Warning,
            "FailedScheduling",
            "Scheduling",
            &message,
        )
        .await;
    }
}

/// The node cache may lag behind node updates (a cordon or taint that just happened):
/// re-checks the chosen node live before binding. If it no longer fits, the cached
/// view is refreshed and the pod waits for the next pass.
async fn still_fits(
    shared: &Shared,
    infos: &mut BTreeMap<String, NodeInfo>,
    node: &str,
    pod: &Pod,
    req: &Resources,
) -> bool {
    let Ok(fresh) = Api::<Node>::all(shared.client.clone()).get(node).await else {
        return true;
    };
    let mut info = NodeInfo::from_node(&fresh);
    if let Some(cached) = infos.get(node) {
        info.used = cached.used.clone();
        info.pod_count = cached.pod_count;
    }
    let stale = filter(&info, pod, req).is_some();
    infos.insert(node.to_owned(), info);
    !stale
}

async fn bind(shared: &Shared, ns: &str, name: &str, node: &str) -> bool {
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    match api
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, pod = name, node, "binding failed");
            false
        }
    }
}

async fn mark_unschedulable(shared: &Shared, ns: &str, name: &str, message: &str) {
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
    let status = json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
        "lastProbeTime": null, "lastTransitionTime": now()}]});
    if let Err(e) = merge_status(&api, name, &status).await {
        tracing::debug!(error = %e, pod = name, "could not set PodScheduled=False");
    }
}
