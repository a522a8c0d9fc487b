//! What contract 0.3.0 adds, in the real host with components built from source: the
//! admission's terms across a chain (the lowest priority cap applies, any global
//! "not preemptible" wins, a team link may cap but not protect its jobs), fleets a
//! placement may name (only existing ones; a team link only narrows them), and the
//! chain's say on a planned preemption (accept, reorder, veto; a team only vetoes, and
//! only about its own jobs; a malformed reorder fails closed; older links accept), and
//! the teams' shares (every team's for a global link, its own for a team link).

use std::sync::Arc;

use forge_policy_host::model::{
    Decision, FleetView, JobView, PolicyRequest, Shares, StorageMode, TeamShare,
};
use forge_policy_host::preemption::{PlanOutcome, PreemptionPlan, Victim};
use forge_policy_host::{Chain, ChainLink, PluginError, PolicyEngine};

use crate::support::{engine, load, minimal_request};

fn hostile(e: &PolicyEngine, settings: &str) -> ChainLink {
    ChainLink {
        plugin: load(e, "hostile"),
        settings: settings.into(),
    }
}

fn chain(e: &PolicyEngine, links: Vec<ChainLink>) -> Chain {
    Chain::new(e, links).expect("chain")
}

fn terms(out: &Decision) -> (Option<i32>, Option<bool>) {
    match out {
        Decision::Admit {
            priority_cap,
            preemptible,
            ..
        } => (*priority_cap, *preemptible),
        other => panic!("expected admit, got {other:?}"),
    }
}

fn request() -> PolicyRequest {
    let mut r = minimal_request("team-a");
    r.job.priority = 90;
    r
}

