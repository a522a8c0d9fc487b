//! Pending diagnosis: why a dispatched job is not running yet, from what Kubernetes
//! says about the job's objects — the RayJob, its RayCluster, the submitter Job and
//! every pod of the job ([`crate::cluster::Pods::of_job`]) — and their events
//! ([`crate::cluster::events`]).
//!
//! The structured pending reason prefers the most specific signal: a container killed
//! for exceeding its memory limit (`OOMKilled`, with the limit — also when it is now in
//! `CrashLoopBackOff` because of it), a container waiting on an image pull
//! (`ErrImagePull`, `ImagePullBackOff`) on any pod, a crash-looping container (waiting in
//! `CrashLoopBackOff`, or running again after a non-zero exit: named with its pod and
//! container, its last exit code and the last lines of its previous instance's log,
//! read with `previous=true`), a volume
//! that cannot attach (`FailedAttachVolume`, e.g. a ReadWriteOnce claim's
//! `Multi-Attach` error) or mount (`FailedMount`), then the scheduler's
//! `FailedScheduling` message (`0/4 nodes are available: …`).

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod};
use kube::ResourceExt;
use serde::Serialize;

use super::JobLogs;
use crate::cluster::events::{ObjectEvent, events_of};
use crate::cluster::{Cluster, Pods};
use crate::jobs::error::JobError;
use crate::jobs::job_fleet::cluster_of;
use crate::store::JobRecord;

/// Why a job is not running yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    /// The container it is about, when it is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// A crash-looping container's last lines (of its previous instance), at most
    /// [`LAST_LINES`], each at most [`LAST_LINE_CHARS`] characters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub last_lines: Vec<String>,
}

/// Most lines of a crash-looping container's log quoted in its reason.
pub const LAST_LINES: usize = 10;
/// Most characters of each quoted line.
pub const LAST_LINE_CHARS: usize = 200;
/// Most bytes read of that log.
const LAST_LINES_BYTES: i64 = 16 << 10;

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

impl JobLogs {
    /// Gathers events and pod states of a dispatched job, within
    /// [`super::CLUSTER_READ_WITHIN`].
    pub async fn diagnose(&self, job: &JobRecord) -> Result<Diagnosis, JobError> {
        super::within("the job's events and pods", self.diagnose_now(job)).await
    }

    async fn diagnose_now(&self, job: &JobRecord) -> Result<Diagnosis, JobError> {
        let Some(rayjob) = job.rayjob_name.clone() else {
            return Ok(Diagnosis {
                pending: None,
                events: Vec::new(),
            });
        };
        // An ended job's objects are gone once archived: its events were kept with
        // its logs, so a post-mortem still reads them.
        if job.state.is_terminal()
            && let Some(index) = self.log_index(job).await?
        {
            return Ok(Diagnosis {
                pending: None,
                events: index.events,
            });
        }
        let cluster = cluster_of(&self.fleets, job)?;
        let pods = cluster.pods.of_job(&job.id, &rayjob).await?;
        let events = self.events_of_job(cluster, &rayjob, &pods).await?;
        let mut pending = pending_reason(pods.iter(), &events);
        if let Some(p) = pending.as_mut() {
            quote_last_lines(&cluster.pods, p).await;
        }
        Ok(Diagnosis { pending, events })
    }

    /// The Kubernetes events of a job's objects in `fleet`: its RayJob, the submitter
    /// Job, the RayCluster and `pods`.
    pub(crate) async fn events_of_job(
        &self,
        fleet: &Cluster,
        rayjob: &str,
        pods: &[Pod],
    ) -> Result<Vec<ObjectEvent>, JobError> {
        let cluster = fleet
            .rayjobs
            .get(rayjob)
            .await?
            .and_then(|r| r.cluster_name().map(str::to_string));
        let mut objects: Vec<(String, String)> = vec![
            ("RayJob".into(), rayjob.to_string()),
            ("Job".into(), rayjob.to_string()),
        ];
        if let Some(c) = cluster {
            objects.push(("RayCluster".into(), c));
        }
        objects.extend(pods.iter().map(|p| ("Pod".to_string(), p.name_any())));
        Ok(events_of(&fleet.client, &fleet.namespace, &objects).await?)
    }
}

/// Adds a crash-looping container's last lines (its previous instance's log,
/// `previous=true`) to its reason (other reasons are left as they are); best effort
/// (a failed read only loses them).
pub async fn quote_last_lines(pods: &Pods, p: &mut PendingReason) {
    if p.code != "CrashLoopBackOff" {
        return;
    }
    let (Some(pod), Some(container)) = (
        p.object.strip_prefix("Pod/").map(str::to_string),
        p.container.clone(),
    ) else {
        return;
    };
    let lines = i64::try_from(LAST_LINES).unwrap_or(10);
    match pods
        .previous_tail(&pod, &container, lines, LAST_LINES_BYTES)
        .await
    {
        Ok(text) => {
            p.last_lines = last_lines(&text);
            if !p.last_lines.is_empty() {
                p.message = format!(
                    "{}; its last lines: {}",
                    p.message.trim_end_matches('.'),
                    p.last_lines.join(" | ")
                );
            }
        }
        Err(e) => tracing::debug!(%pod, %container, "previous log: {e}"),
    }
}

