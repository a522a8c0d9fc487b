//! Shared helpers of the policy host's tests and benchmark. Build the reference and
//! fixture plugins from source (once per test process; cargo's
//! own lock serializes concurrent processes) and load them into the real policy host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use forge_policy_host::model::{ClusterView, JobView, PolicyRequest, PoolView, StorageMode};
use forge_policy_host::{Chain, ChainLink, EngineLimits, Isolation, Plugin, PolicyEngine};

/// The workspace root (this crate lives at `gateway/policy-host`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the policy host crate lives two levels below the workspace root")
        .to_path_buf()
}

/// Build (if needed) and return the component bytes of plugin `name`.
pub fn component(name: &str) -> Vec<u8> {
    forge_plugin_build::workspace_component(&workspace_root(), name)
        .unwrap_or_else(|e| panic!("building plugin {name}: {e}"))
}

/// Bytes of a fixture file under `tests/fixtures/`.
pub fn fixture(rel: &str) -> Vec<u8> {
    let path = workspace_root().join("tests/fixtures").join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The isolation mode the tests run in: `FORGE_POLICY_ISOLATION` (`warm`, the
/// default, or `fresh`), so CI runs this binary in both modes.
pub fn isolation() -> Isolation {
    match std::env::var("FORGE_POLICY_ISOLATION") {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("FORGE_POLICY_ISOLATION: {e}")),
        Err(_) => Isolation::default(),
    }
}

/// Limits used by the tests: the production defaults, with a deadline generous
/// enough for a loaded 2-core CI machine, in the mode of [`isolation`].
pub fn test_limits() -> EngineLimits {
    EngineLimits {
        deadline: Duration::from_millis(200),
        isolation: isolation(),
        ..EngineLimits::default()
    }
}

/// A policy engine sharing one precompile cache across test processes (as a gateway
/// restart would), so each component is compiled once per build.
pub fn engine() -> PolicyEngine {
    let cache = workspace_root().join("target/plugins/cwasm");
    PolicyEngine::new(test_limits(), Some(cache)).expect("engine")
}

/// Load plugin `name` into `engine`.
pub fn load(engine: &PolicyEngine, name: &str) -> Arc<Plugin> {
    Plugin::load(engine, name, &component(name)).unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

/// Settings of the reference chain used across tests.
pub const POOL_SERIES: &str =
    r#"{"pools": {"rollout": "h100"}, "default_series": "h200", "allowed": ["h100", "h200"]}"#;
/// Team quota settings: team-a may use 16 h100 and 32 of any other series.
pub const TEAM_QUOTA: &str =
    r#"{"limits": {"team-a": {"h100": 16, "*": 32}}, "default": {"*": 8}}"#;
/// rwo-guard defaults.
pub const RWO_GUARD: &str = "{}";

/// The three reference policies in their intended order.
pub fn reference_chain(engine: &PolicyEngine) -> Chain {
    let links = [
        ("pool-series", POOL_SERIES),
        ("team-quota", TEAM_QUOTA),
        ("rwo-guard", RWO_GUARD),
    ]
    .into_iter()
    .map(|(name, settings)| ChainLink {
        plugin: load(engine, name),
        settings: settings.into(),
    })
    .collect();
    Chain::new(engine, links).expect("reference chain")
}

/// A component or module written in WebAssembly text under `tests/fixtures/`, encoded.
pub fn wat_fixture(rel: &str) -> Vec<u8> {
    wat::parse_bytes(&fixture(rel))
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .into_owned()
}

/// A one-pool job (one node, 8 GPUs) of `team` in a cluster without series.
pub fn minimal_request(team: &str) -> PolicyRequest {
    PolicyRequest {
        shares: Default::default(),
        job: JobView {
            id: format!("{team}-job"),
            team: team.into(),
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
            fleets: Vec::new(),
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![],
        },
        usage: vec![],
    }
}

/// A chain of one `hostile` fixture plugin in `mode`.
pub fn hostile(engine: &PolicyEngine, mode: &str) -> Chain {
    Chain::new(
        engine,
        vec![ChainLink {
            plugin: load(engine, "hostile"),
            settings: format!(r#"{{"mode": "{mode}"}}"#),
        }],
    )
    .expect("hostile chain")
}
