//! The simulated cluster-side controllers: KubeRay operator (RayJob + RayCluster
//! controllers, K8sJobMode), the batch/v1 Job controller, the default scheduler and a
//! kubelet for every node.
//!
//! They are real Kubernetes controllers: they only talk to the API server over REST
//! through a `kube::Client` (watchers, reflectors, `kube::runtime::Controller`), exactly
//! like the real binaries do. The only in-process state shared between them is the
//! simulated Ray *dashboard* ([`dashboard::Dashboard`]): in a real cluster that is the
//! Ray head's HTTP API, which is not a Kubernetes resource; and the volume
//! attachments ([`attach::Attachments`]), the attach/detach controller's actual state
//! of the world.
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
//!   enforcement (a pod of the inference image is Ready once its stand-in server
//!   listens); emptyDir, ConfigMap, Secret and PVC volumes exist on the host (other
//!   kinds are accepted, not materialised); a container of the inference image runs
//!   the [`inference`](crate::inference) stand-in in process mode; other non-Ray,
//!   non-submitter containers just stay Running; in process mode the host's tools run the commands (no image
//!   filesystem);
//! - provisioner: one StorageClass (`standard`, immediate binding), no
//!   PersistentVolume objects.
//!
//! Files: one per controller (`rayjob/`, `raycluster/`, `job`, `scheduler`,
//! `kubelet/`, `provisioner`), what the kubelet runs (`submitter`, `driver`, `runner`,
//! `timed`) and with what (`container_env`, `hostpaths`), what they share (`config`,
//! `error`, `shared`, `status`, `events`, `names`, `dashboard`, `attach`), and the
//! operator's and scheduler's pure rules (`validation`, `raystart`, `fit`,
//! `quantity`).

pub mod attach;
pub mod config;
pub mod container_env;
pub mod dashboard;
pub mod driver;
pub mod error;
pub mod events;
pub mod fit;
pub mod hostpaths;
pub mod job;
pub mod kubelet;
pub mod memory_limit;
pub mod names;
pub mod pip_env;
pub mod provisioner;
pub mod quantity;
pub mod ray;
pub mod raycluster;
pub mod rayjob;
pub mod raystart;
pub mod runner;
pub mod scheduler;
pub mod shared;
pub mod status;
pub mod submitter;
pub mod timed;
pub mod validation;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::endpoints::PodEndpoints;
use crate::logs::LogStore;

pub use config::{ControllerConfig, RunMode};
pub use dashboard::{Dashboard, RayJobInfo};
pub use error::ControllerError;
pub use shared::{Shared, raycluster_resource, rayjob_resource};
pub use timed::{RunSecs, TimedModel};

/// Runs the operator, job controller, scheduler and kubelet until `shutdown` is
/// cancelled. Each controller is its own task; the first one to fail ends the run.
pub async fn run(
    client: kube::Client,
    cfg: ControllerConfig,
    logs: Arc<LogStore>,
    endpoints: Arc<PodEndpoints>,
    dashboard: Arc<Dashboard>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    // A child token: a failing controller stops its siblings, not the API server.
    let internal = shutdown.child_token();
    match (&cfg.mode, &cfg.ray) {
        (RunMode::Process, Some(ray)) => {
            tracing::info!(ray = %ray.bin.display(), "Ray nodes run the installed Ray");
        }
        (RunMode::Process, None) => tracing::warn!(
            "no Ray installation given: Ray is simulated here, and job entrypoints run as \
             plain local processes (`import ray` works only if the image path has Ray)"
        ),
        (RunMode::Timed(_), _) => {}
    }
    let shared = Arc::new(Shared {
        client,
        cfg,
        logs,
        endpoints,
        dashboard,
        attachments: Arc::default(),
        ooms: memory_limit::OomKills::default(),
        shutdown: internal.clone(),
    });
    let mut set = tokio::task::JoinSet::new();
    set.spawn(rayjob::run(shared.clone()));
    set.spawn(raycluster::run(shared.clone()));
    set.spawn(job::run(shared.clone()));
    set.spawn(scheduler::run(shared.clone()));
    set.spawn(kubelet::run(shared.clone()));
    set.spawn(provisioner::run(shared.clone()));
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
