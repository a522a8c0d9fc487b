//! `team-quota`: per-team GPU limits per series.
//!
//! A job whose GPUs on a series would take the team past its limit, given the GPUs the
//! team already runs there, is queued (it runs when the team's jobs finish). A job
//! that alone needs more than the limit could never run and is rejected, with the
//! numbers.
//!
//! **Borrowing** (issue 39 §3): the limit is the team's *guarantee*; with a
//! `borrow_limit` the team may run that many GPUs more on a series, on GPUs idle now.
//! Such a job is admitted marked as borrowing (`Decision::borrowing`: its GPUs beyond
//! the guarantee), and the gateway reclaims them — preempting it with notice, least
//! lost work first — when a team whose guarantee covers its job needs them. Queued jobs do not count against the quota: the gateway's queue orders
//! them. Run this after `pool-series`, which decides each pool's series; pools with no
//! series yet are checked against the `*` limit.
//!
//! Settings (limits in GPUs; `*` applies to series not listed; teams not listed get
//! `default`; no limit at all means unlimited), and the highest priority each team's
//! jobs run at (`max_priority`, `*` for teams not listed; a job asking for more is
//! admitted with the cap, contract 0.3.0's `priority-cap`; no entry: uncapped):
//! ```json
//! { "limits": { "vision": { "h100": 16, "*": 8 } }, "default": { "*": 8 },
//!   "borrow_limit": { "*": { "*": 8 } },
//!   "max_priority": { "*": 100, "interns": 10 } }
//! ```
//! (`borrow_limit`: team → series → GPUs beyond the limit, `*` for teams and series
//! not listed; no entry: no borrowing.)

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
    /// Team (`*`: teams not listed) → series (`*`: series not listed) → GPUs it may
    /// borrow beyond its limit, on idle GPUs. No entry: none.
    #[serde(default)]
    pub borrow_limit: BTreeMap<String, Limits>,
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

    fn borrow_limit(&self, team: &str, series: &str) -> u32 {
        self.borrow_limit
            .get(team)
            .or_else(|| self.borrow_limit.get("*"))
            .and_then(|l| l.get(series).or_else(|| l.get("*")))
            .copied()
            .unwrap_or(0)
    }
}

/// How one series of a job stands against the team's quota.
enum Within {
    /// Inside the guarantee.
    Guaranteed,
    /// Beyond it by this many GPUs, on idle GPUs, within the borrow limit.
    Borrowing(u32),
    /// It waits, or can never run.
    No(Decision),
}

