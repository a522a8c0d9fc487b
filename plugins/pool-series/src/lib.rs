//! `pool-series`: choose the GPU series every pool runs on and pin it there.
//!
//! For each pool: its requested series wins if it is allowed; otherwise the pool's
//! mapping from the settings, otherwise the default series. An unresolved, disallowed,
//! unknown or unavailable series rejects the job, naming the pool's field (a series
//! whose only usable GPUs sit on tainted nodes is *not* unavailable: the job waits for a
//! toleration, see below). The placement gets the node selector
//! `<gpu-node-label>=<series>` and Ray custom resources that pin the pool's worker
//! group: `forge-series-<series>` and `forge-pool-<pool>`, one unit per GPU (at least
//! one per node).
//!
//! `tolerations` (per series, `*` for every series) adds Kubernetes tolerations to the
//! pools placed there — run it in the global chain: only global policies may add them.
//!
//! `fleets` (per team, `*` for every other team) pins a team's pools to those fleets
//! (data residency): the pools may run only there, within what earlier links allowed.
//! A job whose team may run in no fleet the gateway drives is rejected
//! (`fleet.none-allowed`), never placed elsewhere; a pinned fleet that is unavailable
//! is still the only one, so the job waits for it.
//!
//! Settings:
//! ```json
//! { "pools": { "rollout": "h100" }, "default_series": "h200", "allowed": ["h100", "h200"],
//!   "tolerations": { "*": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] },
//!   "fleets": { "team-eu": ["eu-west"] } }
//! ```

use std::collections::BTreeMap;

use forge_plugin_sdk::prelude::*;

/// Settings of `pool-series`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Pool name → series for pools that request none.
    #[serde(default)]
    pub pools: BTreeMap<String, String>,
    /// Series for pools that request none and have no mapping.
    #[serde(default)]
    pub default_series: Option<String>,
    /// If non-empty, the only series jobs may use.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// Series (or `*`) → tolerations added to pools placed there.
    #[serde(default)]
    pub tolerations: BTreeMap<String, Vec<TolerationSetting>>,
    /// Team (or `*`) → the only fleets its pools may run in; a team not listed (and no
    /// `*`) may run in any.
    #[serde(default)]
    pub fleets: BTreeMap<String, Vec<String>>,
}

impl Settings {
    /// The fleets `team`'s pools may run in, if pinned.
    fn fleets_of(&self, team: &str) -> Option<&[String]> {
        self.fleets
            .get(team)
            .or_else(|| self.fleets.get("*"))
            .map(Vec::as_slice)
    }
}

/// `pool`'s fleets narrowed to `pinned`: those of the pool's (empty: any) that are
/// pinned and driven by the gateway (`known`).
fn narrowed(pool: &[String], pinned: &[String], known: &[Fleet]) -> Vec<String> {
    pinned
        .iter()
        .filter(|f| pool.is_empty() || pool.contains(f))
        .filter(|f| known.iter().any(|k| k.name == **f))
        .cloned()
        .collect()
}

/// A toleration as the settings write it (Kubernetes field names and spellings).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TolerationSetting {
    /// The taint key (absent with `Exists`: every taint).
    #[serde(default)]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: Option<String>,
    /// The value to match with `Equal`.
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; absent = every effect.
    #[serde(default)]
    pub effect: Option<String>,
}

impl TolerationSetting {
    /// The contract's toleration, or why the setting is not one.
    fn to_toleration(&self) -> Result<Toleration, String> {
        let operator = match self.operator.as_deref().unwrap_or("Equal") {
            "Equal" => TolerationOperator::Equal,
            "Exists" => TolerationOperator::Exists,
            other => return Err(format!("operator `{other}` is not Equal or Exists")),
        };
        let effect = match self.effect.as_deref() {
            None => None,
            Some("NoSchedule") => Some(TaintEffect::NoSchedule),
            Some("PreferNoSchedule") => Some(TaintEffect::PreferNoSchedule),
            Some("NoExecute") => Some(TaintEffect::NoExecute),
            Some(other) => return Err(format!("effect `{other}` is not a taint effect")),
        };
        match operator {
            TolerationOperator::Equal if self.key.is_none() => {
                return Err("an Equal toleration needs a key".into());
            }
            TolerationOperator::Exists if self.value.is_some() => {
                return Err("an Exists toleration takes no value".into());
            }
            _ => {}
        }
        Ok(Toleration {
            key: self.key.clone(),
            operator,
            value: self.value.clone(),
            effect,
        })
    }
}

