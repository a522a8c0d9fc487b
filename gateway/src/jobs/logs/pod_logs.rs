//! Every Ray pod's log, not only the driver's: which log a request means
//! ([`LogTarget`]: the driver or head as before, or one pod of the job by name), the
//! list of a job's pod logs (`GET /v1/jobs/{id}/logs/pods`: archived once the job
//! ended, its live pods before) and where an archived one is stored.
//!
//! Archival ([`super::cleanup`]) writes each container's log of each pod of the job
//! (head, workers, submitters) under `logs/<job>/pods/<pod>/<container>.log`, then the
//! list `logs/<job>/pods.json` ([`PodLogIndex`]) naming which pod was the driver and
//! which the head. Jobs archived before kept only `logs/<job>/driver.log` and
//! `head.log`; those keys are still read first.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};

use super::JobLogs;
use crate::cluster::LogSource;
use crate::cluster::labels::{JOB_NAME, RAY_NODE_TYPE, SUBMITTER_CONTAINER};
use crate::jobs::error::JobError;
use crate::jobs::job_fleet::cluster_of;
use crate::objects::{
    ObjectStoreError, attempt_log_index_key, log_index_key, log_key, pod_log_key,
};
use crate::store::JobRecord;

/// Which log of a job a read means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// The driver's or the head's (the default, `?name=`).
    Source(LogSource),
    /// One pod of the job (`?pod=`), its given container or its main one.
    Pod {
        pod: String,
        container: Option<String>,
    },
}

impl LogTarget {
    /// How errors name it.
    pub fn describe(&self) -> String {
        match self {
            LogTarget::Source(s) => s.as_str().to_string(),
            LogTarget::Pod { pod, .. } => format!("pod {pod}"),
        }
    }
}

/// What a pod is to its Ray job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PodRole {
    Head,
    Worker,
    Submitter,
}

impl PodRole {
    /// The role of a job's pod, from KubeRay's labels.
    pub fn of(pod: &Pod) -> PodRole {
        let labels = pod.labels();
        if labels.contains_key(JOB_NAME) {
            PodRole::Submitter
        } else if labels.get(RAY_NODE_TYPE).map(String::as_str) == Some("head") {
            PodRole::Head
        } else {
            PodRole::Worker
        }
    }
}

/// One container's log of one of a job's pods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLog {
    pub pod: String,
    pub role: PodRole,
    pub container: String,
    /// Bytes of the archived log (its marker line included); `null` while live.
    pub bytes: Option<u64>,
    /// Whether the log's start was cut to keep it within the per-pod bound.
    pub truncated: bool,
    /// Bytes cut from the log's start (0 when whole).
    #[serde(default)]
    pub cut_bytes: u64,
    /// Whether it is archived (false: live, or the container never started).
    pub archived: bool,
}

/// `logs/<job>/pods.json`: the archived pod logs, which pods were the driver and the
/// head, and the Kubernetes events of the job's objects when it was archived (they
/// go with the objects; a post-mortem reads them here).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodLogIndex {
    pub pods: Vec<PodLog>,
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub head: Option<String>,
    #[serde(default)]
    pub events: Vec<crate::cluster::events::ObjectEvent>,
}

/// The container whose log a pod's log means: the given one, else the submitter's
/// (`ray-job-submitter`) or the pod's first container (the Ray container).
pub fn main_container(pod: &Pod) -> Option<String> {
    let names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
        .collect();
    names
        .iter()
        .find(|n| **n == SUBMITTER_CONTAINER)
        .or(names.first())
        .map(|n| (*n).to_string())
}

/// Most bytes of the list document (a job's pods are a handful).
const MAX_INDEX_BYTES: u64 = 4 << 20;

impl JobLogs {
    /// The per-pod bound of archived logs (`FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD`).
    pub(crate) fn log_bound(&self) -> u64 {
        self.core.config.gateway.log_archive_max_bytes_per_pod
    }

