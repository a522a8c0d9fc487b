//! What a RayJob's status means for the job (`../shared/kuberay/SEMANTICS.md`):
//! `""`/New, Initializing, Waiting, Retrying, Suspending, Suspended → initializing;
//! Running → running; Complete → succeeded (STOPPED → cancelled); Failed with
//! DeadlineExceeded or PreRunningDeadlineExceeded → timed-out; any other Failed and
//! ValidationFailed (which never leaves that state) → failed.

use crate::cluster::RayJobStatus;
use crate::domain::JobState;

/// The job state a RayJob status means, with the reason to record.
pub fn target_state(status: &RayJobStatus) -> (JobState, String) {
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    let (deploy, reason, message) = (
        s(&status.job_deployment_status),
        s(&status.reason),
        s(&status.message),
    );
    let detail = |code: &str| {
        if message.is_empty() {
            code.to_string()
        } else {
            format!("{code}: {message}")
        }
    };
    match deploy.as_str() {
        "Running" => (JobState::Running, "kuberay.running".into()),
        "Complete" if status.job_status.as_deref() == Some("STOPPED") => (
            JobState::Cancelled,
            "kuberay.stopped: the Ray job was stopped".into(),
        ),
        "Complete" => (JobState::Succeeded, "kuberay.complete".into()),
        "Failed"
            if matches!(
                reason.as_str(),
                "DeadlineExceeded" | "PreRunningDeadlineExceeded"
            ) =>
        {
            (JobState::TimedOut, detail(&format!("kuberay.{reason}")))
        }
        "Failed" => {
            let code = if reason.is_empty() { "Failed" } else { &reason };
            (JobState::Failed, detail(&format!("kuberay.{code}")))
        }
        "ValidationFailed" => (JobState::Failed, detail("kuberay.ValidationFailed")),
        other => {
            let phase = if other.is_empty() { "New" } else { other };
            (JobState::Initializing, format!("kuberay.{phase}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status(v: serde_json::Value) -> RayJobStatus {
        serde_json::from_value(v).expect("status")
    }

    #[test]
    fn maps_kuberay_status_to_job_states() {
        let cases = [
            (json!({}), JobState::Initializing),
            (
                json!({"jobDeploymentStatus": "Initializing"}),
                JobState::Initializing,
            ),
            (
                json!({"jobDeploymentStatus": "Suspended"}),
                JobState::Initializing,
            ),
            (
                json!({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}),
                JobState::Running,
            ),
            (
                json!({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
                JobState::Succeeded,
            ),
            (
                json!({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}),
                JobState::Cancelled,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "AppFailed"}),
                JobState::Failed,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}),
                JobState::TimedOut,
            ),
            (
                json!({"jobDeploymentStatus": "Failed", "reason": "PreRunningDeadlineExceeded"}),
                JobState::TimedOut,
            ),
            (
                json!({"jobDeploymentStatus": "ValidationFailed"}),
                JobState::Failed,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(target_state(&status(s.clone())).0, want, "{s}");
        }
        let (_, reason) = target_state(&status(json!({
            "jobDeploymentStatus": "Failed", "reason": "AppFailed", "message": "exit 1"
        })));
        assert_eq!(reason, "kuberay.AppFailed: exit 1");
    }
}
