//! `team-quota`: per-team GPU limits per series.
//!
//! A job whose GPUs on a series would take the team past its limit, given the GPUs the
//! team already runs there, is queued (it runs when the team's jobs finish). A job
//! that alone needs more than the limit could never run and is rejected, with the
//! numbers. Queued jobs do not count against the quota: the gateway's queue orders
//! them. Run this after `pool-series`, which decides each pool's series; pools with no
//! series yet are checked against the `*` limit.
//!
//! Settings (limits in GPUs; `*` applies to series not listed; teams not listed get
//! `default`; no limit at all means unlimited), and the highest priority each team's
//! jobs run at (`max_priority`, `*` for teams not listed; a job asking for more is
//! admitted with the cap, contract 0.3.0's `priority-cap`; no entry: uncapped):
//! ```json
//! { "limits": { "vision": { "h100": 16, "*": 8 } }, "default": { "*": 8 },
//!   "max_priority": { "*": 100, "interns": 10 } }
//! ```

use std::collections::BTreeMap;

use forge_plugin_sdk::prelude::*;

/// Series → GPU limit.
pub type Limits = BTreeMap<String, u32>;

/// Settings of `team-quota`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Team → its limits.
    #[serde(default)]
    pub limits: BTreeMap<String, Limits>,
    /// Limits of teams not listed.
    #[serde(default)]
    pub default: Limits,
    /// Team → the highest priority its jobs run at (`*`: teams not listed; no entry:
    /// uncapped). A job asking for more is admitted at the cap: members cannot
    /// promote their own jobs past what their team is allowed.
    #[serde(default)]
    pub max_priority: BTreeMap<String, i32>,
}

impl Settings {
    fn priority_cap(&self, team: &str) -> Option<i32> {
        self.max_priority
            .get(team)
            .or_else(|| self.max_priority.get("*"))
            .copied()
    }

    fn limit(&self, team: &str, series: &str) -> Option<u32> {
        let limits = self.limits.get(team).unwrap_or(&self.default);
        limits.get(series).or_else(|| limits.get("*")).copied()
    }
}

/// The policy.
pub struct TeamQuota;

impl Policy for TeamQuota {
    type Settings = Settings;

    fn validate(s: &Settings) -> Result<(), String> {
        for (team, limits) in s
            .limits
            .iter()
            .map(|(t, l)| (t.as_str(), l))
            .chain([("default", &s.default)])
        {
            if team.trim().is_empty() {
                return Err("limits: team names must not be empty".into());
            }
            if let Some(series) = limits.keys().find(|k| k.trim().is_empty()) {
                return Err(format!("limits.{team}: empty series name `{series}`"));
            }
        }
        if s.max_priority.keys().any(|t| t.trim().is_empty()) {
            return Err("max_priority: team names must not be empty".into());
        }
        Ok(())
    }

    fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
        let team = &req.job().team;
        for (series, needed) in req.gpus_by_series() {
            let key = series.as_deref().unwrap_or("*");
            let Some(limit) = s.limit(team, key) else {
                continue;
            };
            if needed > u64::from(limit) {
                return Decision::reject(
                    "quota.job-exceeds-limit",
                    format!(
                        "this job needs {needed} {key} GPUs but team `{team}` may use at most {limit}; \
                         make the job smaller or ask for a higher quota"
                    ),
                    Some("pools"),
                );
            }
            let running = u64::from(req.running_gpus(key));
            if running + needed > u64::from(limit) {
                return Decision::queue(
                    "quota.exceeded",
                    format!(
                        "team `{team}` runs {running} of its {limit} {key} GPUs; this job needs {needed} more, \
                         so it waits until {} are released",
                        running + needed - u64::from(limit)
                    ),
                );
            }
        }
        match s.priority_cap(team) {
            Some(cap) => Decision::admit().with_priority_cap(cap),
            None => Decision::admit(),
        }
    }
}

export_policy!(TeamQuota);