/// The policy.
pub struct PoolSeries;

impl Policy for PoolSeries {
    type Settings = Settings;

    fn validate(s: &Settings) -> Result<(), String> {
        let named = s
            .pools
            .iter()
            .map(|(pool, series)| (format!("pools.{pool}"), series))
            .chain(
                s.default_series
                    .iter()
                    .map(|d| ("default_series".to_string(), d)),
            );
        for (team, fleets) in &s.fleets {
            if team.trim().is_empty() {
                return Err("fleets: team names must not be empty".into());
            }
            if fleets.is_empty() || fleets.iter().any(|f| f.trim().is_empty()) {
                return Err(format!(
                    "fleets.{team}: list at least one fleet, none empty"
                ));
            }
        }
        for (series, list) in &s.tolerations {
            for (i, t) in list.iter().enumerate() {
                t.to_toleration()
                    .map_err(|e| format!("tolerations.{series}[{i}]: {e}"))?;
            }
        }
        for (field, series) in named {
            if series.trim().is_empty() {
                return Err(format!("{field}: series must not be empty"));
            }
            if !s.allowed.is_empty() && !s.allowed.contains(series) {
                return Err(format!(
                    "{field}: series `{series}` is not in `allowed` ({})",
                    s.allowed.join(", ")
                ));
            }
        }
        Ok(())
    }

    fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
        let mut placement = req.placement().clone();
        for (i, pool) in req.job().pools.iter().enumerate() {
            let field = format!("pools[{i}].series");
            let requested = pool.series.as_ref();
            if let Some(r) = requested
                && !s.allowed.is_empty()
                && !s.allowed.contains(r)
            {
                return Decision::reject(
                    "series.not-allowed",
                    format!(
                        "pool `{}` asks for series `{r}`, which is not allowed here; allowed: {}",
                        pool.name,
                        s.allowed.join(", ")
                    ),
                    Some(&field),
                );
            }
            let Some(series) = requested
                .or_else(|| s.pools.get(&pool.name))
                .or(s.default_series.as_ref())
            else {
                return Decision::reject(
                    "series.unresolved",
                    format!(
                        "pool `{}` names no series and the policy has no mapping or default for it; set `series`",
                        pool.name
                    ),
                    Some(&field),
                );
            };
            let Some(cap) = req.series(series) else {
                let known: Vec<&str> = req
                    .cluster()
                    .series
                    .iter()
                    .map(|c| c.series.as_str())
                    .collect();
                return Decision::reject(
                    "series.unknown",
                    format!(
                        "no node carries series `{series}` (label {}); known series: {}",
                        req.cluster().gpu_node_label,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    ),
                    Some(&field),
                );
            };
            if cap.allocatable == 0 && cap.tainted == 0 {
                return Decision::reject(
                    "series.unavailable",
                    format!(
                        "series `{series}` has no schedulable GPUs ({} of {} blocked: nodes cordoned or NotReady)",
                        cap.blocked, cap.total
                    ),
                    Some(&field),
                );
            }
            let Some(pp) = placement.pool_mut(&pool.name) else {
                return Decision::reject(
                    "placement.missing-pool",
                    format!("the placement so far has no entry for pool `{}`", pool.name),
                    Some(&format!("pools[{i}]")),
                );
            };
            if let Some(pinned) = s.fleets_of(&req.job().team) {
                let fleets = narrowed(&pp.fleets, pinned, req.fleets());
                if fleets.is_empty() {
                    return Decision::reject(
                        "fleet.none-allowed",
                        format!(
                            "team `{}` may run only in fleet(s) {}, and none of them is one this pool may use here",
                            req.job().team,
                            pinned.join(", ")
                        ),
                        Some(&format!("pools[{i}]")),
                    );
                }
                pp.fleets = fleets;
            }
            pp.series = Some(series.clone());
            pp.select(&req.cluster().gpu_node_label, series);
            let units = f64::from(pool.gpus_per_node.max(1));
            pp.ray_resource(&format!("forge-series-{series}"), units);
            pp.ray_resource(&format!("forge-pool-{}", pool.name), units);
            let extra = s.tolerations.get("*").into_iter().flatten();
            for t in extra.chain(s.tolerations.get(series).into_iter().flatten()) {
                // Checked by `validate`.
                if let Ok(t) = t.to_toleration() {
                    pp.tolerate(t);
                }
            }
        }
        Decision::place(placement)
    }
}

