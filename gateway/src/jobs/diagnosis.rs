//! Pending diagnosis: why a dispatched job is not running yet, from what Kubernetes
//! says about the job's objects — the RayJob, its RayCluster, the submitter Job and
//! every pod of the job ([`crate::cluster::Pods::of_job`]) — and their events
//! ([`crate::cluster::events`]).
//!
//! The structured pending reason prefers the most specific signal: a container killed
//! for exceeding its memory limit (`OOMKilled`, with the limit — also when it is now in
//! `CrashLoopBackOff` because of it), a container waiting on an image pull
//! (`ErrImagePull`, `ImagePullBackOff`) on any pod, a crash-looping container, a volume
//! that cannot attach (`FailedAttachVolume`, e.g. a ReadWriteOnce claim's
//! `Multi-Attach` error) or mount (`FailedMount`), then the scheduler's
//! `FailedScheduling` message (`0/4 nodes are available: …`).

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use kube::ResourceExt;
use serde::Serialize;

use super::error::JobError;
use super::service::Jobs;
use crate::cluster::events::{ObjectEvent, events_of};
use crate::store::JobRecord;

/// Why a job is not running yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReason {
    /// `ErrImagePull`, `ImagePullBackOff`, `CrashLoopBackOff`, `FailedMount`,
    /// `FailedScheduling`, … (Kubernetes' own reason names).
    pub code: String,
    pub message: String,
    /// The object it is about (`Pod/<name>`).
    pub object: String,
    /// How many times it was reported.
    pub count: i32,
}

/// The job's events and pending reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diagnosis {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingReason>,
    pub events: Vec<ObjectEvent>,
}

/// Waiting reasons that mean "this will not start by itself".
const STUCK_WAITING: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
];

impl Jobs {
    /// Gathers events and pod states of a dispatched job.
    pub async fn diagnose(&self, job: &JobRecord) -> Result<Diagnosis, JobError> {
        let Some(rayjob) = job.rayjob_name.clone() else {
            return Ok(Diagnosis {
                pending: None,
                events: Vec::new(),
            });
        };
        let pods = self.cluster.pods.of_job(&job.id, &rayjob).await?;
        let cluster = self
            .cluster
            .rayjobs
            .get(&rayjob)
            .await?
            .and_then(|r| r.cluster_name().map(str::to_string));
        let mut objects: Vec<(String, String)> = vec![
            ("RayJob".into(), rayjob.clone()),
            ("Job".into(), rayjob.clone()),
        ];
        if let Some(c) = cluster {
            objects.push(("RayCluster".into(), c));
        }
        objects.extend(pods.iter().map(|p| ("Pod".to_string(), p.name_any())));
        let events = events_of(&self.cluster.client, &self.cluster.namespace, &objects).await?;
        let pending = pending_reason(pods.iter(), &events);
        Ok(Diagnosis { pending, events })
    }
}

/// The most specific reason a job's pods are not running (pure; unit-tested).
pub fn pending_reason<'a>(
    pods: impl Iterator<Item = &'a Pod>,
    events: &[ObjectEvent],
) -> Option<PendingReason> {
    let count_of = |object: &str, needle: &str| {
        events
            .iter()
            .filter(|e| e.object == object && (e.reason == needle || e.message.contains(needle)))
            .map(|e| e.count)
            .sum::<i32>()
            .max(1)
    };
    let mut unschedulable = None;
    for pod in pods {
        let name = pod.name_any();
        let Some(status) = &pod.status else { continue };
        let containers = status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten());
        for c in containers {
            if let Some(message) = oom_killed(pod, c) {
                return Some(PendingReason {
                    code: "OOMKilled".into(),
                    message,
                    object: format!("Pod/{name}"),
                    count: c.restart_count.max(1),
                });
            }
            if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
                && let Some(reason) = w.reason.as_deref()
                && STUCK_WAITING.contains(&reason)
            {
                return Some(PendingReason {
                    code: reason.to_string(),
                    message: format!(
                        "container {}: {}",
                        c.name,
                        w.message.clone().unwrap_or_else(|| reason.to_string())
                    ),
                    object: format!("Pod/{name}"),
                    count: count_of(&name, reason),
                });
            }
        }
        let unscheduled = status.conditions.iter().flatten().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        });
        if unscheduled && unschedulable.is_none() {
            unschedulable = Some(name);
        }
    }
    let volume = |reason: &str| {
        events
            .iter()
            .find(|e| e.type_ == "Warning" && e.reason == reason)
    };
    if let Some(e) = volume("FailedAttachVolume").or_else(|| volume("FailedMount")) {
        return Some(PendingReason {
            code: e.reason.clone(),
            message: e.message.clone(),
            object: format!("{}/{}", e.kind, e.object),
            count: e.count,
        });
    }
    let scheduling = events
        .iter()
        .find(|e| {
            e.reason == "FailedScheduling" && unschedulable.as_deref().is_none_or(|p| p == e.object)
        })
        .or_else(|| events.iter().find(|e| e.reason == "FailedScheduling"));
    if let Some(e) = scheduling {
        return Some(PendingReason {
            code: "FailedScheduling".into(),
            message: e.message.clone(),
            object: format!("{}/{}", e.kind, e.object),
            count: e.count,
        });
    }
    unschedulable.map(|pod| PendingReason {
        code: "FailedScheduling".into(),
        message: "the pod cannot be scheduled".into(),
        object: format!("Pod/{pod}"),
        count: 1,
    })
}

