//! The three reference policies, compiled to components from source, running in the
//! real gateway host: admit, queue and reject for each, chain-order semantics, settings
//! validation, recorded digests, the precompile cache and off-worker execution.

use std::sync::Arc;

use crate::support::{self as plugins, POOL_SERIES, RWO_GUARD, TEAM_QUOTA, engine, load};
use forge_policy_host::model::{
    ClusterView, Decision, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesUsage,
    StorageMode,
};
use forge_policy_host::{
    Chain, ChainLink, LoadError, Plugin, PolicyEngine, PolicyRunner, digest_of,
};

fn series(name: &str, total: u32, free: u32, nodes: u32) -> SeriesCapacity {
    SeriesCapacity {
        series: name.into(),
        total,
        allocatable: total,
        in_use: total - free,
        blocked: 0,
        free,
        largest_free_block: free.min(8),
        nodes,
        ..SeriesCapacity::default()
    }
}

fn request(
    team: &str,
    pools: &[(&str, u32, u32, Option<&str>)],
    storage: StorageMode,
) -> PolicyRequest {
    PolicyRequest {
        shares: Default::default(),
        job: JobView {
            id: "j-1".into(),
            team: team.into(),
            name: "train".into(),
            framework: "nemo-rl".into(),
            kind: Default::default(),
            priority: 0,
            pools: pools
                .iter()
                .map(|(n, nodes, gpus, s)| PoolView {
                    name: (*n).into(),
                    nodes: *nodes,
                    gpus_per_node: *gpus,
                    series: s.map(str::to_string),
                    ..PoolView::default()
                })
                .collect(),
            storage,
            labels: Default::default(),
        },
        cluster: ClusterView {
            fleets: Vec::new(),
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![series("h100", 32, 32, 4), series("h200", 64, 64, 8)],
        },
        usage: Vec::new(),
    }
}

fn single(engine: &PolicyEngine, name: &str, settings: &str) -> Chain {
    Chain::new(
        engine,
        vec![ChainLink {
            plugin: load(engine, name),
            settings: settings.into(),
        }],
    )
    .expect("chain")
}

fn code(d: &Decision) -> &str {
    match d {
        Decision::Reject { code, .. } | Decision::Queue { code, .. } => code,
        Decision::Admit { .. } => "admit",
    }
}

#[test]
fn pool_series_admits_with_selector_and_rejects_unknown_series() {
    let e = engine();
    let chain = single(&e, "pool-series", POOL_SERIES);
    let out = chain
        .evaluate(&request(
            "team-a",
            &[("train", 2, 8, None), ("rollout", 1, 8, None)],
            StorageMode::Shared,
        ))
        .unwrap();
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].series.as_deref(), Some("h200"));
    assert_eq!(
        placement.pools[1].node_selector["starforge/gpu-series"],
        "h100"
    );
    assert_eq!(placement.pools[1].ray_resources["forge-pool-rollout"], 8.0);

    let out = chain
        .evaluate(&request(
            "team-a",
            &[("train", 1, 8, Some("a100"))],
            StorageMode::Shared,
        ))
        .unwrap();
    assert_eq!(code(&out.decision), "series.not-allowed");
    let Decision::Reject { field, message, .. } = &out.decision else {
        unreachable!()
    };
    assert_eq!(field.as_deref(), Some("pools[0].series"));
    assert!(message.contains("h100, h200"), "{message}");
}

