//! The simulated cluster-side controllers: KubeRay operator (RayJob + RayCluster
//! controllers, K8sJobMode), the batch/v1 Job controller, the default scheduler and a
//! kubelet for every node.
//!
//! They are real Kubernetes controllers: they only talk to the API server over REST
//! through a `kube::Client` (watchers, reflectors, `kube::runtime::Controller`), exactly
//! like the real binaries do. The only in-process state shared between them is the
//! simulated Ray *dashboard* ([`dashboard::Dashboard`]): in a real cluster that is the
//! Ray head's HTTP API, which is not a Kubernetes resource.
//!
//! Requeue semantics: reconciles are watch-driven (the primary resource and the
//! children it owns, mapped through `ownerReferences`) plus periodic resyncs: 3 s for
//! RayJobs (`ctrl` "requeue every 3 s"), 300 s for RayClusters
//! (`RAYCLUSTER_DEFAULT_REQUEUE_SECONDS`), and a short resync for Jobs. See
//! `SEMANTICS.md` §3 and §4.
//!
//! Configuration: [`ControllerConfig`] (run mode, failing images, scratch root, pull
//! time, back-off base, reconcile concurrency) and [`TimedModel`] for the timed mode.
//!
//! Simplifications, per controller (each file's header has the details):
//! - operator: K8sJobMode only (HTTP/Interactive/Sidecar modes wait in Initializing);
//!   no `deletionStrategy`, no autoscaler sidecar/RBAC, no injected worker init
//!   container, no batch schedulers; `pip`/`conda` in `runtimeEnvYAML` are ignored;
//! - job controller: one pod at a time, no re-creation back-off delay, no pod failure
//!   policy, no Job `activeDeadlineSeconds`;
//! - scheduler: no preemption, priorities, pod (anti-)affinity, topology spread,
//!   ports or volumes; NotReady nodes are treated as carrying the `not-ready`
//!   NoSchedule taint the node lifecycle controller would add;
//! - kubelet: no probes (containers are Ready once started), no resource
//!   enforcement; only emptyDir volumes exist on the host; non-Ray, non-submitter
//!   containers just stay Running; in process mode the host's tools run the commands
//!   (no image filesystem).

pub mod dashboard;
pub mod driver;
pub mod events;
pub mod fit;
pub mod job;
pub mod kubelet;
pub mod names;
pub mod quantity;
pub mod raycluster;
pub mod rayjob;
pub mod raystart;
pub mod runner;
pub mod scheduler;
pub mod status;
pub mod submitter;
pub mod timed;
pub mod validation;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::core::{ApiResource, GroupVersionKind};
use tokio_util::sync::CancellationToken;

use crate::logs::LogStore;

pub use dashboard::{Dashboard, RayJobInfo};
pub use timed::{RunSecs, TimedModel};

/// How the simulated kubelet runs the submitter pods (and init containers).
#[derive(Clone, Debug, Default)]
pub enum RunMode {
    /// Really run the job: fetch and unpack `working_dir`, run the entrypoint with
    /// `sh -c`, and run init containers' commands on the host.
    #[default]
    Process,
    /// No process: run time and outcome come from a [`TimedModel`] (scale tests).
    Timed(TimedModel),
}

/// Configuration of the simulated controllers.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Run mode of the kubelet.
    pub mode: RunMode,
    /// Images whose pulls fail (`ErrImagePull` then `ImagePullBackOff`). Matched against
    /// the image string as written in the pod spec.
    pub failing_images: BTreeSet<String>,
    /// Root of the kubelet's host scratch space: emptyDir volumes live in
    /// `<root>/pods/<pod uid>/volumes/<volume>`, unpacked jobs in `<root>/jobs/…`.
    ///
    /// A root that does not exist when [`crate::Sim::start`] runs is created by the
    /// simulator and removed again when it is shut down or dropped; an existing
    /// directory belongs to the caller and is left in place. The default is a fresh
    /// `<tmp>/forge-kubesim-<pid>-<n>` per configuration, so simulators running side by
    /// side in one process never share (or remove) each other's scratch space.
    pub scratch_root: PathBuf,
    /// Simulated image pull time (per image, first pull on a node).
    pub image_pull: Duration,
    /// Base of the kubelet back-off (image pulls, crashing init containers); doubles up
    /// to 300 s like the real kubelet (which starts at 10 s).
    pub backoff_base: Duration,
    /// Number of RayJob / RayCluster / Job reconciles run concurrently (0 = unbounded).
    pub concurrency: u16,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            mode: RunMode::Process,
            failing_images: BTreeSet::new(),
            scratch_root: default_scratch_root(),
            image_pull: Duration::from_millis(200),
            backoff_base: Duration::from_secs(10),
            concurrency: 0,
        }
    }
}

/// A scratch root no other default configuration of this process uses:
/// `<tmp>/forge-kubesim-<pid>-<n>`.
fn default_scratch_root() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("forge-kubesim-{}-{n}", std::process::id()))
}

/// Errors of the controllers.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Kubernetes API error.
    #[error("kubernetes api: {0}")]
    Kube(#[from] kube::Error),
    /// An object did not have the shape the controller needs.
    #[error("malformed {kind} {name}: {reason}")]
    Malformed {
        /// Kind of the object.
        kind: &'static str,
        /// namespace/name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// (De)serialising an object failed.
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
    /// A controller task panicked or was aborted.
    #[error("controller task failed: {0}")]
    Task(String),
}

/// State shared by all controllers of one simulated cluster.
pub struct Shared {
    /// API client.
    pub client: kube::Client,
    /// Configuration.
    pub cfg: ControllerConfig,
    /// Pod logs written by the kubelet.
    pub logs: Arc<LogStore>,
    /// The simulated Ray dashboards (job table per cluster).
    pub dashboard: Arc<Dashboard>,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
}

/// `ray.io/v1` RayJob.
pub fn rayjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

/// `ray.io/v1` RayCluster.
pub fn raycluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    )
}

/// Runs the operator, job controller, scheduler and kubelet until `shutdown` is
/// cancelled. Each controller is its own task; the first one to fail ends the run.
pub async fn run(
    client: kube::Client,
    cfg: ControllerConfig,
    logs: Arc<LogStore>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    // A child token: a failing controller stops its siblings, not the API server.
    let internal = shutdown.child_token();
    let shared = Arc::new(Shared {
        client,
        cfg,
        logs,
        dashboard: Arc::new(Dashboard::default()),
        shutdown: internal.clone(),
    });
    let mut set = tokio::task::JoinSet::new();
    set.spawn(rayjob::run(shared.clone()));
    set.spawn(raycluster::run(shared.clone()));
    set.spawn(job::run(shared.clone()));
    set.spawn(scheduler::run(shared.clone()));
    set.spawn(kubelet::run(shared.clone()));
    let mut result = Ok(());
    while let Some(joined) = set.join_next().await {
        let r = match joined {
            Ok(r) => r,
            Err(e) => Err(ControllerError::Task(e.to_string())),
        };
        if let Err(e) = r {
            tracing::error!(error = %e, "simulated controller stopped");
            if result.is_ok() {
                result = Err(e);
            }
            internal.cancel();
        }
    }
    result
}
