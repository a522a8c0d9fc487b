//! The pre-running deadline, owned by the gateway: a job whose RayJob has not reached
//! Running within its `preRunningSeconds` (or `FORGE_KUBERAY_PRERUNNING_DEADLINE_S`) is
//! timed out by the gateway itself, whatever the operator does.
//!
//! The RayJob still carries `preRunningDeadlineSeconds` and a recent KubeRay enforces
//! it first (its `PreRunningDeadlineExceeded` is the reason then recorded). An older
//! operator (the seed allows v1.4+) drops the field, and without this check the job
//! would wait forever, holding its place and its bound GPUs. The gateway's clock runs
//! from the RayJob's creation (KubeRay's from `status.startTime`, set a moment later)
//! plus a grace of a tenth of the deadline, between [`MIN_GRACE_S`] (more than KubeRay's
//! 3 s requeue) and [`MAX_GRACE_S`], so that an operator that enforces the field gets
//! there first. The lifecycle controller looks at every
//! RayJob at least every resync, so the deadline is enforced within that period.

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::cluster::RayJob;
use crate::config::Config;
use crate::jobspec::JobSpec;

/// The shortest grace given to the operator after the deadline (seconds).
pub const MIN_GRACE_S: i64 = 5;
/// The longest grace given to the operator after the deadline (seconds).
pub const MAX_GRACE_S: i64 = 30;

/// The job's pre-running deadline in seconds.
pub fn deadline_s(spec: &JobSpec, cfg: &Config) -> i64 {
    spec.deadlines
        .pre_running_seconds
        .unwrap_or(i64::from(cfg.kuberay.prerunning_deadline_s))
}

/// The timed-out reason when a not-yet-running job's RayJob is past its pre-running
/// deadline (plus grace) at `now`; `None` while it is not (or its age is unknown).
pub fn overrun(spec: &JobSpec, cfg: &Config, rayjob: &RayJob, now: Timestamp) -> Option<String> {
    let created = rayjob.metadata.creation_timestamp.as_ref()?.0;
    let deadline = deadline_s(spec, cfg);
    let grace = (deadline / 10).clamp(MIN_GRACE_S, MAX_GRACE_S);
    let due = created
        .checked_add(SignedDuration::from_secs(deadline.saturating_add(grace)))
        .ok()?;
    (now >= due).then(|| {
        format!(
            "gateway.pre-running-deadline: not running {deadline} s after its RayJob was \
             created (the operator did not enforce preRunningDeadlineSeconds)"
        )
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::cluster::rayjob_crd::RayJobSpec;

    fn rayjob(created: Option<Timestamp>) -> RayJob {
        let mut rj = RayJob::new("rj", RayJobSpec::default());
        rj.metadata.creation_timestamp = created.map(Time);
        rj
    }

    #[test]
    fn times_out_after_the_deadline_and_the_grace() {
        let cfg = Config::from_env_map(crate::config::dev_defaults()).expect("config");
        let mut spec = JobSpec::default();
        spec.deadlines.pre_running_seconds = Some(100);
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("time");
        let rj = rayjob(Some(t0));
        let at = |s: i64| t0 + SignedDuration::from_secs(s);
        assert_eq!(overrun(&spec, &cfg, &rj, at(100)), None, "grace: 10 s");
        assert_eq!(overrun(&spec, &cfg, &rj, at(109)), None);
        let why = overrun(&spec, &cfg, &rj, at(110)).expect("overrun");
        assert!(
            why.starts_with("gateway.pre-running-deadline: not running 100 s"),
            "{why}"
        );
        // The grace is capped; the configured default applies without a spec value.
        spec.deadlines.pre_running_seconds = None;
        let default = deadline_s(&spec, &cfg);
        let capped = default + (default / 10).min(MAX_GRACE_S);
        assert_eq!(overrun(&spec, &cfg, &rj, at(capped - 1)), None);
        assert!(overrun(&spec, &cfg, &rj, at(capped)).is_some());
        // A short deadline still leaves the operator its requeue period.
        spec.deadlines.pre_running_seconds = Some(3);
        assert_eq!(overrun(&spec, &cfg, &rj, at(3 + MIN_GRACE_S - 1)), None);
        assert!(overrun(&spec, &cfg, &rj, at(3 + MIN_GRACE_S)).is_some());
        // No creation time (not yet read back): no verdict.
        assert_eq!(overrun(&spec, &cfg, &rayjob(None), at(1_000_000)), None);
    }
}
