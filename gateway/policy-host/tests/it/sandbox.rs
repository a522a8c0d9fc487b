//! Sandbox tests with purpose-built hostile plugins: each misbehaviour is stopped with
//! a typed error, and afterwards the same host serves the next call normally.

use std::time::{Duration, Instant};

use crate::support::{self as plugins, engine, load};
use forge_policy_host::model::{
    ClusterView, Decision, JobView, PolicyRequest, PoolView, StorageMode,
};
use forge_policy_host::{
    Chain, ChainLink, EngineLimits, LoadError, Plugin, PluginError, PolicyEngine,
};

fn request() -> PolicyRequest {
    PolicyRequest {
        job: JobView {
            id: "j".into(),
            team: "t".into(),
            name: "n".into(),
            framework: "nemo-rl".into(),
            kind: Default::default(),
            priority: 0,
            pools: vec![PoolView {
                name: "train".into(),
                nodes: 1,
                gpus_per_node: 8,
                ..PoolView::default()
            }],
            storage: StorageMode::Shared,
            labels: Default::default(),
        },
        cluster: ClusterView {
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![],
        },
        usage: vec![],
    }
}

fn hostile(engine: &PolicyEngine, mode: &str) -> Chain {
    Chain::new(
        engine,
        vec![ChainLink {
            plugin: load(engine, "hostile"),
            settings: format!(r#"{{"mode": "{mode}"}}"#),
        }],
    )
    .expect("hostile chain")
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
            ..EngineLimits::default()
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
    let out = hostile(&e, "log-flood")
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
    let bytes = plugins::wat_fixture("plugins/other-world.wat");
    let err = Plugin::load(&e, "other", &bytes).expect_err("must refuse another world");
    match &err {
        LoadError::WrongWorld { supported, detail } => {
            assert_eq!(
                *supported,
                "forge:policy/policy@0.2.0, forge:policy/policy@0.1.0"
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
            ..EngineLimits::default()
        },
        None,
    )
    .unwrap();
    let err = Plugin::load(&e, "rwo-guard", &plugins::component("rwo-guard")).expect_err("too big");
    assert!(err.to_string().contains("the limit is 1024"), "{err}");
}
