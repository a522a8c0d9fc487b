//! Warm instances (`FORGE_POLICY_ISOLATION=warm`) against fresh ones: an instance is
//! reused only within its scope (a team's instances never serve another team, global
//! links never share a team link's instance), retired after its call budget, dropped
//! on any failure and when its chain is replaced; the comparison mode
//! (`FORGE_POLICY_VERIFY`) catches a plugin whose decisions depend on earlier calls.
//! The `stateful` hostile fixture shows which instance served a call: its first call
//! admits, later ones reject naming the team of the first.

use crate::support::{hostile, minimal_request, test_limits, workspace_root};
use forge_policy_host::model::{Decision, PolicyRequest, SeriesCapacity};
use forge_policy_host::{Chain, EngineLimits, Isolation, PolicyEngine, Verify};

/// An engine in `isolation`, comparing one in `verify_every` reused calls (0: none),
/// retiring warm instances after `max_calls`.
fn engine_in(isolation: Isolation, verify_every: u32, max_calls: u32) -> PolicyEngine {
    let limits = EngineLimits {
        isolation,
        verify: Verify {
            every: verify_every,
        },
        warm_max_calls: max_calls,
        ..test_limits()
    };
    PolicyEngine::new(limits, Some(workspace_root().join("target/plugins/cwasm"))).expect("engine")
}

fn request(team: &str) -> PolicyRequest {
    minimal_request(team)
}

/// What each link decided for `team`'s request: `admit`, or the reject's message,
/// or `error:<cause>` for a failed evaluation.
fn links_decide(chain: &Chain, team: &str) -> Vec<String> {
    match chain.evaluate(&request(team)) {
        Ok(out) => out
            .trace
            .iter()
            .map(|t| match &t.decision {
                Some(Decision::Reject { message, .. }) => message.clone(),
                Some(d) => d.kind().to_string(),
                None => "error".to_string(),
            })
            .collect(),
        Err(e) => vec![format!("error:{}", e.source.cause())],
    }
}

#[test]
fn a_team_plugin_instance_never_serves_another_team() {
    for mode in [Isolation::Warm, Isolation::Fresh] {
        let e = engine_in(mode, 0, 1_000);
        // The same plugin with the same settings as the team's link and the global one.
        let chain = Chain::team_then_global(&hostile(&e, "stateful"), &hostile(&e, "stateful"));

        // Team and global links never share an instance.
        assert_eq!(links_decide(&chain, "team-a"), ["admit", "admit"], "{mode}");

        // team-b's team link is not served by team-a's instance. The global link is
        // (warm): global instances serve every team's pass through the global chain.
        let global_seen = match mode {
            Isolation::Warm => "this instance served team team-a before",
            Isolation::Fresh => "admit",
        };
        assert_eq!(
            links_decide(&chain, "team-b"),
            ["admit", global_seen],
            "{mode}"
        );

        // Each team's own instance is reused for that team only.
        for team in ["team-a", "team-b"] {
            let team_link = &links_decide(&chain, team)[0];
            match mode {
                Isolation::Warm => assert_eq!(
                    *team_link,
                    format!("this instance served team {team} before")
                ),
                Isolation::Fresh => assert_eq!(team_link, "admit"),
            }
        }
    }
}

#[test]
fn warm_instances_are_reused_and_dropped_on_failure() {
    let e = engine_in(Isolation::Warm, 0, 1_000);
    let ok = hostile(&e, "ok");
    for _ in 0..3 {
        assert_eq!(links_decide(&ok, "t"), ["admit"]);
        assert_eq!(ok.warm_idle(), [1], "one instance, reused");
    }
    // A trap, and a decision the contract forbids: the instance is not kept.
    for mode in ["trap", "bad-placement"] {
        let failing = hostile(&e, mode);
        assert!(
            links_decide(&failing, "t")[0].starts_with("error:"),
            "{mode}"
        );
        assert_eq!(failing.warm_idle(), [0], "{mode}");
    }

    let e = engine_in(Isolation::Fresh, 0, 1_000);
    let ok = hostile(&e, "ok");
    assert_eq!(links_decide(&ok, "t"), ["admit"]);
    assert_eq!(ok.warm_idle(), [0], "fresh mode keeps nothing");
}