#[test]
fn the_lowest_priority_cap_applies_and_not_preemptible_wins() {
    let e = engine();
    let two_caps = chain(
        &e,
        vec![
            hostile(&e, r#"{"mode": "ok", "priority_cap": 50}"#),
            hostile(
                &e,
                r#"{"mode": "ok", "priority_cap": 30, "preemptible": true}"#,
            ),
            // A plugin that says nothing about terms leaves them as they are.
            hostile(&e, r#"{"mode": "ok"}"#),
        ],
    );
    let out = two_caps.evaluate(&request()).expect("evaluates");
    assert_eq!(terms(&out.decision), (Some(30), Some(true)));

    let protected = chain(
        &e,
        vec![
            hostile(&e, r#"{"mode": "ok", "preemptible": false}"#),
            hostile(&e, r#"{"mode": "ok", "preemptible": true}"#),
        ],
    );
    let out = protected.evaluate(&request()).expect("evaluates");
    assert_eq!(terms(&out.decision), (None, Some(false)));

    // Older contracts add no terms.
    let old = chain(
        &e,
        vec![ChainLink {
            plugin: load(&e, "legacy-guard"),
            settings: r#"{"max_gpus": 64}"#.into(),
        }],
    );
    let out = old.evaluate(&request()).expect("evaluates");
    assert_eq!(terms(&out.decision), (None, None));
}

#[test]
fn a_team_link_may_cap_its_jobs_but_not_protect_them() {
    let e = engine();
    let global = chain(
        &e,
        vec![hostile(&e, r#"{"mode": "ok", "priority_cap": 60}"#)],
    );
    let capping = chain(
        &e,
        vec![hostile(&e, r#"{"mode": "ok", "priority_cap": 20}"#)],
    );
    let out = Chain::team_then_global(&capping, &global)
        .evaluate(&request())
        .expect("a cap is narrowing");
    assert_eq!(terms(&out.decision).0, Some(20));

    let protecting = chain(
        &e,
        vec![hostile(&e, r#"{"mode": "ok", "preemptible": false}"#)],
    );
    let err = Chain::team_then_global(&protecting, &global)
        .evaluate(&request())
        .expect_err("a team may not make its jobs non-preemptible");
    assert!(
        matches!(&err.source, PluginError::Widened(w) if w.field == "admission.preemptible"),
        "{err}"
    );
}

#[test]
fn fleets_must_exist_and_a_team_link_only_narrows_them() {
    let e = engine();
    let unknown = chain(
        &e,
        vec![hostile(
            &e,
            r#"{"mode": "shape", "shape": {"fleets": ["eu-west"]}}"#,
        )],
    );
    let err = unknown.evaluate(&request()).expect_err("no such fleet");
    assert!(
        matches!(&err.source, PluginError::BadOutput(m) if m.contains("`eu-west`")),
        "{err}"
    );

    let pin = r#"{"mode": "shape", "shape": {"fleets": ["default"]}}"#;
    let team = chain(&e, vec![hostile(&e, pin)]);
    let global = chain(&e, vec![hostile(&e, r#"{"mode": "ok"}"#)]);
    let out = Chain::team_then_global(&team, &global)
        .evaluate(&request())
        .expect("pinning from any fleet narrows");
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].fleets, ["default"]);
}

#[test]
fn the_fleets_a_placement_may_name_are_the_requests() {
    let e = engine();
    let mut req = request();
    req.cluster.fleets = vec![FleetView {
        name: "eu-west".into(),
        labels: [("region".to_string(), "eu".to_string())].into(),
        available: true,
        series: req.cluster.series.clone(),
    }];
    let pin = |fleet: &str| {
        let settings = format!(r#"{{"mode": "shape", "shape": {{"fleets": ["{fleet}"]}}}}"#);
        chain(&e, vec![hostile(&e, &settings)])
    };
    let out = pin("eu-west")
        .evaluate(&req)
        .expect("eu-west is this gateway's fleet");
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].fleets, ["eu-west"]);
    let err = pin("default")
        .evaluate(&req)
        .expect_err("a gateway whose fleet has a name has no `default`");
    assert!(
        matches!(&err.source, PluginError::BadOutput(m)
            if m.contains("`default`") && m.contains("this gateway's: `eu-west`")),
        "{err}"
    );
}

fn victim(id: &str, team: &str, lost: f64) -> Victim {
    Victim {
        job_id: id.into(),
        team: team.into(),
        priority: 0,
        gpus: 8,
        series: "h100".into(),
        fleet: "default".into(),
        running_seconds: 3_600,
        checkpoint_age_seconds: Some(600),
        checkpoint_step: Some(42),
        lost_gpu_seconds: lost,
        grace_seconds: 60,
        preemptions_in_window: 0,
    }
}

fn plan() -> PreemptionPlan {
    PreemptionPlan {
        preemptor: JobView {
            id: "urgent".into(),
            team: "team-a".into(),
            name: "urgent".into(),
            framework: "ray".into(),
            kind: Default::default(),
            priority: 100,
            pools: Vec::new(),
            storage: StorageMode::Shared,
            labels: Default::default(),
        },
        series: "h100".into(),
        gpus_needed: 8,
        candidates: vec![
            victim("fresh", "team-b", 480.0),
            victim("stale", "team-c", 5_280.0),
        ],
    }
}

#[test]
fn global_links_accept_reorder_or_veto_a_preemption() {
    let e = engine();
    let p = plan();
    let reversing = chain(
        &e,
        vec![
            hostile(&e, r#"{"mode": "ok", "plan": "reverse"}"#),
            // 0.1.0 has no plan-preemption: it accepts.
            ChainLink {
                plugin: load(&e, "legacy-guard"),
                settings: r#"{"max_gpus": 64}"#.into(),
            },
            hostile(&e, r#"{"mode": "ok"}"#),
        ],
    );
    assert_eq!(
        reversing.plan_preemption(&p, None).expect("plans"),
        PlanOutcome::Proceed {
            order: vec!["stale".into(), "fresh".into()]
        }
    );

    let vetoing = chain(
        &e,
        vec![
            hostile(&e, r#"{"mode": "ok", "plan": "veto"}"#),
            hostile(&e, r#"{"mode": "ok", "plan": "reverse"}"#),
        ],
    );
    match vetoing.plan_preemption(&p, None).expect("plans") {
        PlanOutcome::Vetoed { code, message, .. } => {
            assert_eq!(code, "hostile.veto");
            assert!(message.contains("urgent"), "{message}");
        }
        other => panic!("expected a veto, got {other:?}"),
    }

    let malformed = chain(
        &e,
        vec![hostile(&e, r#"{"mode": "ok", "plan": "drop-one"}"#)],
    );
    let err = malformed
        .plan_preemption(&p, None)
        .expect_err("a reorder that drops a candidate fails closed");
    assert!(matches!(err.source, PluginError::BadOutput(_)), "{err}");
}

#[test]
fn a_team_only_vetoes_and_only_about_its_own_jobs() {
    let e = engine();
    let p = plan();
    let veto = chain(&e, vec![hostile(&e, r#"{"mode": "ok", "plan": "veto"}"#)]);
    assert!(matches!(
        veto.plan_preemption(&p, Some("team-b")).expect("plans"),
        PlanOutcome::Vetoed { .. }
    ));
    // Not asked about a plan with none of its jobs.
    assert_eq!(
        veto.plan_preemption(&p, Some("team-z")).expect("plans"),
        PlanOutcome::Proceed { order: p.order() }
    );
    let reorder = chain(
        &e,
        vec![hostile(&e, r#"{"mode": "ok", "plan": "reverse"}"#)],
    );
    let err = reorder
        .plan_preemption(&p, Some("team-c"))
        .expect_err("a team may not reorder");
    assert!(err.to_string().contains("only accept or veto"), "{err}");
}

fn share(team: &str, share: f64) -> TeamShare {
    TeamShare {
        team: team.into(),
        series: "h100".into(),
        decayed_gpu_seconds: 3600.0,
        allocated_gpus: 8,
        weight: 1.0,
        share,
        fair_share: 0.5,
    }
}

/// The hold message of the `shares` mode: the shares the link was shown.
fn shown(out: &Decision) -> String {
    match out {
        Decision::Queue { code, message } if code == "shares.seen" => message.clone(),
        other => panic!("expected the shares hold, got {other:?}"),
    }
}

#[test]
fn shares_are_every_teams_for_a_global_link_and_its_own_for_a_team_link() {
    let e = engine();
    let mut r = request();
    r.shares = Shares(Arc::new(vec![share("team-a", 0.25), share("team-b", 0.75)]));
    let reader = chain(&e, vec![hostile(&e, r#"{"mode": "shares"}"#)]);
    let out = reader.evaluate(&r).expect("evaluates");
    assert!(out.reads_shares, "the chain read them");
    assert_eq!(
        shown(&out.decision),
        "team-a/h100 share=0.25 fair=0.50 held=8 weight=1; \
         team-b/h100 share=0.75 fair=0.50 held=8 weight=1"
    );
    // A team's link sees only its own team's standing.
    let global = chain(&e, vec![hostile(&e, r#"{"mode": "ok"}"#)]);
    let out = Chain::team_then_global(&reader, &global)
        .evaluate(&r)
        .expect("evaluates");
    assert_eq!(
        shown(&out.decision),
        "team-a/h100 share=0.25 fair=0.50 held=8 weight=1"
    );
    // A chain that never asks does not depend on them.
    let out = global.evaluate(&r).expect("evaluates");
    assert!(!out.reads_shares);
}