/// One series: `needed` GPUs of `key` for `team`, which runs `running` there, under
/// `limit` (its guarantee) and `borrow` more.
fn within(
    team: &str,
    key: &str,
    needed: u64,
    running: u64,
    limit: u32,
    borrow: u32,
    idle: u64,
) -> Within {
    let (limit, borrow) = (u64::from(limit), u64::from(borrow));
    if needed > limit + borrow {
        let more = if borrow > 0 {
            format!(" (its {limit} plus {borrow} borrowed)")
        } else {
            String::new()
        };
        return Within::No(Decision::reject(
            "quota.job-exceeds-limit",
            format!(
                "this job needs {needed} {key} GPUs but team `{team}` may use at most {}{more}; \
                 make the job smaller or ask for a higher quota",
                limit + borrow
            ),
            Some("pools"),
        ));
    }
    if running + needed <= limit {
        return Within::Guaranteed;
    }
    let beyond = (running + needed - limit).min(needed);
    if running + needed <= limit + borrow && idle >= needed {
        return Within::Borrowing(u32::try_from(beyond).unwrap_or(u32::MAX));
    }
    let message = if borrow == 0 {
        format!(
            "team `{team}` runs {running} of its {limit} {key} GPUs; this job needs {needed} more, \
             so it waits until {} are released",
            running + needed - limit
        )
    } else if running + needed > limit + borrow {
        format!(
            "team `{team}` runs {running} {key} GPUs, its {limit} and {} of the {borrow} it may \
             borrow; this job needs {needed} more, so it waits until {} are released",
            running.saturating_sub(limit),
            running + needed - limit - borrow
        )
    } else {
        format!(
            "team `{team}` runs {running} of its {limit} {key} GPUs; it may borrow up to {borrow} \
             idle ones, but only {idle} are idle and this job needs {needed}"
        )
    };
    Within::No(Decision::queue("quota.exceeded", message))
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
        for (team, limits) in &s.borrow_limit {
            if team.trim().is_empty() {
                return Err("borrow_limit: team names must not be empty".into());
            }
            if let Some(series) = limits.keys().find(|k| k.trim().is_empty()) {
                return Err(format!("borrow_limit.{team}: empty series name `{series}`"));
            }
        }
        if s.max_priority.keys().any(|t| t.trim().is_empty()) {
            return Err("max_priority: team names must not be empty".into());
        }
        Ok(())
    }

    fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
        let team = &req.job().team;
        let mut borrowed = 0u32;
        for (series, needed) in req.gpus_by_series() {
            let key = series.as_deref().unwrap_or("*");
            let Some(limit) = s.limit(team, key) else {
                continue;
            };
            let running = u64::from(req.running_gpus(key));
            let idle = req.series(key).map_or(0, |c| u64::from(c.free));
            let borrow = s.borrow_limit(team, key);
            match within(team, key, needed, running, limit, borrow, idle) {
                Within::Guaranteed => {}
                Within::Borrowing(n) => borrowed = borrowed.saturating_add(n),
                Within::No(d) => return d,
            }
        }
        let admit = if borrowed > 0 {
            Decision::borrowing(req.placement().clone(), borrowed)
        } else {
            Decision::admit()
        };
        match s.priority_cap(team) {
            Some(cap) => admit.with_priority_cap(cap),
            None => admit,
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

    const BORROWING: &str =
        r#"{"default": {"*": 8}, "borrow_limit": {"*": {"*": 8}, "strict": {}}}"#;

    fn borrowed(d: &Decision) -> Option<String> {
        let Decision::Admit(a) = d else {
            return None;
        };
        let pools = &a.placement.as_ref()?.pools;
        let marks: Vec<&String> = pools
            .iter()
            .filter_map(|p| {
                p.annotations
                    .iter()
                    .find(|(k, _)| k == BORROWED_GPUS_ANNOTATION)
                    .map(|(_, v)| v)
            })
            .collect();
        assert_eq!(marks.len(), pools.len(), "every pool is marked");
        marks.first().map(|v| (*v).clone())
    }

    #[test]
    fn beyond_the_guarantee_a_team_borrows_idle_gpus_marked_as_such() {
        let h = Harness::<TeamQuota>::new(BORROWING).unwrap();
        let idle = |free| job("a", 1, 8, "h100").series("h100", 16, free, 2);
        // Within the guarantee: a plain admit.
        let d = h.evaluate(&idle(16).usage("h100", 0, 0).build());
        assert!(matches!(d, Decision::Admit(_)) && borrowed(&d).is_none());
        // Beyond it, 8 idle: admitted, its 8 GPUs marked borrowed.
        let d = h.evaluate(&idle(8).usage("h100", 8, 0).build());
        assert_eq!(borrowed(&d).as_deref(), Some("8"), "{d:?}");
        // Nothing idle: it waits, and says why.
        let Decision::Queue(hold) = h.evaluate(&idle(0).usage("h100", 8, 0).build()) else {
            panic!("expected queue")
        };
        assert!(hold.message.contains("only 0 are idle"), "{}", hold.message);
        // Past the borrow limit: it waits for its own jobs.
        let Decision::Queue(hold) = h.evaluate(&idle(8).usage("h100", 16, 0).build()) else {
            panic!("expected queue")
        };
        assert!(
            hold.message.contains("8 of the 8 it may borrow"),
            "{}",
            hold.message
        );
        // A team listed without borrowing (`strict: {}`) does not borrow.
        let strict = job("strict", 1, 8, "h100").series("h100", 16, 8, 2);
        assert!(matches!(
            h.evaluate(&strict.usage("h100", 8, 0).build()),
            Decision::Queue(_)
        ));
        // A job larger than guarantee + borrow limit can never run.
        let Decision::Reject(r) = h.evaluate(&job("a", 3, 8, "h100").build()) else {
            panic!("expected reject")
        };
        assert!(
            r.message.contains("at most 16 (its 8 plus 8 borrowed)"),
            "{}",
            r.message
        );
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
