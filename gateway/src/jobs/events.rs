//! Pending diagnosis: why a dispatched job is not running yet, from what Kubernetes
//! says about the job's objects — the RayJob, its RayCluster, the submitter Job and
//! every pod carrying the job's `forge.dev/job-id` label (or the submitter's
//! `batch.kubernetes.io/job-name`).
//!
//! Events are read from both `events.k8s.io/v1` and core/v1 (by uid) and deduplicated by (object, type, reason, message) with their counts summed
//! (the kubelet repeats back-off events), newest first. The structured pending reason
//! prefers the most specific signal: a container waiting on an image pull
//! (`ErrImagePull`, `ImagePullBackOff`), a crash-looping init container, a volume that
//! cannot mount (`FailedMount`), then the scheduler's `FailedScheduling` message
//! (`0/4 nodes are available: …`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event as CoreEvent, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::{JobError, rayjob_api};
use crate::app::AppState;
use crate::rayjob::LABEL_JOB_ID;
use crate::store::JobRecord;

/// One deduplicated event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    /// Kind of the object (`Pod`, `RayJob`, …).
    pub kind: String,
    /// Its name.
    pub object: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// How many times it was reported.
    pub count: i32,
    /// RFC 3339 time it was last seen, if known.
    pub last_seen: Option<String>,
}

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
    pub events: Vec<JobEvent>,
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

/// Gather events and pod states of a dispatched job.
pub async fn diagnose(state: &AppState, job: &JobRecord) -> Result<Diagnosis, JobError> {
    let ns = &state.config.k8s.namespace;
    let Some(rayjob) = job.rayjob_name.clone() else {
        return Ok(Diagnosis {
            pending: None,
            events: Vec::new(),
        });
    };
    let pods_api: Api<Pod> = Api::namespaced(state.kube.clone(), ns);
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    for selector in [
        format!("{LABEL_JOB_ID}={}", job.id),
        format!("batch.kubernetes.io/job-name={rayjob}"),
    ] {
        for p in pods_api
            .list(&ListParams::default().labels(&selector))
            .await?
        {
            pods.insert(p.name_any(), p);
        }
    }
    let cluster = rayjob_api(state)
        .get_opt(&rayjob)
        .await?
        .as_ref()
        .and_then(cluster_name);
    let mut objects: Vec<(String, String)> = vec![
        ("RayJob".into(), rayjob.clone()),
        ("Job".into(), rayjob.clone()),
    ];
    if let Some(c) = cluster {
        objects.push(("RayCluster".into(), c));
    }
    objects.extend(pods.keys().map(|p| ("Pod".to_string(), p.clone())));

    // Both event APIs: a real API server serves every event through both (same uid),
    // while some writers use only one of them. Keyed by uid first, then merged.
    let wanted = |kind: &str, name: &str| objects.iter().any(|(k, n)| k == kind && n == name);
    let mut by_uid: BTreeMap<String, JobEvent> = BTreeMap::new();
    let events_api: Api<Event> = Api::namespaced(state.kube.clone(), ns);
    for e in events_api.list(&ListParams::default()).await? {
        let Some(r) = &e.regarding else { continue };
        let (Some(kind), Some(name)) = (&r.kind, &r.name) else {
            continue;
        };
        if !wanted(kind, name) {
            continue;
        }
        by_uid.insert(
            e.metadata.uid.clone().unwrap_or_else(|| e.name_any()),
            JobEvent {
                kind: kind.clone(),
                object: name.clone(),
                type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.note.clone().unwrap_or_default(),
                count: e
                    .series
                    .as_ref()
                    .map(|s| s.count)
                    .or(e.deprecated_count)
                    .unwrap_or(1)
                    .max(1),
                last_seen: e
                    .series
                    .as_ref()
                    .map(|s| s.last_observed_time.0.to_string())
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                    .or_else(|| {
                        e.deprecated_last_timestamp
                            .as_ref()
                            .map(|t| t.0.to_string())
                    }),
            },
        );
    }
    let core_api: Api<CoreEvent> = Api::namespaced(state.kube.clone(), ns);
    for e in core_api.list(&ListParams::default()).await? {
        let r = &e.involved_object;
        let (Some(kind), Some(name)) = (&r.kind, &r.name) else {
            continue;
        };
        if !wanted(kind, name) {
            continue;
        }
        by_uid
            .entry(e.metadata.uid.clone().unwrap_or_else(|| e.name_any()))
            .or_insert_with(|| JobEvent {
                kind: kind.clone(),
                object: name.clone(),
                type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
                reason: e.reason.clone().unwrap_or_default(),
                message: e.message.clone().unwrap_or_default(),
                count: e.count.unwrap_or(1).max(1),
                last_seen: e
                    .last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string())),
            });
    }
    let mut merged: BTreeMap<(String, String, String, String, String), JobEvent> = BTreeMap::new();
    for ev in by_uid.into_values() {
        let key = (
            ev.kind.clone(),
            ev.object.clone(),
            ev.type_.clone(),
            ev.reason.clone(),
            ev.message.clone(),
        );
        merged
            .entry(key)
            .and_modify(|m| {
                m.count += ev.count;
                if ev.last_seen > m.last_seen {
                    m.last_seen = ev.last_seen.clone();
                }
            })
            .or_insert(ev);
    }
    let mut events: Vec<JobEvent> = merged.into_values().collect();
    events.sort_by(|a, b| b.last_seen.cmp(&a.last_seen));
    let pending = pending_reason(pods.values(), &events);
    Ok(Diagnosis { pending, events })
}

fn cluster_name(obj: &DynamicObject) -> Option<String> {
    obj.data
        .pointer("/status/rayClusterName")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The most specific reason a job's pods are not running (pure; unit-tested).
pub fn pending_reason<'a>(
    pods: impl Iterator<Item = &'a Pod>,
    events: &[JobEvent],
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
    if let Some(e) = events
        .iter()
        .find(|e| e.type_ == "Warning" && e.reason == "FailedMount")
    {
        return Some(PendingReason {
            code: "FailedMount".into(),
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(object: &str, reason: &str, message: &str, count: i32) -> JobEvent {
        JobEvent {
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
}