/// The last [`LAST_LINES`] non-empty lines of `text`, each cut to
/// [`LAST_LINE_CHARS`] characters (`…` marks a cut).
pub fn last_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(LAST_LINES)..]
        .iter()
        .map(|l| match l.char_indices().nth(LAST_LINE_CHARS) {
            Some((at, _)) => format!("{}…", &l[..at]),
            None => (*l).to_string(),
        })
        .collect()
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
                    container: Some(c.name.clone()),
                    ..PendingReason::default()
                });
            }
            if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
                && let Some(reason) = w.reason.as_deref()
                && STUCK_WAITING.contains(&reason)
            {
                let mut message = format!(
                    "container {}: {}",
                    c.name,
                    w.message.clone().unwrap_or_else(|| reason.to_string())
                );
                if let Some(exit) = last_failure(c) {
                    message = format!("{message}; {exit}");
                }
                return Some(PendingReason {
                    code: reason.to_string(),
                    message,
                    object: format!("Pod/{name}"),
                    count: count_of(&name, reason),
                    container: Some(c.name.clone()),
                    ..PendingReason::default()
                });
            }
            // Restarted after a failure and running again: the same crash loop, caught
            // between two back-offs.
            if c.restart_count > 0
                && c.state.as_ref().is_some_and(|s| s.running.is_some())
                && let Some(exit) = last_failure(c)
            {
                return Some(PendingReason {
                    code: "CrashLoopBackOff".into(),
                    message: format!(
                        "container {} restarted {} times; {exit}",
                        c.name, c.restart_count
                    ),
                    object: format!("Pod/{name}"),
                    count: c.restart_count,
                    container: Some(c.name.clone()),
                    ..PendingReason::default()
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
            ..PendingReason::default()
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
            ..PendingReason::default()
        });
    }
    unschedulable.map(|pod| PendingReason {
        code: "FailedScheduling".into(),
        message: "the pod cannot be scheduled".into(),
        object: format!("Pod/{pod}"),
        count: 1,
        ..PendingReason::default()
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

/// `the last run exited with code 1 (Error)` when the container's last instance
/// ended with a non-zero exit code.
fn last_failure(c: &ContainerStatus) -> Option<String> {
    let t = c.last_state.as_ref()?.terminated.as_ref()?;
    (t.exit_code != 0).then(|| {
        format!(
            "the last run exited with code {}{}",
            t.exit_code,
            t.reason
                .as_deref()
                .map_or_else(String::new, |r| format!(" ({r})"))
        )
    })
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
    fn crash_loops_name_the_container_and_its_last_exit() {
        let waiting = pod(
            "head",
            json!({"initContainerStatuses": [{"name": "forge-capsule-fetch", "image": "x",
                "imageID": "", "ready": false, "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}),
        );
        let r = pending_reason(std::iter::once(&waiting), &[]).expect("reason");
        assert_eq!(r.code, "CrashLoopBackOff");
        assert_eq!(r.container.as_deref(), Some("forge-capsule-fetch"));
        assert_eq!(r.object, "Pod/head");
        assert_eq!(
            r.message,
            "container forge-capsule-fetch: back-off 40s; the last run exited with code 1 (Error)"
        );
        let running = pod(
            "worker",
            json!({"containerStatuses": [{"name": "ray-worker", "image": "x",
                "imageID": "", "ready": true, "restartCount": 2,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 2}}}]}),
        );
        let r = pending_reason(std::iter::once(&running), &[]).expect("reason");
        assert_eq!(r.code, "CrashLoopBackOff");
        assert_eq!(
            r.message,
            "container ray-worker restarted 2 times; the last run exited with code 2"
        );
        let clean = pod(
            "worker",
            json!({"containerStatuses": [{"name": "ray-worker", "image": "x",
                "imageID": "", "ready": true, "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 0}}}]}),
        );
        assert_eq!(pending_reason(std::iter::once(&clean), &[]), None);
    }

    #[test]
    fn last_lines_are_few_and_short() {
        let text: String = (0..30).map(|i| format!("line {i}\n")).collect();
        let lines = last_lines(&text);
        assert_eq!(lines.len(), LAST_LINES);
        assert_eq!(lines.first().map(String::as_str), Some("line 20"));
        assert_eq!(lines.last().map(String::as_str), Some("line 29"));
        let long = format!("{}\n\n", "é".repeat(LAST_LINE_CHARS + 5));
        let lines = last_lines(&long);
        assert_eq!(lines.len(), 1, "blank lines are left out");
        assert_eq!(lines[0].chars().count(), LAST_LINE_CHARS + 1);
        assert!(lines[0].ends_with('…'));
        assert!(last_lines("").is_empty());
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