export_policy!(PoolSeries);

#[cfg(test)]
mod tests {
    use forge_plugin_sdk::harness::{Harness, RequestBuilder, validate};

    use super::*;

    const SETTINGS: &str =
        r#"{"pools": {"rollout": "h100"}, "default_series": "h200", "allowed": ["h100", "h200"]}"#;

    fn cluster() -> RequestBuilder {
        RequestBuilder::new()
            .series("h100", 32, 16, 4)
            .series("h200", 64, 64, 8)
    }

    #[test]
    fn maps_pools_and_pins_them() {
        let h = Harness::<PoolSeries>::new(SETTINGS).unwrap();
        let req = cluster()
            .pool("train", 2, 8, None)
            .pool("rollout", 1, 4, None)
            .build();
        let Ok(p) = h.placed(&req) else {
            panic!("expected admit")
        };
        assert_eq!(p.pools[0].series.as_deref(), Some("h200"));
        assert_eq!(p.pools[1].series.as_deref(), Some("h100"));
        assert_eq!(
            p.pools[1].node_selector,
            vec![("starforge/gpu-series".to_string(), "h100".to_string())]
        );
        assert!(
            p.pools[1]
                .ray_resources
                .contains(&("forge-series-h100".to_string(), 4.0))
        );
        assert!(
            p.pools[1]
                .ray_resources
                .contains(&("forge-pool-rollout".to_string(), 4.0))
        );
    }

    #[test]
    fn requested_series_wins_when_allowed() {
        let h = Harness::<PoolSeries>::new(SETTINGS).unwrap();
        let req = cluster().pool("rollout", 1, 8, Some("h200")).build();
        let Ok(p) = h.placed(&req) else {
            panic!("expected admit")
        };
        assert_eq!(p.pools[0].series.as_deref(), Some("h200"));
    }

    #[test]
    fn rejects_disallowed_unknown_unavailable_and_unresolved() {
        let h = Harness::<PoolSeries>::new(SETTINGS).unwrap();
        let code = |d: Decision| match d {
            Decision::Reject(r) => (r.code, r.field),
            other => panic!("expected reject, got {other:?}"),
        };
        let req = cluster()
            .pool("a", 1, 8, None)
            .pool("b", 1, 8, Some("a100"))
            .build();
        assert_eq!(
            code(h.evaluate(&req)),
            ("series.not-allowed".into(), Some("pools[1].series".into()))
        );

        let open = Harness::<PoolSeries>::new("{}").unwrap();
        let req = cluster().pool("a", 1, 8, Some("b200")).build();
        assert_eq!(code(open.evaluate(&req)).0, "series.unknown");
        let req = cluster().pool("a", 1, 8, None).build();
        assert_eq!(code(open.evaluate(&req)).0, "series.unresolved");

        let blocked = SeriesCapacity {
            series: "h200".into(),
            total: 16,
            allocatable: 0,
            in_use: 0,
            blocked: 16,
            free: 0,
            largest_free_block: 0,
            nodes: 2,
            tainted: 0,
            taints: Vec::new(),
            default_cpu_millis: 8000,
            default_memory_bytes: 1 << 30,
        };
        let req = RequestBuilder::new()
            .capacity(blocked)
            .pool("a", 1, 8, None)
            .build();
        assert_eq!(code(h.evaluate(&req)).0, "series.unavailable");
    }

