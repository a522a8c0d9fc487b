//! The Ray dashboards' Jobs API as the operator reaches it (`GET /api/jobs/<id>`,
//! stop), and the simulated one (submit too).
//!
//! With real Ray ([`ControllerConfig::ray`](super::ControllerConfig)) each head pod's
//! kubelet registers where its dashboard listens, and the operator asks it over HTTP
//! ([`super::ray::jobs_api`]); a cluster whose head is not registered (starting,
//! restarting, gone) does not answer, as an unreachable head would not.
//!
//! Without Ray, the job tables are simulated here, in-process: the kubelet running the
//! submitter pod submits and updates jobs (what `ray job submit` does), and the RayJob
//! controller reads them. Keyed by (namespace, cluster, submission id); deleting a
//! RayCluster drops its jobs like deleting the head would.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::ray::jobs_api::{self, JobDetails, JobsApiError};

/// What `GET /api/jobs/<id>` returns (the fields the operator copies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RayJobInfo {
    /// PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED.
    pub status: String,
    /// Human-readable message.
    pub message: String,
    /// Start, milliseconds since the epoch (0 = not started).
    pub start_ms: i64,
    /// End, milliseconds since the epoch (0 = not ended).
    pub end_ms: i64,
}

impl From<JobDetails> for RayJobInfo {
    fn from(d: JobDetails) -> Self {
        Self {
            status: d.status,
            message: d.message.unwrap_or_default(),
            start_ms: d.start_time.unwrap_or(0),
            end_ms: d.end_time.unwrap_or(0),
        }
    }
}

#[derive(Debug)]
struct Entry {
    info: RayJobInfo,
    /// Kills the driver at once (its cluster went away).
    stop: CancellationToken,
    /// Asks a driver that stops gracefully (SIGTERM, then SIGKILL after its grace)
    /// to stop; it then records STOPPED itself once its process is gone, as Ray's
    /// job supervisor does.
    terminate: Option<CancellationToken>,
}

type Key = (String, String, String);

/// Job tables of all simulated Ray clusters, or where the real heads serve theirs.
#[derive(Debug, Default)]
pub struct Dashboard {
    jobs: Mutex<HashMap<Key, Entry>>,
    /// Real Ray: `(namespace, cluster)` to its head's dashboard address.
    heads: Mutex<HashMap<(String, String), SocketAddr>>,
    /// Whether the heads are real (their Jobs API is asked, never the table).
    real: bool,
}

/// Why a Jobs API call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// The cluster's head serves no dashboard now.
    #[error("the Ray head of {0} is not serving its dashboard")]
    NoHead(String),
    /// The head did not answer well.
    #[error(transparent)]
    Api(#[from] JobsApiError),
}

/// Terminal Ray job states (`IsJobTerminal`).
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "STOPPED" | "SUCCEEDED" | "FAILED")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn key(ns: &str, cluster: &str, id: &str) -> Key {
    (ns.to_owned(), cluster.to_owned(), id.to_owned())
}

impl Dashboard {
    /// The dashboards of real Ray heads (`real`), or simulated ones.
    pub fn new(real: bool) -> Self {
        Self {
            real,
            ..Self::default()
        }
    }

    /// The dashboards `cfg`'s kubelet gives its heads: real Ray's in process mode with
    /// a Ray installation, simulated ones otherwise.
    pub fn for_config(cfg: &super::ControllerConfig) -> Self {
        Self::new(matches!(cfg.mode, super::config::RunMode::Process) && cfg.ray.is_some())
    }

    /// Whether the heads are real (their dashboards answer for themselves).
    pub fn is_real(&self) -> bool {
        self.real
    }

    /// A real head of `ns/cluster` serves its dashboard at `addr`.
    pub fn register_head(&self, ns: &str, cluster: &str, addr: SocketAddr) {
        let mut heads = self.heads.lock().expect("dashboard lock poisoned");
        heads.insert((ns.to_owned(), cluster.to_owned()), addr);
    }

    /// The head that served at `addr` stopped.
    pub fn unregister_head(&self, ns: &str, cluster: &str, addr: SocketAddr) {
        let mut heads = self.heads.lock().expect("dashboard lock poisoned");
        let key = (ns.to_owned(), cluster.to_owned());
        if heads.get(&key) == Some(&addr) {
            heads.remove(&key);
        }
    }

    fn head(&self, ns: &str, cluster: &str) -> Result<SocketAddr, DashboardError> {
        let heads = self.heads.lock().expect("dashboard lock poisoned");
        heads
            .get(&(ns.to_owned(), cluster.to_owned()))
            .copied()
            .ok_or_else(|| DashboardError::NoHead(format!("{ns}/{cluster}")))
    }

    /// The operator's `GET /api/jobs/<id>` (`Ok(None)`: the job does not exist).
    pub async fn job_info(
        &self,
        ns: &str,
        cluster: &str,
        id: &str,
    ) -> Result<Option<RayJobInfo>, DashboardError> {
        if !self.real {
            return Ok(self.get(ns, cluster, id));
        }
        let addr = self.head(ns, cluster)?;
        Ok(jobs_api::job_info(addr, id).await?.map(RayJobInfo::from))
    }

    /// The operator's `POST /api/jobs/<id>/stop` (errors ignored, as KubeRay's
    /// finalizer does).
    pub async fn stop_job(&self, ns: &str, cluster: &str, id: &str) {
        if !self.real {
            self.stop(ns, cluster, id);
            return;
        }
        if let Ok(addr) = self.head(ns, cluster)
            && let Err(e) = jobs_api::stop(addr, id).await
        {
            tracing::debug!(error = %e, "stopping the Ray job failed");
        }
    }

