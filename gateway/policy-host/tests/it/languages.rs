//! One rule, three languages, one host: `scratch-guard` written in Rust
//! (`plugins/scratch-guard`), Python (`plugins/scratch-guard-py`, componentize-py) and
//! TypeScript (`plugins/scratch-guard-ts`, componentize-js), built from source, pass the
//! host's load checks (imports only the contract's interfaces, no WASI), share one engine and
//! one chain, and answer the shared table
//! (`tests/fixtures/plugins/scratch-guard-cases.json`: admit, queue, reject, bad
//! settings, a trap) identically. A restart (a second engine on the same precompile
//! cache) compiles none of them.

use std::sync::Arc;
use std::time::Duration;

use forge_policy_host::model::PolicyRequest;
use forge_policy_host::{
    Chain, ChainLink, LoadError, Plugin, PluginError, PluginLimits, PolicyEngine,
};
use serde_json::Value;

use crate::support::{self as plugins, engine, test_limits, workspace_root};

/// The rule in each language: (plugin directory, name in traces).
const LANGUAGES: [(&str, &str); 3] = [
    ("scratch-guard", "rust"),
    ("scratch-guard-py", "python"),
    ("scratch-guard-ts", "typescript"),
];

/// Interpreter-carrying components need more than the 32 MiB default.
pub fn sdk_limits() -> PluginLimits {
    PluginLimits {
        memory_cap_bytes: 128 << 20,
        deadline: Duration::from_millis(1000),
    }
}

fn cases() -> Value {
    let bytes = plugins::fixture("plugins/scratch-guard-cases.json");
    serde_json::from_slice(&bytes).expect("the shared table is JSON")
}

fn load_all(engine: &PolicyEngine) -> Vec<Arc<Plugin>> {
    LANGUAGES
        .iter()
        .map(|(dir, lang)| {
            Plugin::load_with_limits(engine, lang, "test", &plugins::component(dir), sdk_limits())
                .unwrap_or_else(|e| panic!("{dir} must pass the host's load checks: {e}"))
        })
        .collect()
}

fn request(case: &Value) -> PolicyRequest {
    serde_json::from_value(case["request"].clone()).expect("a host request")
}

#[test]
fn the_same_rule_in_rust_python_and_typescript_decides_alike_in_the_host() {
    let e = engine();
    let table = cases();
    let settings = table["settings"].to_string();
    let all = load_all(&e);
    // Each language's SDK builds against its own contract setting (Rust: the newest,
    // 0.3.0; Python and TypeScript: `plugin-sdk/sdk.toml`); the host runs them side by
    // side either way.
    for p in &all {
        assert!(
            p.world().starts_with("forge:policy/policy@0."),
            "{}: {}",
            p.name(),
            p.world()
        );
    }
    let chain = Chain::new(
        &e,
        all.iter()
            .map(|p| ChainLink {
                plugin: p.clone(),
                settings: settings.clone(),
            })
            .collect(),
    )
    .expect("all three accept the table's settings");

    let decisions = table["decisions"].as_array().expect("decisions");
    assert!(decisions.len() >= 5);
    let mut kinds = std::collections::BTreeSet::new();
    for case in decisions {
        let name = case["name"].as_str().unwrap_or("?");
        let req = request(case);
        for p in &all {
            let d = p
                .evaluate(&settings, &req)
                .unwrap_or_else(|err| panic!("{} on `{name}`: {err}", p.name()));
            let got = serde_json::to_value(&d).expect("decision JSON");
            assert_eq!(got, case["expect"], "{} on `{name}`", p.name());
            kinds.insert(d.kind());
        }
        // One chain of all three: each sees the previous one's placement.
        let out = chain.evaluate(&req).expect("chain");
        assert_eq!(
            serde_json::to_value(&out.decision).expect("JSON"),
            case["expect"],
            "chain on `{name}`"
        );
    }
    assert_eq!(kinds.len(), 3, "the table covers admit, queue and reject");

    for case in table["invalidSettings"]
        .as_array()
        .expect("invalidSettings")
    {
        let bad = case["settings"].to_string();
        for p in &all {
            let message = match p.validate_settings(&bad) {
                Ok(Err(m)) => m,
                other => panic!("{} must refuse {bad}: {other:?}", p.name()),
            };
            match (case["message"].as_str(), case["mentions"].as_str()) {
                (Some(exact), _) => assert_eq!(message, exact, "{} on {bad}", p.name()),
                (None, Some(part)) => {
                    assert!(message.contains(part), "{} on {bad}: {message}", p.name())
                }
                _ => panic!("a case names a message or a setting"),
            }
            let err = Chain::new(
                &e,
                vec![ChainLink {
                    plugin: p.clone(),
                    settings: bad.clone(),
                }],
            )
            .expect_err("a chain with refused settings is never built");
            assert!(
                matches!(&err, LoadError::InvalidSettings { plugin, .. } if plugin == p.name()),
                "{err}"
            );
        }
    }

    for case in table["traps"].as_array().expect("traps") {
        let bad = case["settings"].to_string();
        let req = request(case);
        for p in &all {
            // 0.3.0 hands the settings over in `configure`, which refuses them; older
            // contracts parsed them in `evaluate`, which trapped.
            match p.evaluate(&bad, &req) {
                Err(PluginError::BadOutput(m)) if m.contains("configure refused") => {}
                Err(PluginError::Trap(_)) if !p.world().ends_with("@0.3.0") => {}
                other => panic!("{} must fail closed: {other:?}", p.name()),
            }
        }
    }
    // Each failure was contained: the chain still serves.
    let first = &decisions[0];
    let out = chain.evaluate(&request(first)).expect("chain after traps");
    assert_eq!(
        serde_json::to_value(&out.decision).expect("JSON"),
        first["expect"]
    );
}

#[test]
fn a_cap_below_an_interpreter_heap_stops_the_instance_at_creation() {
    let e = engine();
    // The Rust component's initial memory (its 1 MiB stack and data) fits in 4 MiB;
    // CPython's and SpiderMonkey's pre-initialized heaps do not.
    let small = PluginLimits {
        memory_cap_bytes: 4 << 20,
        ..e.limits().plugin_defaults()
    };
    for (dir, fits) in [
        ("scratch-guard", true),
        ("scratch-guard-py", false),
        ("scratch-guard-ts", false),
    ] {
        let p = Plugin::load_with_limits(&e, dir, "x", &plugins::component(dir), small)
            .expect("loads: the cap applies when an instance is created");
        match (p.validate_settings("{}"), fits) {
            (Ok(Ok(())), true) => {}
            (Err(PluginError::Memory { cap_bytes }), false) => assert_eq!(cap_bytes, 4 << 20),
            (other, _) => panic!("{dir} under a 4 MiB cap: {other:?}"),
        }
    }
}

#[test]
fn a_restart_compiles_none_of_the_large_components() {
    let cache = workspace_root().join("target/plugins/cwasm");
    let first = PolicyEngine::new(test_limits(), Some(cache.clone())).expect("engine");
    load_all(&first);
    let restarted = PolicyEngine::new(test_limits(), Some(cache)).expect("engine");
    load_all(&restarted);
    assert_eq!(restarted.compilations(), 0);
}