#[test]
fn a_warm_instance_whose_memory_grew_is_dropped() {
    let e = engine_in(Isolation::Warm, 0, 1_000);
    let leaky = hostile(&e, "leak");
    assert_eq!(links_decide(&leaky, "t"), ["admit"]);
    assert_eq!(leaky.warm_idle(), [1], "the first call sets the baseline");
    assert_eq!(links_decide(&leaky, "t"), ["admit"]);
    assert_eq!(
        leaky.warm_idle(),
        [0],
        "grown after its first call: dropped"
    );
    assert_eq!(links_decide(&leaky, "t"), ["admit"]);
    assert_eq!(leaky.warm_idle(), [1], "a new instance");
}

#[test]
fn a_warm_instance_retires_after_its_call_budget() {
    let e = engine_in(Isolation::Warm, 0, 2);
    let chain = hostile(&e, "stateful");
    let seen = "this instance served team t before";
    let decided: Vec<String> = (0..4)
        .map(|_| links_decide(&chain, "t").remove(0))
        .collect();
    assert_eq!(decided, ["admit", seen, "admit", seen]);
}

#[test]
fn a_replaced_chain_keeps_no_warm_instances() {
    let e = engine_in(Isolation::Warm, 0, 1_000);
    let chain = hostile(&e, "ok");
    let composed = Chain::team_then_global(&hostile(&e, "ok"), &chain);
    links_decide(&chain, "t");
    links_decide(&composed, "t");
    assert_eq!(composed.warm_idle(), [1, 1]);
    assert_eq!(
        e.warm_idle(),
        2,
        "the global link's instance served both chains"
    );

    chain.discard_warm();
    assert_eq!(chain.warm_idle(), [0]);
    assert_eq!(
        composed.warm_idle(),
        [1, 0],
        "composed chains share the pools"
    );
    assert_eq!(e.warm_idle(), 1);
    // A discarded chain still decides (an evaluation that was running at the swap),
    // but its instances are not kept.
    assert_eq!(links_decide(&chain, "t"), ["admit"]);
    assert_eq!(chain.warm_idle(), [0]);
}

#[test]
fn verify_mode_catches_a_stateful_plugin_and_fails_closed() {
    let e = engine_in(Isolation::Warm, 1, 1_000);
    let chain = hostile(&e, "stateful");
    assert_eq!(links_decide(&chain, "t"), ["admit"]);
    let err = chain
        .evaluate(&request("t"))
        .expect_err("mismatch fails closed");
    assert_eq!(err.source.cause(), "nondeterministic");
    assert!(
        err.to_string()
            .contains("decided `reject:stateful.seen` in a reused instance but `admit`"),
        "{err}"
    );
    assert_eq!(e.verify_mismatches(), 1);
    assert_eq!(chain.warm_idle(), [0], "the offending instance is dropped");
    assert_eq!(
        links_decide(&chain, "t"),
        ["admit"],
        "a new instance decides"
    );

    // Deterministic plugins (the reference chain, settings cached in the SDK) pass.
    let reference = crate::support::reference_chain(&e);
    let mut req = request("team-a");
    req.cluster.series = vec![SeriesCapacity {
        series: "h200".into(),
        total: 64,
        allocatable: 64,
        free: 64,
        largest_free_block: 8,
        nodes: 8,
        ..SeriesCapacity::default()
    }];
    let first = reference.evaluate(&req).expect("decides");
    assert!(
        matches!(first.decision, Decision::Admit { .. }),
        "{first:?}"
    );
    for _ in 0..5 {
        let again = reference.evaluate(&req).expect("decides");
        assert_eq!(again.decision, first.decision);
    }
    assert_eq!(e.verify_mismatches(), 1);
}
