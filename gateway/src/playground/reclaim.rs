//! The playground TTL controller, run by the leader only (for exactly its term, like
//! the dispatcher): every [`TICK`] it reads the live playgrounds **from the store** —
//! so a restart or a new leader forgets nothing — and for each
//!
//! - gives the warning (the `warnedAtMs` field of the object) once the next reclaim is
//!   [`WARN_LEAD_SECS`](super::warning::WARN_LEAD_SECS) away (or less);
//! - reclaims it when its hard TTL (`ttl-expired`) or idle TTL (`idle`, measured from
//!   the last proxied request) has passed: state `expired` with the reason, the pod
//!   deleted (its key Secret and NetworkPolicy go with it);
//! - advances a pending one whose pod is Ready, and fails one whose pod failed or
//!   vanished, or whose server restarted [`MAX_SERVER_RESTARTS`] times without
//!   becoming ready (`pod-failed`), so its GPUs are never held by a dead server.
//!
//! Each reclaim is checked against the term first: a deposed leader stops at once.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::objects::pod_name;
use super::phase::{MAX_SERVER_RESTARTS, pod_phase, server_restarts};
use super::service::Playgrounds;
use super::warning::warning_due;
use crate::domain::{EndReason, PlaygroundState};
use crate::leader::Term;
use crate::store::{PlaygroundRecord, now_ms};

/// How often the live playgrounds are checked.
pub const TICK: Duration = Duration::from_secs(1);
/// How long a pending playground's pod may be missing before it counts as failed
/// (creation is not atomic: the row is written first).
const CREATE_GRACE_MS: i64 = 30_000;

/// What is due for a playground at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing yet.
    Nothing,
    /// Give the warning.
    Warn,
    /// Reclaim it, for this reason.
    Reclaim(EndReason),
}

/// What is due for `pg` at `now_ms`.
pub fn due(pg: &PlaygroundRecord, now_ms: i64) -> Due {
    if pg.state.is_terminal() {
        return Due::Nothing;
    }
    let (at, reason) = pg.next_deadline_ms();
    if now_ms >= at {
        Due::Reclaim(reason)
    } else if pg.warned_at_ms.is_none() && warning_due(now_ms, at) {
        Due::Warn
    } else {
        Due::Nothing
    }
}

/// Whether `pg`'s server is dead at `now`: its pod failed, vanished (a pending one's
/// only after the creation grace: the row is written before the pod), or restarted
/// [`MAX_SERVER_RESTARTS`] times without being ready.
pub fn server_failed(pg: &PlaygroundRecord, pod: Option<&Pod>, now_ms: i64) -> bool {
    let Some(pod) = pod else {
        return pg.state == PlaygroundState::Ready || now_ms - pg.created_at_ms > CREATE_GRACE_MS;
    };
    let phase = pod_phase(Some(pod)).phase;
    phase == "failed" || (phase != "ready" && server_restarts(pod) >= MAX_SERVER_RESTARTS)
}

/// Starts the controller for `term`.
pub fn spawn(playgrounds: Playgrounds, term: Term) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if term.check("reclaim playgrounds").is_err() {
                return;
            }
            if let Err(e) = pass(&playgrounds, &term).await {
                tracing::warn!(error = %e, "playground TTL pass failed (retrying)");
            }
        }
    })
}

