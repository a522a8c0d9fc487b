//! Sandbox tests with purpose-built hostile plugins: each misbehaviour is stopped with
//! a typed error, and afterwards the same host serves the next call normally.

use std::time::{Duration, Instant};

use crate::support::{self as plugins, engine, hostile, load};
use forge_policy_host::model::{Decision, PolicyRequest};
use forge_policy_host::{
    Chain, ChainLink, EngineLimits, LoadError, Plugin, PluginError, PluginLimits, PolicyEngine,
};

fn request() -> PolicyRequest {
    plugins::minimal_request("t")
}

/// After any failure, a well-behaved call on the same engine still works.
fn assert_host_still_serves(engine: &PolicyEngine) {
    let out = hostile(engine, "ok").evaluate(&request()).expect("ok mode");
    assert!(matches!(out.decision, Decision::Admit { .. }));
    let out = plugins::reference_chain(engine).evaluate(&request());
    // No series in the snapshot: pool-series rejects — a normal decision, not a failure.
    assert!(matches!(
        out.expect("reference chain").decision,
        Decision::Reject { .. }
    ));
}

#[test]
fn infinite_loop_is_stopped_at_the_deadline() {
    let e = PolicyEngine::new(
        EngineLimits {
            deadline: Duration::from_millis(100),
            ..plugins::test_limits()
        },
        None,
    )
    .unwrap();
    let chain = hostile(&e, "loop");
    let started = Instant::now();
    let err = chain.evaluate(&request()).expect_err("must not return");
    let took = started.elapsed();
    assert_eq!(err.source, PluginError::Deadline { deadline_ms: 100 });
    assert_eq!(err.plugin, "hostile");
    assert!(
        took >= Duration::from_millis(100),
        "stopped too early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "stopped too late: {took:?}");
    assert_host_still_serves(&e);
}

#[test]
fn allocation_bomb_is_stopped_at_the_memory_cap() {
    let e = engine();
    let err = hostile(&e, "alloc")
        .evaluate(&request())
        .expect_err("must not return");
    assert_eq!(
        err.source,
        PluginError::Memory {
            cap_bytes: 32 << 20
        }
    );
    assert_eq!(err.source.cause(), "memory");
    assert_host_still_serves(&e);
}

#[test]
fn trap_fails_closed() {
    let e = engine();
    let err = hostile(&e, "trap")
        .evaluate(&request())
        .expect_err("must not return");
    assert!(matches!(err.source, PluginError::Trap(_)), "{err}");
    assert_host_still_serves(&e);
}

#[test]
fn malformed_decisions_fail_closed() {
    let e = engine();
    let err = hostile(&e, "bad-placement")
        .evaluate(&request())
        .expect_err("bad placement");
    assert!(
        matches!(&err.source, PluginError::BadOutput(m) if m.contains("0 pools")),
        "{err}"
    );
    let err = hostile(&e, "bad-code")
        .evaluate(&request())
        .expect_err("bad code");
    assert!(
        matches!(&err.source, PluginError::BadOutput(m) if m.contains("Not A Code!")),
        "{err}"
    );
    assert_host_still_serves(&e);
}

#[test]
fn log_flood_is_capped_and_the_call_completes() {
    let e = engine();
    // 10 000 lines of 4 KiB, each formatted in the guest: the longest deadline a
    // plugin may have (1 s), as the call took 220 ms in a loaded CI run, past the
    // default 200 ms.
    let patient = PluginLimits {
        deadline: Duration::from_millis(1_000),
        ..e.limits().plugin_defaults()
    };
    let out = hostile_with(&e, "log-flood", patient)
        .evaluate(&request())
        .expect("admits after logging");
    assert!(matches!(out.decision, Decision::Admit { .. }));
}

#[test]
fn wasi_import_is_rejected_at_load() {
    let e = engine();
    let bytes = plugins::wat_fixture("plugins/imports-wasi.wat");
    let err = Plugin::load(&e, "wasi", &bytes).expect_err("must refuse WASI");
    match err {
        LoadError::ForbiddenImport(name) => assert_eq!(name, "wasi:cli/environment@0.2.0"),
        other => panic!("expected ForbiddenImport, got {other}"),
    }
    assert_host_still_serves(&e);
}

#[test]
fn component_of_another_world_is_rejected_at_load() {
    let e = engine();
    // Without `validate-settings`: refused by its exports, before compiling.
    let bytes = plugins::wat_fixture("plugins/other-world.wat");
    let compiled = e.compilations();
    let err = Plugin::load(&e, "other", &bytes).expect_err("must refuse another world");
    assert!(
        matches!(&err, LoadError::MissingExports(m) if m == "validate-settings"),
        "{err}"
    );
    assert_eq!(e.compilations(), compiled, "refused before compiling");

    // Both names exported, with other types: refused by the type check of every
    // supported version.
    let both = wat::parse_str(
        r#"(component
            (core module $m (func (export "run") (result i32) i32.const 7))
            (core instance $i (instantiate $m))
            (func $run (result u32) (canon lift (core func $i "run")))
            (export "evaluate" (func $run))
            (export "validate-settings" (func $run)))"#,
    )
    .expect("wat");
    let err = Plugin::load(&e, "other", &both).expect_err("must refuse another world");
    match &err {
        LoadError::WrongWorld { supported, detail } => {
            assert_eq!(
                *supported,
                "forge:policy/policy@0.3.0, forge:policy/policy@0.2.0, forge:policy/policy@0.1.0"
            );
            assert!(
                detail.contains("as 0.2.0") && detail.contains("as 0.1.0"),
                "both versions were tried: {detail}"
            );
        }
        other => panic!("expected WrongWorld, got {other}"),
    }
    assert_host_still_serves(&e);
}