    /// The list of a job's archived pod logs, if it was archived.
    pub(crate) async fn log_index(&self, job: &JobRecord) -> Result<Option<PodLogIndex>, JobError> {
        let key = match self.attempt {
            Some(n) => attempt_log_index_key(&job.id, n)?,
            None => log_index_key(&job.id)?,
        };
        match self.objects.object_len(&key).await? {
            None => return Ok(None),
            Some(n) if n > MAX_INDEX_BYTES => {
                return Err(JobError::Invariant(format!("{key} is {n} bytes")));
            }
            Some(_) => {}
        }
        let bytes = match self.objects.get_object(&key).await {
            Ok(b) => b,
            Err(ObjectStoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| JobError::io(key, e))
    }

    /// A job's pod logs: the archived list once archived, else its live pods'.
    pub async fn pod_logs(&self, job: &JobRecord) -> Result<Vec<PodLog>, JobError> {
        if let Some(index) = self.log_index(job).await? {
            return Ok(index.pods);
        }
        if self.attempt.is_some() {
            return Ok(Vec::new());
        }
        let Some(rayjob) = job.rayjob_name.as_deref() else {
            return Ok(Vec::new());
        };
        let mut pods = cluster_of(&self.fleets, job)?
            .pods
            .of_job(&job.id, rayjob)
            .await?;
        pods.sort_by_key(|p| (role_rank(PodRole::of(p)), p.name_any()));
        Ok(pods
            .iter()
            .flat_map(|p| {
                let role = PodRole::of(p);
                let name = p.name_any();
                containers_of(p).into_iter().map(move |container| PodLog {
                    pod: name.clone(),
                    role,
                    container,
                    bytes: None,
                    truncated: false,
                    cut_bytes: 0,
                    archived: false,
                })
            })
            .collect())
    }

    /// Where `target`'s archived log is stored, if it is.
    pub(crate) async fn archived_key(
        &self,
        job: &JobRecord,
        target: &LogTarget,
    ) -> Result<Option<String>, JobError> {
        if let LogTarget::Source(source) = target
            && self.attempt.is_none()
        {
            let legacy = log_key(&job.id, source.as_str())?;
            if self.objects.object_len(&legacy).await?.is_some() {
                return Ok(Some(legacy));
            }
        }
        let Some(index) = self.log_index(job).await? else {
            return Ok(None);
        };
        let (pod, container) = match target {
            LogTarget::Source(LogSource::Driver) => (index.driver.clone(), None),
            LogTarget::Source(LogSource::Head) => (index.head.clone(), None),
            LogTarget::Pod { pod, container } => (Some(pod.clone()), container.clone()),
        };
        let Some(pod) = pod else { return Ok(None) };
        let entry = index.pods.iter().find(|e| {
            e.archived
                && e.pod == pod
                && container.as_ref().is_none_or(|c| *c == e.container)
                && (container.is_some()
                    || e.role != PodRole::Submitter
                    || e.container == SUBMITTER_CONTAINER)
        });
        match entry {
            Some(e) => Ok(Some(pod_log_key(&job.id, &e.pod, &e.container)?)),
            None => Ok(None),
        }
    }

    /// The live pod and container holding `target`'s log, if there is one.
    pub(crate) async fn live_pod(
        &self,
        job: &JobRecord,
        target: &LogTarget,
    ) -> Option<(String, Option<String>)> {
        if self.attempt.is_some() {
            return None; // an earlier attempt's pods are gone
        }
        let rayjob = job.rayjob_name.as_deref()?;
        let pods = &cluster_of(&self.fleets, job).ok()?.pods;
        match target {
            LogTarget::Source(source) => {
                let (pod, container) = pods.log_pod(&job.id, rayjob, *source).await.ok()??;
                Some((pod.name_any(), container.map(str::to_string)))
            }
            LogTarget::Pod { pod, container } => {
                // Only a pod of this job: the name comes from the caller.
                let found = pods
                    .of_job(&job.id, rayjob)
                    .await
                    .ok()?
                    .into_iter()
                    .find(|p| p.name_any() == *pod)?;
                let container = container.clone().or_else(|| main_container(&found));
                Some((found.name_any(), container))
            }
        }
    }
}

/// Head first, then workers, then submitters.
pub(crate) fn role_rank(role: PodRole) -> u8 {
    match role {
        PodRole::Head => 0,
        PodRole::Worker => 1,
        PodRole::Submitter => 2,
    }
}

/// A pod's app containers, by name.
pub(crate) fn containers_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(labels: serde_json::Value, containers: &[&str]) -> Pod {
        let cs: Vec<_> = containers.iter().map(|c| json!({"name": c})).collect();
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels},
            "spec": {"containers": cs}}))
        .expect("pod")
    }

    #[test]
    fn roles_and_main_containers_come_from_kuberay_labels() {
        let head = pod(
            json!({"ray.io/node-type": "head"}),
            &["ray-head", "sidecar"],
        );
        let worker = pod(json!({"ray.io/node-type": "worker"}), &["ray-worker"]);
        let submitter = pod(
            json!({"batch.kubernetes.io/job-name": "rj"}),
            &["istio-proxy", "ray-job-submitter"],
        );
        assert_eq!(PodRole::of(&head), PodRole::Head);
        assert_eq!(PodRole::of(&worker), PodRole::Worker);
        assert_eq!(PodRole::of(&submitter), PodRole::Submitter);
        assert_eq!(main_container(&head).as_deref(), Some("ray-head"));
        assert_eq!(
            main_container(&submitter).as_deref(),
            Some("ray-job-submitter")
        );
        assert_eq!(containers_of(&head), ["ray-head", "sidecar"]);
        assert_eq!(
            serde_json::to_value(PodRole::Submitter).expect("json"),
            "submitter"
        );
    }
}
