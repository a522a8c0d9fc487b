//! Contract versions side by side: components built from the frozen
//! `wit/policy@0.1.0` and `wit/policy@0.2.0` (the `legacy-guard` and `toleration-guard`
//! fixtures, bindings generated straight from the WIT) in one chain with the 0.3.0
//! reference policies — admit, queue and reject across versions, the 0.1.0 view of the
//! new fields (taint-blocked GPUs are `blocked`), the newer placement fields
//! (tolerations, fleets) carried through older links unchanged — and the rule that a
//! team's links may only narrow tolerations (affinity narrowing is unit-tested in the
//! host's `narrowing_scheduling`). 0.3.0's own semantics are in `contract_0_3_0`.

use crate::support::{POOL_SERIES, engine, load};
use forge_policy_host::model::{
    ClusterView, Decision, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesTaint,
    StorageMode, Taint, TaintEffect, TolerationOperator,
};
use forge_policy_host::{Chain, ChainLink, PluginError, PolicyEngine};

const TOLERATE_GPU: &str = r#"{"tolerate": "nvidia.com/gpu", "max_gpus": 64}"#;

fn request(gpus: u32, labels: &[(&str, &str)]) -> PolicyRequest {
    PolicyRequest {
        shares: Default::default(),
        job: JobView {
            id: "j-1".into(),
            team: "team-a".into(),
            name: "train".into(),
            framework: "nemo-rl".into(),
            kind: Default::default(),
            priority: 0,
            pools: vec![PoolView {
                name: "train".into(),
                nodes: 1,
                gpus_per_node: gpus,
                ..PoolView::default()
            }],
            storage: StorageMode::Shared,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        cluster: ClusterView {
            fleets: Vec::new(),
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![SeriesCapacity {
                series: "h100".into(),
                total: 32,
                allocatable: 16,
                free: 16,
                largest_free_block: 8,
                nodes: 4,
                blocked: 0,
                tainted: 16,
                taints: vec![SeriesTaint {
                    taint: Taint {
                        key: "nvidia.com/gpu".into(),
                        value: Some("present".into()),
                        effect: TaintEffect::NoSchedule,
                    },
                    nodes: 2,
                }],
                ..SeriesCapacity::default()
            }],
        },
        usage: Vec::new(),
    }
}

fn link(e: &PolicyEngine, name: &str, settings: &str) -> ChainLink {
    ChainLink {
        plugin: load(e, name),
        settings: settings.into(),
    }
}

fn mixed(e: &PolicyEngine) -> Chain {
    Chain::new(
        e,
        vec![
            link(e, "toleration-guard", TOLERATE_GPU),
            link(
                e,
                "legacy-guard",
                r#"{"max_gpus": 8, "hold_label": "hold"}"#,
            ),
            link(e, "team-quota", r#"{"default": {"*": 64}}"#),
        ],
    )
    .expect("a chain mixing 0.1.0, 0.2.0 and 0.3.0 components")
}

#[test]
fn each_component_runs_against_the_contract_it_was_built_for() {
    let e = engine();
    assert_eq!(
        load(&e, "legacy-guard").world(),
        "forge:policy/policy@0.1.0"
    );
    assert_eq!(
        load(&e, "toleration-guard").world(),
        "forge:policy/policy@0.2.0"
    );
    assert_eq!(load(&e, "pool-series").world(), "forge:policy/policy@0.3.0");
}

#[test]
fn a_mixed_chain_admits_and_carries_the_new_fields_through_a_0_1_0_link() {
    let e = engine();
    let out = mixed(&e).evaluate(&request(8, &[])).expect("evaluates");
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    let pool = &placement.pools[0];
    assert_eq!(pool.labels["team-a.teams.forge.dev/v2-seen"], "v0-2-0");
    // Set by the 0.2.0 link, kept through the 0.1.0 link that cannot see it and the
    // 0.3.0 link that admits without copying the placement back.
    assert_eq!(pool.tolerations.len(), 1, "{pool:?}");
    assert_eq!(pool.tolerations[0].key.as_deref(), Some("nvidia.com/gpu"));
    assert_eq!(pool.tolerations[0].operator, TolerationOperator::Exists);
    // What the 0.1.0 link did, and what it saw: taint-blocked GPUs as `blocked`.
    assert_eq!(pool.labels["team-a.teams.forge.dev/legacy-seen"], "v0-1-0");
    assert_eq!(
        pool.annotations["team-a.teams.forge.dev/legacy-blocked"],
        "16"
    );
    let outcomes: Vec<_> = out.trace.iter().map(|t| t.outcome).collect();
    assert_eq!(outcomes, ["admit", "admit", "admit"]);
}

#[test]
fn a_mixed_chain_queues_and_rejects_through_either_version() {
    let e = engine();
    let chain = mixed(&e);
    let out = chain
        .evaluate(&request(8, &[("hold", "yes")]))
        .expect("evaluates");
    assert!(
        matches!(&out.decision, Decision::Queue { code, .. } if code == "legacy.hold"),
        "{:?}",
        out.decision
    );
    assert_eq!(out.trace.len(), 3, "a hold lets later links run");

    let out = chain.evaluate(&request(16, &[])).expect("evaluates");
    assert!(
        matches!(&out.decision, Decision::Reject { code, field, .. }
            if code == "legacy.too-big" && field.as_deref() == Some("pools")),
        "{:?}",
        out.decision
    );
    assert_eq!(out.trace.len(), 2, "a reject ends the chain");

    // A 0.3.0 link rejecting after the 0.1.0 one.
    let strict = Chain::new(
        &e,
        vec![
            link(&e, "legacy-guard", r#"{"max_gpus": 64}"#),
            link(&e, "pool-series", POOL_SERIES),
        ],
    )
    .expect("chain");
    let mut req = request(8, &[]);
    req.job.pools[0].series = Some("b200".into());
    let out = strict.evaluate(&req).expect("evaluates");
    assert!(
        matches!(&out.decision, Decision::Reject { code, .. } if code == "series.not-allowed"),
        "{:?}",
        out.decision
    );
}

#[test]
fn a_team_link_may_narrow_but_never_add_tolerations_or_loosen_affinity() {
    let e = engine();
    let global = Chain::new(&e, vec![link(&e, "toleration-guard", TOLERATE_GPU)]).expect("global");

    // The same plugin, as a team link, adds a toleration: the admission fails closed.
    let team = Chain::new(&e, vec![link(&e, "toleration-guard", TOLERATE_GPU)]).expect("team");
    let chain = Chain::team_then_global(&team, &global);
    assert_eq!(chain.team_links(), 1);
    let err = chain
        .evaluate(&request(8, &[]))
        .expect_err("widening fails closed");
    assert_eq!(err.plugin, "toleration-guard");
    assert!(
        matches!(&err.source, PluginError::Widened(w)
            if w.field == "placement.pools[0].tolerations"),
        "{err}"
    );
    assert_eq!(err.source.cause(), "widened");

    // A team link that only labels (0.1.0, carrying the fields forward) is fine, and the
    // global chain after it may add the toleration.
    let team = Chain::new(&e, vec![link(&e, "legacy-guard", r#"{"max_gpus": 64}"#)]).expect("team");
    let out = Chain::team_then_global(&team, &global)
        .evaluate(&request(8, &[]))
        .expect("narrowing team link");
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].tolerations.len(), 1);
}

#[test]
fn fleets_a_0_3_0_link_pins_are_carried_through_0_1_0_and_0_2_0_links() {
    let e = engine();
    let chain = Chain::new(
        &e,
        vec![
            link(
                &e,
                "hostile",
                r#"{"mode": "shape", "shape": {"fleets": ["default"]}}"#,
            ),
            link(&e, "toleration-guard", TOLERATE_GPU),
            link(&e, "legacy-guard", r#"{"max_gpus": 64}"#),
        ],
    )
    .expect("chain");
    let out = chain.evaluate(&request(8, &[])).expect("evaluates");
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].fleets, ["default"]);
    assert_eq!(placement.pools[0].tolerations.len(), 1);
}
