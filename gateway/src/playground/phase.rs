//! Where a pending playground's pod is, as users want to see it: `scheduling` (not
//! bound to a node yet, with the scheduler's reason), `pulling` (the image), `loading`
//! (the server runs but is not ready: the model loads), `failing` (the server cannot
//! start: it crash-loops, or its container cannot be created), `ready`, or `failed` —
//! read from the pod's status, with the same structured pending reason as a job's
//! ([`crate::jobs::diagnosis`]: the scheduler's message, an image pull error, a volume
//! that cannot attach, a crash loop with the server's last lines).

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde::Serialize;

use crate::cluster::PlaygroundObjects;
use crate::jobs::logs::diagnosis::{PendingReason, pending_reason, quote_last_lines};

/// Restarts after which a server that keeps failing is given up (its playground ends
/// `pod-failed`, so a broken server does not hold GPUs until its TTL).
pub const MAX_SERVER_RESTARTS: i32 = 5;

/// The pod's phase and why it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPhase {
    /// `scheduling`, `pulling`, `loading`, `failing`, `ready` or `failed`.
    pub phase: &'static str,
    /// Why it waits (the scheduler's or the kubelet's message), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The structured reason, as for jobs (`code`, `message`, `object`, `container`,
    /// `lastLines`), when Kubernetes says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingReason>,
}

/// Waiting reasons that mean the server cannot start.
const FAILING: &[&str] = &[
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// `phase` with the diagnosis of `pod` (its events and container states; a crash
/// loop's last lines), for a pod that is not ready. Best effort: a failed read of the
/// events or the log only loses the detail.
pub async fn diagnosed(objects: &PlaygroundObjects, pod: &Pod, mut phase: PodPhase) -> PodPhase {
    if phase.phase == "ready" {
        return phase;
    }
    let events = objects
        .events_of_pod(&pod.name_any())
        .await
        .unwrap_or_else(|e| {
            tracing::debug!(pod = %pod.name_any(), "playground pod events: {e}");
            Vec::new()
        });
    if let Some(mut p) = pending_reason(std::iter::once(pod), &events) {
        quote_last_lines(&objects.pods(), &mut p).await;
        if FAILING.contains(&p.code.as_str()) || p.code == "OOMKilled" {
            phase.phase = "failing";
        }
        phase.reason = Some(format!("{}: {}", p.code, p.message));
        phase.pending = Some(p);
    }
    phase
}

/// How many times the server container has restarted.
pub fn server_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
}

/// The phase of `pod` (`None`: no pod — it is being created).
pub fn pod_phase(pod: Option<&Pod>) -> PodPhase {
    let Some(status) = pod.and_then(|p| p.status.as_ref()) else {
        return PodPhase {
            phase: "scheduling",
            reason: Some("the pod is being created".into()),
            pending: None,
        };
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let cond = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return PodPhase {
            phase: "failed",
            reason: status.message.clone().or_else(|| status.reason.clone()),
            pending: None,
        };
    }
    if cond("Ready").is_some_and(|c| c.status == "True") {
        return PodPhase {
            phase: "ready",
            reason: None,
            pending: None,
        };
    }
    let scheduled = cond("PodScheduled");
    if scheduled.is_none_or(|c| c.status != "True") {
        return PodPhase {
            phase: "scheduling",
            reason: scheduled.and_then(|c| c.message.clone()),
            pending: None,
        };
    }
    let waiting = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.clone());
    match waiting {
        Some(w) => PodPhase {
            phase: if w.reason.as_deref().is_some_and(|r| FAILING.contains(&r)) {
                "failing"
            } else {
                "pulling"
            },
            reason: w.reason.map(|r| match w.message {
                Some(m) => format!("{r}: {m}"),
                None => r,
            }),
            pending: None,
        },
        None if status.phase.as_deref() == Some("Running") => PodPhase {
            phase: "loading",
            reason: Some("the server is loading the model".into()),
            pending: None,
        },
        None => PodPhase {
            phase: "pulling",
            reason: None,
            pending: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).expect("pod")
    }

    #[test]
    fn phases_follow_the_pod() {
        assert_eq!(pod_phase(None).phase, "scheduling");
        let unsched = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}),
        );
        let p = pod_phase(Some(&unsched));
        assert_eq!(p.phase, "scheduling");
        assert!(p.reason.expect("reason").contains("Insufficient"));
        let pulling = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(pod_phase(Some(&pulling)).phase, "pulling");
        let loading = pod(
            json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"}]}),
        );
        assert_eq!(pod_phase(Some(&loading)).phase, "loading");
        let ready =
            pod(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}));
        assert_eq!(
            pod_phase(Some(&ready)),
            PodPhase {
                phase: "ready",
                reason: None,
                pending: None,
            }
        );
        let crashing = pod(
            json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "image": "i", "imageID": "", "ready": false,
                "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        assert_eq!(pod_phase(Some(&crashing)).phase, "failing");
        assert_eq!(server_restarts(&crashing), 3);
        let failed = pod(json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert_eq!(pod_phase(Some(&failed)).phase, "failed");
    }
}