    /// `ray job submit`: registers a PENDING job. Returns its stop token, or `None` if
    /// the submission id is already in use ("Please use a different submission_id").
    pub fn submit(&self, ns: &str, cluster: &str, id: &str) -> Option<CancellationToken> {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        if jobs.contains_key(&key(ns, cluster, id)) {
            return None;
        }
        let stop = CancellationToken::new();
        jobs.insert(
            key(ns, cluster, id),
            Entry {
                info: RayJobInfo {
                    status: "PENDING".into(),
                    message: "Job has not started yet. It may be waiting for the runtime environment to be set up."
                        .into(),
                    start_ms: 0,
                    end_ms: 0,
                },
                stop: stop.clone(),
                terminate: None,
            },
        );
        Some(stop)
    }

    /// Moves a job to RUNNING.
    pub fn set_running(&self, ns: &str, cluster: &str, id: &str) {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        if let Some(e) = jobs.get_mut(&key(ns, cluster, id))
            && !is_terminal(&e.info.status)
        {
            e.info.status = "RUNNING".into();
            e.info.message = "Job is currently running.".into();
            e.info.start_ms = now_ms();
        }
    }

    /// Records a terminal state (ignored if the job is already terminal, e.g. STOPPED).
    pub fn finish(&self, ns: &str, cluster: &str, id: &str, status: &str, message: &str) {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        if let Some(e) = jobs.get_mut(&key(ns, cluster, id))
            && !is_terminal(&e.info.status)
        {
            e.info.status = status.into();
            e.info.message = message.into();
            if e.info.start_ms == 0 {
                e.info.start_ms = now_ms();
            }
            e.info.end_ms = now_ms();
        }
    }

    /// `GET /api/jobs/<id>`; `None` is the 404.
    pub fn get(&self, ns: &str, cluster: &str, id: &str) -> Option<RayJobInfo> {
        let jobs = self.jobs.lock().expect("dashboard lock poisoned");
        jobs.get(&key(ns, cluster, id)).map(|e| e.info.clone())
    }

    /// The stop token of a job (the running driver watches it).
    pub fn stop_token(&self, ns: &str, cluster: &str, id: &str) -> Option<CancellationToken> {
        let jobs = self.jobs.lock().expect("dashboard lock poisoned");
        jobs.get(&key(ns, cluster, id)).map(|e| e.stop.clone())
    }

    /// The token a driver that stops gracefully watches; from then on a stop asks it
    /// (and it records STOPPED) instead of killing it.
    pub fn graceful_stop(&self, ns: &str, cluster: &str, id: &str) -> Option<CancellationToken> {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        let e = jobs.get_mut(&key(ns, cluster, id))?;
        Some(
            e.terminate
                .get_or_insert_with(CancellationToken::new)
                .clone(),
        )
    }

    /// `POST /api/jobs/<id>/stop`: a graceful driver is asked to stop (it records
    /// STOPPED when its process is gone); any other is killed and STOPPED now.
    pub fn stop(&self, ns: &str, cluster: &str, id: &str) -> bool {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        match jobs.get_mut(&key(ns, cluster, id)) {
            Some(e) if !is_terminal(&e.info.status) && e.terminate.is_some() => {
                if let Some(t) = &e.terminate {
                    t.cancel();
                }
                true
            }
            Some(e) if !is_terminal(&e.info.status) => {
                e.info.status = "STOPPED".into();
                e.info.message = "Job was intentionally stopped.".into();
                e.info.end_ms = now_ms();
                e.stop.cancel();
                true
            }
            _ => false,
        }
    }

    /// The head of `cluster` is gone: its jobs disappear (running drivers are killed).
    pub fn drop_cluster(&self, ns: &str, cluster: &str) {
        let mut jobs = self.jobs.lock().expect("dashboard lock poisoned");
        jobs.retain(|(n, c, _), e| {
            let keep = !(n == ns && c == cluster);
            if !keep {
                e.stop.cancel();
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graceful_driver_records_its_own_stop() {
        let d = Dashboard::new(false);
        let kill = d.submit("ns", "c", "j").expect("submit");
        let terminate = d.graceful_stop("ns", "c", "j").expect("entry");
        d.set_running("ns", "c", "j");
        assert!(d.stop("ns", "c", "j"));
        assert!(terminate.is_cancelled(), "the driver is asked to stop");
        assert!(!kill.is_cancelled(), "not killed");
        assert_eq!(
            d.get("ns", "c", "j").expect("job").status,
            "RUNNING",
            "STOPPED only once its process is gone, as Ray's supervisor records it"
        );
        d.finish("ns", "c", "j", "STOPPED", "Job was intentionally stopped.");
        assert_eq!(d.get("ns", "c", "j").expect("job").status, "STOPPED");
    }

    #[test]
    fn lifecycle_and_stop() {
        let d = Dashboard::default();
        let stop = d.submit("ns", "c", "j").expect("first submit");
        assert!(
            d.submit("ns", "c", "j").is_none(),
            "submission id reuse is refused"
        );
        assert_eq!(
            d.get("ns", "c", "j").map(|i| i.status),
            Some("PENDING".into())
        );
        d.set_running("ns", "c", "j");
        assert!(d.stop("ns", "c", "j"));
        assert!(stop.is_cancelled());
        d.finish("ns", "c", "j", "FAILED", "killed");
        let info = d.get("ns", "c", "j").expect("exists");
        assert_eq!(info.status, "STOPPED", "terminal state is sticky");
        assert!(info.end_ms >= info.start_ms);
        d.drop_cluster("ns", "c");
        assert!(d.get("ns", "c", "j").is_none());
    }
}
