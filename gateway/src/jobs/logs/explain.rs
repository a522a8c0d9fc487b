//! "Pending because…": one sentence, computed on the server, saying why a job is not
//! running yet — from the queue standing the dispatcher published (quota, capacity on
//! the series with its numbers, a policy hold with the plugin's message) and, once the
//! RayJob exists, from the pending diagnosis of Kubernetes' pod states and events
//! (an image that cannot be pulled, a taint or missing resources, a volume that cannot
//! mount). The web console opens a job's page with it; it is pure so it is unit-tested.

use super::diagnosis::PendingReason;
use crate::domain::JobState;
use crate::jobs::queue::QueueEntry;

/// Why a job in `state` is not running, in words (`None` when it is running or ended).
pub fn pending_sentence(
    state: JobState,
    queue: Option<&QueueEntry>,
    pending: Option<&PendingReason>,
) -> Option<String> {
    match state {
        JobState::Queued => Some(match queue {
            Some(q) => queued_sentence(q),
            None => "Pending because the dispatcher has not considered it yet; it runs a \
                     pass on every change."
                .to_string(),
        }),
        JobState::Dispatched | JobState::Initializing => Some(match pending {
            Some(p) => starting_sentence(p),
            None => "Starting: the RayJob exists and Kubernetes has reported no problem \
                     with its pods so far."
                .to_string(),
        }),
        _ => None,
    }
}

fn queued_sentence(q: &QueueEntry) -> String {
    let at = format!("(position {} in the {} queue)", q.position, q.series);
    let reason = q.reason.trim_end_matches('.');
    if q.code.starts_with("quota.") {
        format!(
            "Pending because the team is over its GPU quota on {}: {reason} {at}.",
            q.series
        )
    } else if q.code == "capacity.no-room" {
        format!(
            "Pending because there is not enough free capacity on {}: {reason} {at}.",
            q.series
        )
    } else if q.code == "policy.failed" {
        format!("Pending because the admission policy failed, so it fails closed: {reason} {at}.")
    } else {
        format!(
            "Pending because the admission policy holds it ({}): {reason} {at}.",
            q.code
        )
    }
}

fn starting_sentence(p: &PendingReason) -> String {
    let message = p.message.trim_end_matches('.');
    let seen = if p.count > 1 {
        format!(" (reported {} times on {})", p.count, p.object)
    } else {
        format!(" (on {})", p.object)
    };
    let why = match p.code.as_str() {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" => "an image cannot be pulled",
        "CrashLoopBackOff" => "a container keeps crashing",
        "CreateContainerConfigError" | "CreateContainerError" => "a container cannot be created",
        "FailedMount" => "a volume cannot be mounted",
        "FailedScheduling" if message.contains("taint") => {
            "no node it tolerates has room (a taint keeps it off the others)"
        }
        "FailedScheduling" => "Kubernetes cannot schedule a pod",
        _ => "Kubernetes reports a problem",
    };
    format!("Pending because {why}: {message}{seen}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(code: &str, reason: &str) -> QueueEntry {
        QueueEntry {
            team: "team-a".into(),
            series: "h100".into(),
            gpus: 8,
            position: 2,
            code: code.into(),
            reason: reason.into(),
            standing: None,
        }
    }

    #[test]
    fn queued_jobs_say_quota_capacity_or_hold() {
        let s = pending_sentence(
            JobState::Queued,
            Some(&entry("capacity.no-room", "needs 16 GPUs, 8 free")),
            None,
        )
        .expect("sentence");
        assert_eq!(
            s,
            "Pending because there is not enough free capacity on h100: needs 16 GPUs, 8 free \
             (position 2 in the h100 queue)."
        );
        let s = pending_sentence(
            JobState::Queued,
            Some(&entry("quota.exceeded", "32 > 24")),
            None,
        )
        .expect("sentence");
        assert!(
            s.starts_with("Pending because the team is over its GPU quota on h100"),
            "{s}"
        );
        let s = pending_sentence(
            JobState::Queued,
            Some(&entry("hold.review", "wait for ops")),
            None,
        )
        .expect("sentence");
        assert!(
            s.contains("policy holds it (hold.review): wait for ops"),
            "{s}"
        );
        assert!(pending_sentence(JobState::Queued, None, None).is_some());
    }

    #[test]
    fn starting_jobs_say_what_kubernetes_says() {
        let reason = |code: &str, message: &str| PendingReason {
            code: code.into(),
            message: message.into(),
            object: "Pod/head".into(),
            count: 3,
            ..PendingReason::default()
        };
        let s = pending_sentence(
            JobState::Dispatched,
            None,
            Some(&reason(
                "ImagePullBackOff",
                "container ray-head: Back-off pulling image",
            )),
        )
        .expect("sentence");
        assert_eq!(
            s,
            "Pending because an image cannot be pulled: container ray-head: Back-off pulling \
             image (reported 3 times on Pod/head)."
        );
        let s = pending_sentence(
            JobState::Initializing,
            None,
            Some(&reason(
                "FailedScheduling",
                "0/2 nodes: 2 node(s) had untolerated taint",
            )),
        )
        .expect("sentence");
        assert!(s.contains("a taint keeps it off"), "{s}");
        assert!(pending_sentence(JobState::Dispatched, None, None).is_some());
        assert_eq!(pending_sentence(JobState::Running, None, None), None);
        assert_eq!(pending_sentence(JobState::Succeeded, None, None), None);
    }
}