#[test]
fn core_module_and_garbage_are_not_components() {
    let e = engine();
    let core = plugins::wat_fixture("plugins/core-module.wat");
    assert!(matches!(
        Plugin::load(&e, "core", &core),
        Err(LoadError::NotAComponent(_))
    ));
    assert!(matches!(
        Plugin::load(&e, "junk", b"definitely not wasm"),
        Err(LoadError::NotAComponent(_))
    ));
}

#[test]
fn oversized_component_is_refused_before_compiling() {
    let e = PolicyEngine::new(
        EngineLimits {
            max_component_bytes: 1024,
            ..plugins::test_limits()
        },
        None,
    )
    .unwrap();
    let err = Plugin::load(&e, "rwo-guard", &plugins::component("rwo-guard")).expect_err("too big");
    assert!(err.to_string().contains("the limit is 1024"), "{err}");
}

/// The hostile plugin loaded with its own limits.
fn hostile_with(engine: &PolicyEngine, mode: &str, limits: PluginLimits) -> Chain {
    let plugin = Plugin::load_with_limits(
        engine,
        "hostile",
        "limited",
        &plugins::component("hostile"),
        limits,
    )
    .expect("load with limits");
    assert_eq!(plugin.limits(), limits);
    Chain::new(
        engine,
        vec![ChainLink {
            plugin,
            settings: format!(r#"{{"mode": "{mode}"}}"#),
        }],
    )
    .expect("hostile chain")
}

#[test]
fn each_plugin_runs_under_its_own_memory_cap_and_deadline() {
    let e = engine();
    let defaults = e.limits().plugin_defaults();
    // A larger cap than the engine default: the bomb is stopped at the plugin's cap.
    // Its deadline is the longest a plugin may have (1 s), so the cap, not the clock,
    // stops it on a loaded machine (growing to 96 MiB once took longer than the
    // default 200 ms in CI).
    let big = PluginLimits {
        memory_cap_bytes: 96 << 20,
        deadline: Duration::from_millis(1_000),
    };
    let err = hostile_with(&e, "alloc", big)
        .evaluate(&request())
        .expect_err("must not return");
    assert_eq!(
        err.source,
        PluginError::Memory {
            cap_bytes: 96 << 20
        }
    );
    // A shorter deadline than the engine default.
    let short = PluginLimits {
        deadline: Duration::from_millis(20),
        ..defaults
    };
    let err = hostile_with(&e, "loop", short)
        .evaluate(&request())
        .expect_err("must not return");
    assert_eq!(err.source, PluginError::Deadline { deadline_ms: 20 });
    // In one chain (one store), each link keeps its own cap: a default-limited plugin
    // after a large-capped one is still stopped at the default.
    let chain = Chain::new(
        &e,
        vec![
            hostile_with(&e, "ok", big).links()[0].clone(),
            hostile(&e, "alloc").links()[0].clone(),
        ],
    )
    .expect("chain");
    let err = chain.evaluate(&request()).expect_err("bomb in link 2");
    assert_eq!(
        err.source,
        PluginError::Memory {
            cap_bytes: defaults.memory_cap_bytes
        }
    );
    assert_host_still_serves(&e);
}

#[test]
fn plugin_limits_above_the_maxima_are_refused_at_load() {
    let e = engine();
    let max = e.limits().clone();
    let bytes = plugins::component("hostile");
    for limits in [
        PluginLimits {
            memory_cap_bytes: max.max_memory_cap_bytes + 1,
            deadline: max.deadline,
        },
        PluginLimits {
            memory_cap_bytes: max.memory_cap_bytes,
            deadline: max.max_deadline + Duration::from_millis(1),
        },
        PluginLimits {
            memory_cap_bytes: max.memory_cap_bytes,
            deadline: Duration::ZERO,
        },
    ] {
        let err = Plugin::load_with_limits(&e, "hostile", "x", &bytes, limits)
            .expect_err("above the maxima");
        assert!(matches!(err, LoadError::Limits(_)), "{err}");
    }
}

#[test]
fn a_single_plugin_call_checks_its_decision_like_a_chain() {
    let e = engine();
    let ok = load(&e, "hostile");
    let d = ok.evaluate(r#"{"mode": "ok"}"#, &request()).expect("ok");
    assert!(matches!(d, Decision::Admit { .. }));
    let err = ok
        .evaluate(r#"{"mode": "bad-placement"}"#, &request())
        .expect_err("bad placement");
    assert!(matches!(err, PluginError::BadOutput(_)), "{err}");
    let err = ok
        .evaluate(r#"{"mode": "trap"}"#, &request())
        .expect_err("trap");
    assert!(matches!(err, PluginError::Trap(_)), "{err}");
}
/// A chain whose first link is the team's `hostile` in `shape` mode with `shape`,
/// followed by a global chain of one `hostile` in `ok` mode.
fn team_shaping(engine: &PolicyEngine, shape: &str) -> Chain {
    let team = Chain::new(
        engine,
        vec![ChainLink {
            plugin: load(engine, "hostile"),
            settings: format!(r#"{{"mode": "shape", "shape": {shape}}}"#),
        }],
    )
    .expect("team chain");
    let global = hostile(engine, "ok");
    Chain::team_then_global(&team, &global)
}

#[test]
fn a_team_link_may_narrow_but_never_widen_the_placement() {
    let e = engine();
    // Within the rule (`t` is the request's team): an extra node-selector term, a team
    // resource, labels and annotations under the team prefix.
    let ok = team_shaping(
        &e,
        r#"{"nodeSelector": {"zone": "a"}, "rayResources": {"t-tokens": 1.0},
            "labels": {"t.teams.forge.dev/owner": "x"},
            "annotations": {"t.teams.forge.dev/note": "y"}}"#,
    );
    assert_eq!(ok.team_links(), 1);
    let out = ok.evaluate(&request()).expect("narrowing is allowed");
    let Decision::Admit { placement, .. } = out.decision else {
        panic!("admitted: {:?}", out.decision);
    };
    assert_eq!(placement.pools[0].node_selector["zone"], "a");

    for (shape, field) in [
        (
            r#"{"annotations": {"sidecar.istio.io/inject": "true"}}"#,
            r#"placement.pools[0].annotations["sidecar.istio.io/inject"]"#,
        ),
        (
            r#"{"labels": {"other.teams.forge.dev/x": "1"}}"#,
            r#"placement.pools[0].labels["other.teams.forge.dev/x"]"#,
        ),
        (r#"{"series": "h200"}"#, "placement.pools[0].series"),
        (
            r#"{"nodeSelector": {"starforge/gpu-series": "h200"}}"#,
            r#"placement.pools[0].nodeSelector["starforge/gpu-series"]"#,
        ),
        (
            r#"{"rayResources": {"forge-series-h200": 8.0}}"#,
            r#"placement.pools[0].rayResources["forge-series-h200"]"#,
        ),
    ] {
        let err = team_shaping(&e, shape)
            .evaluate(&request())
            .expect_err("a widening fails closed");
        assert_eq!(err.plugin, "hostile");
        assert_eq!(err.source.cause(), "widened");
        assert_eq!(err.source.field(), Some(field), "{err}");
    }

    // The same plugin as a *global* link is not restricted.
    let global_only = Chain::new(
        &e,
        vec![ChainLink {
            plugin: load(&e, "hostile"),
            settings: r#"{"mode": "shape", "shape": {"annotations": {"sidecar.istio.io/inject": "false"}}}"#.into(),
        }],
    )
    .expect("global chain");
    assert_eq!(global_only.team_links(), 0);
    assert!(global_only.evaluate(&request()).is_ok());
    assert_host_still_serves(&e);
}