#[test]
fn team_quota_admits_queues_and_rejects() {
    let e = engine();
    let chain = single(&e, "team-quota", TEAM_QUOTA);
    let mut req = request(
        "team-a",
        &[("train", 1, 8, Some("h100"))],
        StorageMode::Shared,
    );
    assert_eq!(code(&chain.evaluate(&req).unwrap().decision), "admit");

    req.usage = vec![SeriesUsage {
        series: "h100".into(),
        running: 12,
        queued: 0,
    }];
    let out = chain.evaluate(&req).unwrap();
    assert_eq!(code(&out.decision), "quota.exceeded");

    let big = request(
        "team-a",
        &[("train", 3, 8, Some("h100"))],
        StorageMode::Shared,
    );
    let out = chain.evaluate(&big).unwrap();
    let Decision::Reject { code, message, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(code, "quota.job-exceeds-limit");
    assert!(
        message.contains("24 h100") && message.contains("at most 16"),
        "{message}"
    );
}

#[test]
fn rwo_guard_rejects_multi_node_only_on_rwo() {
    let e = engine();
    let chain = single(&e, "rwo-guard", RWO_GUARD);
    let multi = [("a", 1, 8, None), ("b", 1, 8, None)];
    let out = chain
        .evaluate(&request("t", &multi, StorageMode::ReadWriteOnce))
        .unwrap();
    assert_eq!(code(&out.decision), "storage.rwo-multi-node");
    let out = chain
        .evaluate(&request("t", &multi, StorageMode::Shared))
        .unwrap();
    assert_eq!(code(&out.decision), "admit");
    let out = chain
        .evaluate(&request(
            "t",
            &[("a", 1, 8, None)],
            StorageMode::ReadWriteOnce,
        ))
        .unwrap();
    assert_eq!(code(&out.decision), "admit");
}

#[test]
fn chain_admits_with_the_last_placement_and_records_digests() {
    let e = engine();
    let chain = plugins::reference_chain(&e);
    let out = chain
        .evaluate(&request(
            "team-a",
            &[("train", 2, 8, None)],
            StorageMode::Shared,
        ))
        .unwrap();
    let Decision::Admit { placement, .. } = &out.decision else {
        panic!("{:?}", out.decision)
    };
    assert_eq!(placement.pools[0].series.as_deref(), Some("h200"));
    assert_eq!(out.trace.len(), 3);
    assert!(out.trace.iter().all(|t| t.outcome == "admit"));
    let expected: Vec<String> = ["pool-series", "team-quota", "rwo-guard"]
        .iter()
        .map(|n| digest_of(&plugins::component(n)))
        .collect();
    assert_eq!(out.digests, expected);
}

#[test]
fn chain_first_reject_wins_even_after_a_queue() {
    let e = engine();
    let chain = plugins::reference_chain(&e);
    // team-quota queues (usage), then rwo-guard rejects (RWO multi-node): reject wins.
    let mut req = request(
        "team-a",
        &[("train", 1, 8, Some("h100")), ("x", 1, 0, Some("h100"))],
        StorageMode::ReadWriteOnce,
    );
    req.usage = vec![SeriesUsage {
        series: "h100".into(),
        running: 16,
        queued: 0,
    }];
    let out = chain.evaluate(&req).unwrap();
    assert_eq!(code(&out.decision), "storage.rwo-multi-node");
    let outcomes: Vec<_> = out.trace.iter().map(|t| t.outcome).collect();
    assert_eq!(outcomes, ["admit", "queue", "reject"]);

    // A reject stops the chain: later plugins do not run.
    let req = request(
        "team-a",
        &[("train", 1, 8, Some("b200"))],
        StorageMode::Shared,
    );
    let out = chain.evaluate(&req).unwrap();
    assert_eq!(code(&out.decision), "series.not-allowed");
    assert_eq!(out.trace.len(), 1);
}

#[test]
fn chain_queue_holds_the_job_when_nothing_rejects() {
    let e = engine();
    let chain = plugins::reference_chain(&e);
    let mut req = request(
        "team-a",
        &[("train", 1, 8, Some("h100"))],
        StorageMode::Shared,
    );
    req.usage = vec![SeriesUsage {
        series: "h100".into(),
        running: 16,
        queued: 0,
    }];
    let out = chain.evaluate(&req).unwrap();
    assert_eq!(code(&out.decision), "quota.exceeded");
    assert_eq!(out.trace.len(), 3, "the chain continues after a hold");
}

#[test]
fn chain_order_matters_each_plugin_sees_the_placement_so_far() {
    let e = engine();
    // team-quota first: the pool has no series yet, so the `*` limit (32) applies and a
    // 4x8 job is admitted; after pool-series maps it to h100 (limit 16) it is rejected.
    let quota_first = Chain::new(
        &e,
        vec![
            ChainLink {
                plugin: load(&e, "team-quota"),
                settings: TEAM_QUOTA.into(),
            },
            ChainLink {
                plugin: load(&e, "pool-series"),
                settings: POOL_SERIES.into(),
            },
        ],
    )
    .unwrap();
    let series_first = Chain::new(
        &e,
        vec![
            ChainLink {
                plugin: load(&e, "pool-series"),
                settings: POOL_SERIES.into(),
            },
            ChainLink {
                plugin: load(&e, "team-quota"),
                settings: TEAM_QUOTA.into(),
            },
        ],
    )
    .unwrap();
    let req = request("team-a", &[("rollout", 4, 8, None)], StorageMode::Shared);
    assert_eq!(code(&quota_first.evaluate(&req).unwrap().decision), "admit");
    assert_eq!(
        code(&series_first.evaluate(&req).unwrap().decision),
        "quota.job-exceeds-limit"
    );
}

#[test]
fn bad_settings_are_rejected_by_validate_settings_with_a_clear_message() {
    let e = engine();
    let cases = [
        (
            "rwo-guard",
            r#"{"max_nodes": 0}"#,
            "max_nodes must be at least 1",
        ),
        (
            "pool-series",
            r#"{"default_series": "a100", "allowed": ["h100"]}"#,
            "default_series",
        ),
        ("team-quota", r#"{"limit": {}}"#, "unknown field `limit`"),
        ("team-quota", "not json", "invalid settings"),
    ];
    for (name, settings, expected) in cases {
        let err = Chain::new(
            &e,
            vec![ChainLink {
                plugin: load(&e, name),
                settings: settings.into(),
            }],
        )
        .expect_err(settings);
        match &err {
            LoadError::InvalidSettings { plugin, message } => {
                assert_eq!(plugin, name);
                assert!(message.contains(expected), "{name}: {message}");
            }
            other => panic!("{name}: expected InvalidSettings, got {other}"),
        }
    }
}

#[test]
fn precompiled_components_are_cached_by_digest_and_reused() {
    let dir = std::env::temp_dir().join(format!("forge-policy-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let e = PolicyEngine::new(plugins::test_limits(), Some(dir.clone())).unwrap();
    let bytes = plugins::component("rwo-guard");
    let first = Plugin::load(&e, "rwo-guard", &bytes).unwrap();
    // The artifacts, beside the cache's key.
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| f.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    assert_eq!(files.len(), 1, "one precompiled artifact");
    let name = files[0].clone();
    assert!(
        name.starts_with(first.digest().trim_start_matches("sha256:")),
        "{name}"
    );
    let modified = std::fs::metadata(dir.join(&name))
        .unwrap()
        .modified()
        .unwrap();

    // A new engine (a restart) loads the artifact instead of recompiling.
    let e2 = PolicyEngine::new(plugins::test_limits(), Some(dir.clone())).unwrap();
    let second = Plugin::load(&e2, "rwo-guard", &bytes).unwrap();
    assert_eq!(
        std::fs::metadata(dir.join(&name))
            .unwrap()
            .modified()
            .unwrap(),
        modified
    );
    let chain = Chain::new(
        &e2,
        vec![ChainLink {
            plugin: second,
            settings: "{}".into(),
        }],
    )
    .unwrap();
    let out = chain
        .evaluate(&request(
            "t",
            &[("a", 2, 8, None)],
            StorageMode::ReadWriteOnce,
        ))
        .unwrap();
    assert_eq!(code(&out.decision), "storage.rwo-multi-node");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_evaluates_concurrently_off_the_async_workers() {
    let e = engine();
    let chain = Arc::new(plugins::reference_chain(&e));
    let runner = PolicyRunner::new(4);
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let runner = runner.clone();
        let chain = chain.clone();
        let nodes = 1 + i % 3;
        tasks.push(tokio::spawn(async move {
            let req = Arc::new(request(
                "team-a",
                &[("train", nodes, 8, None)],
                StorageMode::Shared,
            ));
            runner.evaluate(chain, req).await
        }));
    }
    for t in tasks {
        let out = t.await.unwrap().unwrap();
        assert_eq!(code(&out.decision), "admit");
    }
}
