//! The simulated kubelet: one watch over all pods bound to a node, one worker task per
//! pod (like the kubelet's pod workers). A worker pulls images (per-node image cache;
//! images in `ControllerConfig::failing_images` fail with `ErrImagePull` then
//! `ImagePullBackOff`), runs init containers in order (really, in process mode; a
//! failure gives `Init:Error` / `Init:CrashLoopBackOff` with back-off, or a Failed pod
//! under `restartPolicy: Never`), starts the containers, and maintains phase,
//! conditions (PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady,
//! Ready) and container statuses through the `pods/status` subresource. Events are
//! core/v1 with `source.component=kubelet`.
//!
//! What the containers "do": with real Ray (`real_ray`), Ray node containers run
//! `ray start` and a submitter its `ray job submit` script; without it, a KubeRay
//! submitter pod (container `ray-job-submitter`) submits its job to the simulated
//! dashboard and follows it
//! ([`Submitter`](crate::controllers::submitter::Submitter)), and Ray node containers
//! run until the pod is deleted (the head writes `ray start --head` lines); a container
//! of the inference image runs the inference stand-in (`inference`); any other
//! container just keeps Running.
//!
//! Files: `worker` (one pod's worker and its tools), `lifecycle` (the steps of a
//! pod's life), `inference` (the stand-in's container), `volumes` (attach and mount), `pull` (image pulls), `pod_status` (the
//! status it writes), `ray_node` (simulated Ray's start-up lines), `real_ray` (Ray
//! nodes and submitters on the installed Ray).

mod inference;
mod lifecycle;
mod pod_status;
mod pull;
mod ray_node;
mod real_ray;
mod volumes;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

pub use pod_status::normalize_image;
use worker::{ImageCache, Worker};

use super::error::ControllerError;
use super::shared::Shared;

/// Runs the kubelet until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let mut workers: HashMap<String, CancellationToken> = HashMap::new();
    let images: ImageCache = Arc::default();
    let api: Api<Pod> = Api::all(shared.client.clone());
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let ev = tokio::select! {
            () = shared.shutdown.cancelled() => break,
            ev = stream.next() => match ev { Some(ev) => ev, None => break },
        };
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(error = %e, "kubelet watch error");
                continue;
            }
        };
        match ev {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                admit(&shared, &mut workers, &images, pod);
            }
            watcher::Event::Delete(pod) => {
                let uid = pod.uid().unwrap_or_default();
                if let Some(t) = workers.remove(&uid) {
                    t.cancel();
                }
                shared.attachments.detach_pod(&uid);
                let (ns, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                shared.endpoints.remove_pod(&ns, &name);
                shared.logs.remove_pod(&ns, &name);
                let dir = shared.cfg.scratch_root.join("pods").join(&uid);
                if !uid.is_empty() && dir.exists() {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
    for t in workers.values() {
        t.cancel();
    }
    Ok(())
}

/// Starts a worker for a bound pod that has none and is not finished; cancels the
/// worker of a pod being deleted.
fn admit(
    shared: &Arc<Shared>,
    workers: &mut HashMap<String, CancellationToken>,
    images: &ImageCache,
    pod: Pod,
) {
    let uid = pod.uid().unwrap_or_default();
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if node.is_empty() {
        return;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        if let Some(t) = workers.get(&uid) {
            t.cancel();
        }
        return;
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending");
    if workers.contains_key(&uid) || matches!(phase, "Succeeded" | "Failed") {
        return;
    }
    let token = shared.shutdown.child_token();
    workers.insert(uid, token.clone());
    let w = Worker {
        shared: shared.clone(),
        pod,
        node,
        images: images.clone(),
        cancel: token,
    };
    tokio::spawn(w.run());
}
