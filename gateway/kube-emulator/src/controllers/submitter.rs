//! The KubeRay submitter container (`ray-job-submitter`) as the kubelet runs it:
//! `ray job submit --no-wait` to the simulated dashboard of the cluster its
//! `RAY_DASHBOARD_ADDRESS` names (starting the job's [`Driver`]), then
//! `ray job logs --follow` until the job is terminal, with the Ray CLI's log lines.
//! In the timed mode a submission can fail by the model's draw.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::config::RunMode;
use super::dashboard::is_terminal;
use super::driver::Driver;
use super::names::{ORIGINATED_FROM_CR_NAME, SUBMITTER_CONTAINER, cluster_from_dashboard};
use super::shared::Shared;

/// The `ray-job-submitter` container of one submitter pod.
pub struct Submitter {
    shared: Arc<Shared>,
    /// Namespace and name of the submitter pod.
    ns: String,
    pod: String,
    /// `RAY_JOB_SUBMISSION_ID`.
    id: String,
    /// `RAY_DASHBOARD_ADDRESS`.
    addr: String,
    /// The RayJob the pod belongs to.
    rayjob: String,
    /// Cancelled when the pod is deleted.
    cancel: CancellationToken,
}

impl Submitter {
    /// The submitter of `pod` (its first container's env names the job and cluster).
    pub fn new(shared: Arc<Shared>, pod: &Pod, cancel: CancellationToken) -> Self {
        let env = |key: &str| -> String {
            pod.spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.env.as_ref())
                .and_then(|e| e.iter().find(|e| e.name == key))
                .and_then(|e| e.value.clone())
                .unwrap_or_default()
        };
        Self {
            ns: pod.namespace().unwrap_or_default(),
            pod: pod.name_any(),
            id: env("RAY_JOB_SUBMISSION_ID"),
            addr: env("RAY_DASHBOARD_ADDRESS"),
            rayjob: pod
                .labels()
                .get(ORIGINATED_FROM_CR_NAME)
                .cloned()
                .unwrap_or_default(),
            shared,
            cancel,
        }
    }

    fn log(&self, line: &str) {
        let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
        let text = format!("{ts}\t{line}\n");
        self.shared
            .logs
            .append(&self.ns, &self.pod, SUBMITTER_CONTAINER, text.as_bytes());
    }

    /// Returns the container's exit code (`None`: the pod was deleted).
    pub async fn run(&self) -> Option<i32> {
        let shared = &self.shared;
        let (ns, id) = (&self.ns, &self.id);
        let cluster = cluster_from_dashboard(&self.addr)
            .unwrap_or_default()
            .to_owned();
        self.log(&format!(
            "INFO cli.py:41 -- Job submission server address: http://{}",
            self.addr
        ));
        let draw = match &shared.cfg.mode {
            RunMode::Timed(m) => Some(m.draw()),
            RunMode::Process => None,
        };
        if draw.is_none() {
            self.log(
                "WARN forge-kubesim -- no Ray installation is configured, so this cluster's Ray \
                 is simulated: the entrypoint runs as a plain local process",
            );
        }
        if draw.as_ref().is_some_and(|d| d.submit_fails) {
            self.log("ERROR cli.py:... -- Failed to connect to Ray dashboard (simulated submission failure)");
            return Some(1);
        }
        match shared.dashboard.submit(ns, &cluster, id) {
            Some(stop) => {
                let rule = "-------------------------------------------------------";
                self.log(&format!("SUCC cli.py:65 -- {rule}"));
                self.log(&format!(
                    "SUCC cli.py:66 -- Job '{id}' submitted successfully"
                ));
                self.log(&format!("SUCC cli.py:67 -- {rule}"));
                let driver = Driver {
                    shared: shared.clone(),
                    ns: ns.clone(),
                    cluster: cluster.clone(),
                    id: id.clone(),
                    pod: self.pod.clone(),
                    rayjob: self.rayjob.clone(),
                    stop,
                };
                tokio::spawn(driver.run(draw));
            }
            None => self.log(&format!(
                "INFO cli.py:... -- Job '{id}' already exists; following its logs"
            )),
        }
        self.follow(&cluster).await
    }

    /// `ray job logs --follow`: ends when the job is terminal (or the cluster is gone).
    async fn follow(&self, cluster: &str) -> Option<i32> {
        let id = &self.id;
        loop {
            match self.shared.dashboard.get(&self.ns, cluster, id) {
                Some(i) if is_terminal(&i.status) => return Some(0),
                Some(_) => {}
                None => {
                    self.log(&format!(
                        "ERROR cli.py:... -- Job '{id}' does not exist on the cluster"
                    ));
                    return Some(1);
                }
            }
            tokio::select! {
                () = self.cancel.cancelled() => return None,
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
}
