//! Where a pending playground's pod is, as users want to see it: `scheduling` (not
//! bound to a node yet, with the scheduler's reason), `pulling` (the image), `loading`
//! (the server runs but is not ready: the model loads), `ready`, or `failed` — read
//! from the pod's status like a job's pending reason.

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

/// The pod's phase and why it waits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPhase {
    /// `scheduling`, `pulling`, `loading`, `ready` or `failed`.
    pub phase: &'static str,
    /// Why it waits (the scheduler's or the kubelet's message), if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The phase of `pod` (`None`: no pod — it is being created).
pub fn pod_phase(pod: Option<&Pod>) -> PodPhase {
    let Some(status) = pod.and_then(|p| p.status.as_ref()) else {
        return PodPhase {
            phase: "scheduling",
            reason: Some("the pod is being created".into()),
        };
    };
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let cond = |t: &str| conditions.iter().find(|c| c.type_ == t);
    if matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")) {
        return PodPhase {
            phase: "failed",
            reason: status.message.clone().or_else(|| status.reason.clone()),
        };
    }
    if cond("Ready").is_some_and(|c| c.status == "True") {
        return PodPhase {
            phase: "ready",
            reason: None,
        };
    }
    let scheduled = cond("PodScheduled");
    if scheduled.is_none_or(|c| c.status != "True") {
        return PodPhase {
            phase: "scheduling",
            reason: scheduled.and_then(|c| c.message.clone()),
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
            phase: "pulling",
            reason: w.reason.map(|r| match w.message {
                Some(m) => format!("{r}: {m}"),
                None => r,
            }),
        },
        None if status.phase.as_deref() == Some("Running") => PodPhase {
            phase: "loading",
            reason: Some("the server is loading the model".into()),
        },
        None => PodPhase {
            phase: "pulling",
            reason: None,
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
                reason: None
            }
        );
        let failed = pod(json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert_eq!(pod_phase(Some(&failed)).phase, "failed");
    }
}
