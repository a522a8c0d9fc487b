//! Team plugins may narrow a placement, never widen it.
//!
//! A team's own links run before the global chain (see the gateway's composition),
//! so without a rule a team plugin could put anything on its pods — a node selector
//! onto another team's machines' labels, `sidecar.istio.io/inject`,
//! `k8s.v1.cni.cncf.io/networks`, labels another object selects on — and global
//! plugins that keep the incoming placement would pass it through. After every
//! **team** link that admits, the host compares the placement it returned (`after`)
//! with the one it was given (`before`), pool by pool, and fails the evaluation closed
//! ([`Widening`], naming the field) unless:
//!
//! | field | a team link may | it may not |
//! |---|---|---|
//! | `series` | nothing: the series is the job's request and the global chain's choice | set, change or clear it |
//! | `nodeSelector` | add terms (selectors are ANDed: every term only narrows the nodes) | remove or change a term; add the GPU node-label key (`cluster.gpuNodeLabel`: the series decides it) |
//! | `rayResources` | add custom resources of its own (they live in the job's own Ray cluster) | remove or change one; add one whose name starts with `forge` (the platform's: `forge-series-*`, `forge-pool-*`, `forge.pool.*`) |
//! | `labels`, `annotations` | add keys under its team prefix `<team>.teams.forge.dev/` | remove or change an entry; add any other key |
//!
//! The pools themselves (their number, order and names) are checked for every link by
//! the chain. Global links are not restricted: the global chain is the platform's.
//!
//! New placement fields (a new contract version) get their rule here, in
//! [`check`], so the rule has one home.

use std::collections::BTreeMap;
use std::fmt::Display;

use crate::model::{Placement, PolicyRequest, PoolPlacement};

/// Label and annotation keys a team's plugins may add: `<team>.teams.forge.dev/<name>`.
pub fn team_prefix(team: &str) -> String {
    format!("{team}.{TEAM_PREFIX_SUFFIX}")
}

/// The part of [`team_prefix`] after the team name.
pub const TEAM_PREFIX_SUFFIX: &str = "teams.forge.dev/";

/// Ray resource names reserved for the platform.
pub const RESERVED_RAY_RESOURCE_PREFIX: &str = "forge";

/// A team link widened the placement: which field, and why that is not allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Widening {
    /// JSON-path-like field, e.g. `placement.pools[0].labels["sidecar.istio.io/inject"]`.
    pub field: String,
    /// What the link did and what it may do instead.
    pub reason: String,
}

/// The path of pool `i`'s field, with an optional map key.
fn path(i: usize, field: &str, key: Option<&str>) -> String {
    match key {
        Some(k) => format!(
            "placement.pools[{i}].{field}[{}]",
            serde_json::Value::String(k.to_string())
        ),
        None => format!("placement.pools[{i}].{field}"),
    }
}

/// Checks that `after` (a team link's admit) only narrows `before` (what it was given).
/// `before` and `after` have the job's pools in order (the chain checks that first).
pub fn check(
    request: &PolicyRequest,
    before: &Placement,
    after: &Placement,
) -> Result<(), Widening> {
    let team = &request.job.team;
    let prefix = team_prefix(team);
    for (i, (b, a)) in before.pools.iter().zip(&after.pools).enumerate() {
        check_pool(i, b, a, &request.cluster.gpu_node_label, &prefix)?;
    }
    Ok(())
}

fn check_pool(
    i: usize,
    before: &PoolPlacement,
    after: &PoolPlacement,
    gpu_label: &str,
    prefix: &str,
) -> Result<(), Widening> {
    if before.series != after.series {
        return Err(Widening {
            field: path(i, "series", None),
            reason: format!(
                "a team plugin may not choose the series (it was {}, it returned {}); \
                 request one in the job spec, the global chain decides",
                shown(before.series.as_deref()),
                shown(after.series.as_deref())
            ),
        });
    }
    kept(
        i,
        "nodeSelector",
        &before.node_selector,
        &after.node_selector,
    )?;
    for key in added(&before.node_selector, &after.node_selector) {
        if key == gpu_label {
            return Err(Widening {
                field: path(i, "nodeSelector", Some(key)),
                reason: format!(
                    "`{gpu_label}` is the GPU series label: the series decides it, not a \
                     team plugin"
                ),
            });
        }
    }
    kept(
        i,
        "rayResources",
        &before.ray_resources,
        &after.ray_resources,
    )?;
    for key in added(&before.ray_resources, &after.ray_resources) {
        if key.starts_with(RESERVED_RAY_RESOURCE_PREFIX) {
            return Err(Widening {
                field: path(i, "rayResources", Some(key)),
                reason: format!(
                    "Ray resources named `{RESERVED_RAY_RESOURCE_PREFIX}…` belong to the \
                     platform; name team resources otherwise"
                ),
            });
        }
    }
    for (field, b, a) in [
        ("labels", &before.labels, &after.labels),
        ("annotations", &before.annotations, &after.annotations),
    ] {
        kept(i, field, b, a)?;
        if let Some(key) = added(b, a).find(|k| !k.starts_with(prefix)) {
            return Err(Widening {
                field: path(i, field, Some(key)),
                reason: format!(
                    "a team plugin may only add {field} under its team prefix `{prefix}`"
                ),
            });
        }
    }
    Ok(())
}

fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "none".to_string(), |s| format!("`{s}`"))
}

/// Every entry of `before` is in `after`, unchanged.
fn kept<V: PartialEq + Display>(
    i: usize,
    field: &str,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
) -> Result<(), Widening> {
    for (key, value) in before {
        match after.get(key) {
            Some(v) if v == value => {}
            Some(v) => {
                return Err(Widening {
                    field: path(i, field, Some(key)),
                    reason: format!(
                        "a team plugin may not change an entry (`{value}` → `{v}`); it may only add"
                    ),
                });
            }
            None => {
                return Err(Widening {
                    field: path(i, field, Some(key)),
                    reason: "a team plugin may not remove an entry; it may only add".into(),
                });
            }
        }
    }
    Ok(())
}

/// Keys of `after` that `before` does not have.
fn added<'a, V>(
    before: &'a BTreeMap<String, V>,
    after: &'a BTreeMap<String, V>,
) -> impl Iterator<Item = &'a str> {
    after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClusterView, JobView, PoolView, StorageMode};

    fn request() -> PolicyRequest {
        PolicyRequest {
            shares: Default::default(),
            job: JobView {
                id: "j".into(),
                team: "team-a".into(),
                name: "n".into(),
                framework: "nemo-rl".into(),
                priority: 0,
                pools: vec![PoolView {
                    name: "train".into(),
                    nodes: 1,
                    gpus_per_node: 8,
                    series: Some("h100".into()),
                    ..PoolView::default()
                }],
                storage: StorageMode::Shared,
                labels: BTreeMap::new(),
                kind: Default::default(),
            },
            cluster: ClusterView {
                fleets: Vec::new(),
                gpu_node_label: "gpu/series".into(),
                series: Vec::new(),
            },
            usage: Vec::new(),
        }
    }

    fn widened(f: impl FnOnce(&mut PoolPlacement)) -> Result<(), Widening> {
        let req = request();
        let before = Placement::initial(&req.job);
        let mut after = before.clone();
        f(&mut after.pools[0]);
        check(&req, &before, &after)
    }

    #[test]
    fn adding_within_the_rule_is_allowed() {
        assert_eq!(widened(|_| {}), Ok(()));
        assert_eq!(
            widened(|p| {
                p.node_selector.insert("zone".into(), "a".into());
                p.ray_resources.insert("team-a-tokens".into(), 2.0);
                p.labels
                    .insert("team-a.teams.forge.dev/owner".into(), "x".into());
                p.annotations
                    .insert("team-a.teams.forge.dev/note".into(), "y".into());
            }),
            Ok(())
        );
    }

    type Change = Box<dyn FnOnce(&mut PoolPlacement)>;

    #[test]
    fn every_widening_names_its_field() {
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|p| p.series = Some("h200".into())),
                "placement.pools[0].series",
            ),
            (Box::new(|p| p.series = None), "placement.pools[0].series"),
            (
                Box::new(|p| {
                    p.node_selector.insert("gpu/series".into(), "h200".into());
                }),
                r#"placement.pools[0].nodeSelector["gpu/series"]"#,
            ),
            (
                Box::new(|p| {
                    p.ray_resources.insert("forge-series-h200".into(), 1.0);
                }),
                r#"placement.pools[0].rayResources["forge-series-h200"]"#,
            ),
            (
                Box::new(|p| {
                    p.labels
                        .insert("team-b.teams.forge.dev/x".into(), "1".into());
                }),
                r#"placement.pools[0].labels["team-b.teams.forge.dev/x"]"#,
            ),
            (
                Box::new(|p| {
                    p.annotations
                        .insert("sidecar.istio.io/inject".into(), "true".into());
                }),
                r#"placement.pools[0].annotations["sidecar.istio.io/inject"]"#,
            ),
        ];
        for (change, field) in cases {
            let e = widened(change).expect_err(field);
            assert_eq!(e.field, field, "{e}");
            assert!(!e.reason.is_empty());
        }
    }

    #[test]
    fn entries_already_there_may_not_change_or_go() {
        let req = request();
        let mut before = Placement::initial(&req.job);
        before.pools[0]
            .node_selector
            .insert("zone".into(), "a".into());
        before.pools[0]
            .labels
            .insert("team-a.teams.forge.dev/owner".into(), "x".into());
        let mut changed = before.clone();
        changed.pools[0]
            .node_selector
            .insert("zone".into(), "b".into());
        assert_eq!(
            check(&req, &before, &changed).expect_err("changed").field,
            r#"placement.pools[0].nodeSelector["zone"]"#
        );
        let mut removed = before.clone();
        removed.pools[0].labels.clear();
        assert_eq!(
            check(&req, &before, &removed).expect_err("removed").field,
            r#"placement.pools[0].labels["team-a.teams.forge.dev/owner"]"#
        );
    }
}