    #[test]
    fn tainted_series_is_not_unavailable_and_tolerations_are_added() {
        let gpu = Taint {
            key: "nvidia.com/gpu".into(),
            value: Some("present".into()),
            effect: TaintEffect::NoSchedule,
        };
        let req = RequestBuilder::new()
            .series("h100", 16, 16, 2)
            .tainted(gpu.clone(), 2, 16)
            .pool("a", 1, 8, Some("h100"))
            .build();
        let plain = Harness::<PoolSeries>::new("{}").unwrap();
        let Ok(p) = plain.placed(&req) else {
            panic!("a tainted series waits for a toleration, it is not unavailable")
        };
        assert!(p.pools[0].tolerations.is_empty());

        let tolerant = Harness::<PoolSeries>::new(
            r#"{"tolerations": {"h100": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                                "*": [{"key": "spot", "value": "yes"}]}}"#,
        )
        .unwrap();
        let Ok(p) = tolerant.placed(&req) else {
            panic!("admit")
        };
        let keys: Vec<_> = p.pools[0]
            .tolerations
            .iter()
            .map(|t| (t.key.clone().unwrap_or_default(), t.operator))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("spot".to_string(), TolerationOperator::Equal),
                ("nvidia.com/gpu".to_string(), TolerationOperator::Exists)
            ]
        );
        let err = validate::<PoolSeries>(r#"{"tolerations": {"*": [{"operator": "Equal"}]}}"#)
            .unwrap_err();
        assert!(
            err.contains("tolerations.*[0]") && err.contains("key"),
            "{err}"
        );
    }

    #[test]
    fn a_pinned_team_runs_only_in_its_fleets_and_others_anywhere() {
        let h = Harness::<PoolSeries>::new(
            r#"{"default_series": "h100", "fleets": {"team-eu": ["eu", "eu-2"]}}"#,
        )
        .unwrap();
        let req = |team: &str, fleets: &[&str]| {
            RequestBuilder::new()
                .series("h100", 16, 16, 2)
                .fleets(fleets)
                .team(team)
                .pool("a", 1, 8, None)
                .build()
        };
        let Ok(p) = h.placed(&req("team-eu", &["us", "eu"])) else {
            panic!("admit")
        };
        assert_eq!(
            p.pools[0].fleets,
            vec!["eu".to_string()],
            "only driven fleets"
        );
        let Ok(p) = h.placed(&req("team-us", &["us", "eu"])) else {
            panic!("admit")
        };
        assert!(
            p.pools[0].fleets.is_empty(),
            "an unpinned team may run anywhere"
        );
        match h.evaluate(&req("team-eu", &["us"])) {
            Decision::Reject(r) => {
                assert_eq!(r.code, "fleet.none-allowed");
                assert_eq!(r.field.as_deref(), Some("pools[0]"));
            }
            other => panic!("a team pinned to fleets not driven here: {other:?}"),
        }
        // Within what an earlier link allowed.
        let mut earlier = req("team-eu", &["eu", "eu-2"]).placement().clone();
        earlier.pools[0].fleets = vec!["eu-2".into()];
        let narrowed = RequestBuilder::new()
            .series("h100", 16, 16, 2)
            .fleets(&["eu", "eu-2"])
            .team("team-eu")
            .pool("a", 1, 8, None)
            .placement(earlier)
            .build();
        let Ok(p) = h.placed(&narrowed) else {
            panic!("admit")
        };
        assert_eq!(p.pools[0].fleets, vec!["eu-2".to_string()]);
        let err = validate::<PoolSeries>(r#"{"fleets": {"team-eu": []}}"#).unwrap_err();
        assert!(err.contains("fleets.team-eu"), "{err}");
    }

    #[test]
    fn settings_are_checked() {
        assert!(validate::<PoolSeries>(SETTINGS).is_ok());
        assert!(validate::<PoolSeries>("").is_ok());
        let err = validate::<PoolSeries>(r#"{"default_series": "a100", "allowed": ["h100"]}"#)
            .unwrap_err();
        assert!(
            err.contains("default_series") && err.contains("a100"),
            "{err}"
        );
        let err = validate::<PoolSeries>(r#"{"pools": {"x": ""}}"#).unwrap_err();
        assert!(err.contains("pools.x"), "{err}");
        let err = validate::<PoolSeries>(r#"{"defaults": "h100"}"#).unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }
}