/// One pass over the live playgrounds.
pub async fn pass(playgrounds: &Playgrounds, term: &Term) -> Result<(), super::PlaygroundError> {
    for pg in playgrounds.store().active_playgrounds().await? {
        let now = now_ms();
        match due(&pg, now) {
            Due::Reclaim(reason) => {
                term.check("reclaim a playground")
                    .map_err(|_| super::PlaygroundError::NotReady(pg.id.clone()))?;
                playgrounds.end(&pg, reason).await?;
                continue;
            }
            Due::Warn => {
                if playgrounds.store().warn_playground(&pg.id, now).await? {
                    tracing::info!(playground = %pg.id, team = %pg.team, "playground reclaim warning given");
                }
            }
            Due::Nothing => {}
        }
        let pod = playgrounds.objects().get_pod(&pod_name(&pg.id)).await?;
        let phase = pod_phase(pod.as_ref());
        if server_failed(&pg, pod.as_ref(), now) {
            term.check("fail a playground")
                .map_err(|_| super::PlaygroundError::NotReady(pg.id.clone()))?;
            playgrounds.end(&pg, EndReason::PodFailed).await?;
        } else if pg.state == PlaygroundState::Pending && phase.phase == "ready" {
            playgrounds.observe(pg).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg(expires: i64, idle: Option<u64>, last: i64) -> PlaygroundRecord {
        PlaygroundRecord {
            id: "p".into(),
            team: "t".into(),
            created_by: "t".into(),
            model: "m".into(),
            series: None,
            gpus: 1,
            args: vec![],
            state: PlaygroundState::Ready,
            reason: None,
            created_at_ms: 0,
            expires_at_ms: expires,
            idle_seconds: idle,
            last_request_at_ms: last,
            warned_at_ms: None,
            ended_at_ms: None,
        }
    }

    #[test]
    fn the_earlier_clock_reclaims_after_one_warning() {
        let hard = pg(3_600_000, None, 0);
        assert_eq!(due(&hard, 1_000), Due::Nothing);
        assert_eq!(due(&hard, 3_300_000), Due::Warn);
        assert_eq!(due(&hard, 3_600_000), Due::Reclaim(EndReason::TtlExpired));
        // Idle for 10 min after the last request at 1 000 s: idle comes first.
        let idle = pg(3_600_000, Some(600), 1_000_000);
        assert_eq!(due(&idle, 1_200_000), Due::Nothing);
        assert_eq!(due(&idle, 1_300_000), Due::Warn);
        assert_eq!(due(&idle, 1_600_000), Due::Reclaim(EndReason::Idle));
        // A request restarts the idle clock; the hard TTL still ends it.
        let busy = pg(3_600_000, Some(600), 3_500_000);
        assert_eq!(due(&busy, 3_600_000), Due::Reclaim(EndReason::TtlExpired));
        let mut warned = pg(3_600_000, None, 0);
        warned.warned_at_ms = Some(3_300_000);
        assert_eq!(due(&warned, 3_400_000), Due::Nothing, "warned once");
        let mut ended = pg(0, None, 0);
        ended.state = PlaygroundState::Expired;
        assert_eq!(due(&ended, 10), Due::Nothing);
        // Still loading its model: the idle clock does not run, the hard TTL does.
        let mut loading = pg(3_600_000, Some(600), 0);
        loading.state = PlaygroundState::Pending;
        assert_eq!(due(&loading, 1_000_000), Due::Nothing);
        assert_eq!(
            due(&loading, 3_600_000),
            Due::Reclaim(EndReason::TtlExpired)
        );
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status}))
            .expect("pod")
    }

    #[test]
    fn a_dead_server_is_told_from_a_slow_one() {
        let mut pending = pg(3_600_000, None, 0);
        pending.state = PlaygroundState::Pending;
        // No pod yet: a pending one gets the creation grace, a ready one none.
        assert!(!server_failed(&pending, None, 1_000));
        assert!(server_failed(&pending, None, CREATE_GRACE_MS + 1));
        assert!(server_failed(&pg(3_600_000, None, 0), None, 1_000));
        let crashing = |restarts: i32| {
            pod(serde_json::json!({"phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "vllm", "image": "i", "imageID": "", "ready": false,
                    "restartCount": restarts, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}))
        };
        assert!(!server_failed(
            &pending,
            Some(&crashing(MAX_SERVER_RESTARTS - 1)),
            1_000
        ));
        assert!(server_failed(
            &pending,
            Some(&crashing(MAX_SERVER_RESTARTS)),
            1_000
        ));
        let ready = pod(serde_json::json!({"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "image": "i", "imageID": "", "ready": true,
                "restartCount": 7, "state": {"running": {}}}]}));
        assert!(
            !server_failed(&pg(3_600_000, None, 0), Some(&ready), 1_000),
            "restarted, but serving"
        );
        let failed = pod(serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded"}));
        assert!(server_failed(&pending, Some(&failed), 1_000));
    }
}