/// The first OOM kill among a job's pods (`Pod/<name>: container … was OOMKilled
/// (limit 8Gi)`), to name the cause when the job fails.
pub fn first_oom_kill<'a>(pods: impl Iterator<Item = &'a Pod>) -> Option<String> {
    pods.filter_map(|pod| {
        let statuses = pod.status.as_ref()?;
        statuses
            .init_container_statuses
            .iter()
            .flatten()
            .chain(statuses.container_statuses.iter().flatten())
            .find_map(|c| oom_killed(pod, c))
            .map(|m| format!("Pod/{}: {m}", pod.name_any()))
    })
    .next()
}

/// `container <name> was OOMKilled (limit 8Gi)` when the container's current or last
/// termination was the kernel's OOM killer.
pub fn oom_killed(pod: &Pod, c: &ContainerStatus) -> Option<String> {
    let oom = |s: Option<&ContainerState>| {
        s.and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.reason.as_deref() == Some("OOMKilled"))
    };
    if !oom(c.state.as_ref()) && !oom(c.last_state.as_ref()) {
        return None;
    }
    let limit = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .find(|spec| spec.name == c.name)
        .and_then(|spec| spec.resources.as_ref()?.limits.as_ref()?.get("memory"))
        .map_or_else(
            || "no memory limit".to_string(),
            |q| format!("limit {}", q.0),
        );
    Some(format!("container {} was OOMKilled ({limit})", c.name))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(object: &str, reason: &str, message: &str, count: i32) -> ObjectEvent {
        ObjectEvent {
            kind: "Pod".into(),
            object: object.into(),
            type_: "Warning".into(),
            reason: reason.into(),
            message: message.into(),
            count,
            last_seen: None,
        }
    }

    fn pod(name: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "status": status})).expect("pod")
    }

    #[test]
    fn image_pull_failures_win_over_scheduling() {
        let pods = [
            pod(
                "head",
                json!({"containerStatuses": [{"name": "ray-head", "image": "x", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope:1\""}}}]}),
            ),
            pod(
                "worker",
                json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
            ),
        ];
        let events = [
            event("head", "Failed", "Error: ImagePullBackOff", 3),
            event(
                "worker",
                "FailedScheduling",
                "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
                2,
            ),
        ];
        let r = pending_reason(pods.iter(), &events).expect("reason");
        assert_eq!(r.code, "ImagePullBackOff");
        assert_eq!(r.object, "Pod/head");
        assert_eq!(r.count, 3);
        assert!(r.message.contains("nope:1"));

        let r = pending_reason(pods[1..].iter(), &events).expect("reason");
        assert_eq!(r.code, "FailedScheduling");
        assert!(r.message.starts_with("0/2 nodes are available"));
        assert_eq!(r.count, 2);
    }

    #[test]
    fn nothing_wrong_means_no_reason() {
        let pods = [pod("head", json!({"phase": "Running"}))];
        assert_eq!(pending_reason(pods.iter(), &[]), None);
        let mount = [event(
            "head",
            "FailedMount",
            "MountVolume.SetUp failed for volume \"data\"",
            1,
        )];
        assert_eq!(
            pending_reason(pods.iter(), &mount).map(|r| r.code),
            Some("FailedMount".to_string())
        );
    }

    #[test]
    fn oom_kills_name_the_limit_and_attach_errors_win_over_mounts() {
        let oom = serde_json::from_value::<Pod>(json!({
            "metadata": {"name": "worker-0"},
            "spec": {"containers": [{"name": "ray-worker", "resources": {"limits": {"memory": "8Gi"}}}]},
            "status": {"containerStatuses": [{"name": "ray-worker", "image": "x", "imageID": "",
                "ready": false, "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
        }))
        .expect("pod");
        assert_eq!(
            first_oom_kill(std::iter::once(&oom)).as_deref(),
            Some("Pod/worker-0: container ray-worker was OOMKilled (limit 8Gi)")
        );
        let r = pending_reason(std::iter::once(&oom), &[]).expect("reason");
        assert_eq!(r.code, "OOMKilled");
        assert_eq!(r.message, "container ray-worker was OOMKilled (limit 8Gi)");
        assert_eq!((r.object.as_str(), r.count), ("Pod/worker-0", 2));

        let pods = [pod("head", json!({"phase": "Pending"}))];
        let events = [
            event(
                "head",
                "FailedMount",
                "Unable to attach or mount volumes",
                1,
            ),
            event(
                "head",
                "FailedAttachVolume",
                "Multi-Attach error for volume \"pvc-1\" Volume is already used by pod(s) other",
                1,
            ),
        ];
        let r = pending_reason(pods.iter(), &events).expect("reason");
        assert_eq!(r.code, "FailedAttachVolume");
        assert!(r.message.starts_with("Multi-Attach error"), "{r:?}");
    }
}