#[cfg(test)]
mod tests {
    use forge_plugin_sdk::harness::{Harness, RequestBuilder, validate};

    use super::*;

    const SETTINGS: &str = r#"{"limits": {"vision": {"h100": 16, "*": 8}}, "default": {"*": 4}}"#;

    fn job(team: &str, nodes: u32, gpus: u32, series: &str) -> RequestBuilder {
        RequestBuilder::new()
            .team(team)
            .pool("train", nodes, gpus, Some(series))
    }

    #[test]
    fn admits_within_limit() {
        let h = Harness::<TeamQuota>::new(SETTINGS).unwrap();
        let req = job("vision", 1, 8, "h100").usage("h100", 8, 100).build();
        assert!(matches!(h.evaluate(&req), Decision::Admit(_)));
    }

    #[test]
    fn queues_when_usage_would_exceed() {
        let h = Harness::<TeamQuota>::new(SETTINGS).unwrap();
        let req = job("vision", 1, 8, "h100").usage("h100", 12, 0).build();
        let Decision::Queue(hold) = h.evaluate(&req) else {
            panic!("expected queue")
        };
        assert_eq!(hold.code, "quota.exceeded");
        assert!(
            hold.message.contains("runs 12 of its 16 h100"),
            "{}",
            hold.message
        );
    }

    #[test]
    fn rejects_a_job_larger_than_the_limit_with_numbers() {
        let h = Harness::<TeamQuota>::new(SETTINGS).unwrap();
        let req = job("vision", 3, 8, "h100").build();
        let Decision::Reject(r) = h.evaluate(&req) else {
            panic!("expected reject")
        };
        assert_eq!(r.code, "quota.job-exceeds-limit");
        assert!(
            r.message.contains("24 h100") && r.message.contains("at most 16"),
            "{}",
            r.message
        );
        // `*` for unlisted series, `default` for unlisted teams.
        assert!(matches!(
            h.evaluate(&job("vision", 2, 8, "a100").build()),
            Decision::Reject(_)
        ));
        assert!(matches!(
            h.evaluate(&job("other", 1, 8, "a100").build()),
            Decision::Reject(_)
        ));
        assert!(matches!(
            h.evaluate(&job("other", 1, 4, "a100").build()),
            Decision::Admit(_)
        ));
    }

    #[test]
    fn no_limit_means_unlimited() {
        let h = Harness::<TeamQuota>::new("{}").unwrap();
        assert!(matches!(
            h.evaluate(&job("x", 64, 8, "h100").build()),
            Decision::Admit(_)
        ));
    }

    #[test]
    fn settings_are_checked() {
        assert!(validate::<TeamQuota>(SETTINGS).is_ok());
        let err = validate::<TeamQuota>(r#"{"limits": {"a": {"h100": -1}}}"#).unwrap_err();
        assert!(err.contains("invalid settings"), "{err}");
        let err = validate::<TeamQuota>(r#"{"limits": {"a": {"": 3}}}"#).unwrap_err();
        assert!(err.contains("limits.a"), "{err}");
    }

    #[test]
    fn priorities_are_capped_per_team() {
        let settings = r#"{"max_priority": {"*": 100, "interns": 10}}"#;
        let h = Harness::<TeamQuota>::new(settings).unwrap();
        let cap = |team: &str| match h.evaluate(&job(team, 1, 8, "h100").build()) {
            Decision::Admit(a) => a.priority_cap,
            other => panic!("{other:?}"),
        };
        assert_eq!(cap("interns"), Some(10));
        assert_eq!(cap("vision"), Some(100));
        let uncapped = Harness::<TeamQuota>::new("{}").unwrap();
        let Decision::Admit(a) = uncapped.evaluate(&job("x", 1, 8, "h100").build()) else {
            panic!("admits")
        };
        assert_eq!((a.priority_cap, a.placement), (None, None));
        let err = validate::<TeamQuota>(r#"{"max_priority": {"": 1}}"#).unwrap_err();
        assert!(err.contains("max_priority"), "{err}");
    }
}
