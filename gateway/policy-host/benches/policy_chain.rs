//! Benchmark: the 3-plugin reference chain decision in the WebAssembly host, with warm
//! instances (`FORGE_POLICY_ISOLATION=warm`, settings parsed once per instance) and
//! with a fresh instance of every plugin per call (`fresh`), against the same three
//! policies linked natively and run with the same chain semantics (settings parsed per
//! call, and parsed once), in the same run.
//!
//! A fifth variant, `wasm-warm-floor`, is three warm links that read nothing and admit
//! unchanged: the fixed cost of calling plugins, apart from what they read.
//!
//! Criterion reports the means; a second pass times 20,000 individual decisions of each
//! and prints p50/p99 (and `BENCH` lines `tests/bench/run.sh` turns into its table).
//! Run: `cargo bench -p forge-policy-host --bench policy_chain`.

#[path = "../tests/it/support.rs"]
#[allow(dead_code)]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use forge_plugin_sdk as sdk;
use forge_plugin_sdk::harness::Harness;
use forge_policy_host::model::{
    ClusterView, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesUsage, StorageMode,
};
use forge_policy_host::{Chain, EngineLimits, Isolation, PolicyEngine};
use support::{self as plugins, POOL_SERIES, RWO_GUARD, TEAM_QUOTA};

/// The gateway's allocator (see its `main.rs`), so the host's allocations cost here what
/// they cost there; the native chain runs on it too.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn request() -> PolicyRequest {
    let cap = |s: &str, total: u32, nodes: u32| SeriesCapacity {
        series: s.into(),
        total,
        allocatable: total,
        in_use: 8,
        blocked: 0,
        free: total - 8,
        largest_free_block: 8,
        nodes,
        ..SeriesCapacity::default()
    };
    PolicyRequest {
        shares: Default::default(),
        job: JobView {
            id: "job-0123456789".into(),
            team: "team-a".into(),
            name: "llama-sft".into(),
            framework: "nemo-rl".into(),
            kind: Default::default(),
            priority: 5,
            pools: vec![
                PoolView {
                    name: "train".into(),
                    nodes: 2,
                    gpus_per_node: 8,
                    ..PoolView::default()
                },
                PoolView {
                    name: "rollout".into(),
                    nodes: 1,
                    gpus_per_node: 8,
                    ..PoolView::default()
                },
            ],
            storage: StorageMode::Shared,
            labels: [("project".to_string(), "llm".to_string())]
                .into_iter()
                .collect(),
        },
        cluster: ClusterView {
            fleets: Vec::new(),
            gpu_node_label: "starforge/gpu-series".into(),
            series: vec![cap("h100", 32, 4), cap("h200", 64, 8)],
        },
        usage: vec![SeriesUsage {
            series: "h200".into(),
            running: 8,
            queued: 0,
        }],
    }
}

/// The host request as the SDK sees it (what the host lowers into the component).
fn to_sdk(req: &PolicyRequest) -> sdk::Request<'static> {
    let job = &req.job;
    let cluster = sdk::Cluster {
        gpu_node_label: req.cluster.gpu_node_label.clone(),
        series: req
            .cluster
            .series
            .iter()
            .map(|s| sdk::SeriesCapacity {
                series: s.series.clone(),
                total: s.total,
                allocatable: s.allocatable,
                in_use: s.in_use,
                blocked: s.blocked,
                free: s.free,
                largest_free_block: s.largest_free_block,
                nodes: s.nodes,
                tainted: s.tainted,
                taints: Vec::new(),
                default_cpu_millis: s.default_cpu_millis,
                default_memory_bytes: s.default_memory_bytes,
            })
            .collect(),
    };
    sdk::Request::from_parts(sdk::RequestParts {
        job: sdk::Job {
            id: job.id.clone(),
            team: job.team.clone(),
            name: job.name.clone(),
            framework: job.framework.clone(),
            kind: sdk::WorkloadKind::Training,
            priority: job.priority,
            pools: job
                .pools
                .iter()
                .map(|p| sdk::Pool {
                    name: p.name.clone(),
                    nodes: p.nodes,
                    gpus_per_node: p.gpus_per_node,
                    series: p.series.clone(),
                    cpu_millis: p.cpu_millis,
                    memory_bytes: p.memory_bytes,
                })
                .collect(),
            storage: match job.storage {
                StorageMode::Shared => sdk::StorageMode::Shared,
                StorageMode::ReadWriteOnce => sdk::StorageMode::ReadWriteOnce,
            },
            labels: job
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
        fleets: vec![sdk::Fleet {
            name: "default".into(),
            labels: Vec::new(),
            available: true,
            series: cluster.series.clone(),
        }],
        cluster,
        usage: req
            .usage
            .iter()
            .map(|u| sdk::SeriesUsage {
                series: u.series.clone(),
                running: u.running,
                queued: u.queued,
                borrowed: 0,
            })
            .collect(),
        placement: sdk::Placement {
            pools: job
                .pools
                .iter()
                .map(|p| sdk::PoolPlacement {
                    pool: p.name.clone(),
                    series: p.series.clone(),
                    node_selector: vec![],
                    ray_resources: vec![],
                    labels: vec![],
                    annotations: vec![],
                    tolerations: vec![],
                    affinity: sdk::NodeAffinity {
                        required: vec![],
                        preferred: vec![],
                    },
                    fleets: vec![],
                })
                .collect(),
        },
        shares: Vec::new(),
    })
}

/// The native baseline: same policies, same settings parsing (per call), same chain
/// semantics.
fn native_chain(req: &PolicyRequest) -> sdk::Decision {
    let steps: [fn(&str, &sdk::Request<'_>) -> sdk::Decision; 3] = [
        parse_then_evaluate::<forge_policy_pool_series::PoolSeries>,
        parse_then_evaluate::<forge_policy_team_quota::TeamQuota>,
        parse_then_evaluate::<forge_policy_rwo_guard::RwoGuard>,
    ];
    let settings = [POOL_SERIES, TEAM_QUOTA, RWO_GUARD];
    run_native(
        req,
        steps
            .iter()
            .zip(settings)
            .map(|(step, s)| move |r: &sdk::Request<'_>| step(s, r)),
    )
}

/// One native step with its settings parsed on every call (what the host did with
/// every call before plugins kept their settings).
fn parse_then_evaluate<P: sdk::Policy>(settings: &str, r: &sdk::Request<'_>) -> sdk::Decision {
    let settings = sdk::parse_settings::<P>(settings).expect("the bench's settings parse");
    P::evaluate(&settings, r)
}

/// The same policies with their settings parsed once, as a native host would keep
/// them (and as a warm instance does since the SDK caches them).
struct NativeParsed {
    pool_series: Harness<forge_policy_pool_series::PoolSeries>,
    team_quota: Harness<forge_policy_team_quota::TeamQuota>,
    rwo_guard: Harness<forge_policy_rwo_guard::RwoGuard>,
}

impl NativeParsed {
    fn new() -> Self {
        NativeParsed {
            pool_series: Harness::new(POOL_SERIES).expect("settings"),
            team_quota: Harness::new(TEAM_QUOTA).expect("settings"),
            rwo_guard: Harness::new(RWO_GUARD).expect("settings"),
        }
    }

    fn decide(&self, req: &PolicyRequest) -> sdk::Decision {
        let steps: [&dyn Fn(&sdk::Request<'_>) -> sdk::Decision; 3] = [
            &|r| self.pool_series.evaluate(r),
            &|r| self.team_quota.evaluate(r),
            &|r| self.rwo_guard.evaluate(r),
        ];
        run_native(req, steps)
    }
}

/// Chain semantics over native steps: lower the request once, admit replaces the
/// placement, first reject wins, first hold queues.
fn run_native<F: Fn(&sdk::Request<'_>) -> sdk::Decision>(
    req: &PolicyRequest,
    steps: impl IntoIterator<Item = F>,
) -> sdk::Decision {
    let mut r = to_sdk(req);
    let mut hold = None;
    for step in steps {
        match step(&r) {
            sdk::Decision::Admit(sdk::Admission {
                placement: Some(p), ..
            }) => r.replace_placement(p),
            sdk::Decision::Admit(_) => {}
            q @ sdk::Decision::Queue(_) => {
                hold.get_or_insert(q);
            }
            rej @ sdk::Decision::Reject(_) => return rej,
        }
    }
    hold.unwrap_or_else(|| sdk::Decision::place(r.placement().clone()))
}

/// An engine in `isolation` with the tests' limits.
fn engine_in(isolation: Isolation) -> PolicyEngine {
    let limits = EngineLimits {
        isolation,
        ..plugins::test_limits()
    };
    let cache = plugins::workspace_root().join("target/plugins/cwasm");
    PolicyEngine::new(limits, Some(cache)).expect("engine")
}

/// The floor of a warm 3-link chain: three links that read nothing of the request and
/// admit unchanged (what calling a plugin costs before it looks at anything).
fn floor() -> Chain {
    let e = engine_in(Isolation::Warm);
    let links = (0..3)
        .map(|_| forge_policy_host::ChainLink {
            plugin: plugins::load(&e, "hostile"),
            settings: r#"{"mode": "ok"}"#.into(),
        })
        .collect();
    Chain::new(&e, links).expect("floor chain")
}

/// The reference chain in an engine with warm instances and in one with fresh ones.
fn warm_and_fresh() -> (Chain, Chain) {
    let warm = plugins::reference_chain(&engine_in(Isolation::Warm));
    let fresh = plugins::reference_chain(&engine_in(Isolation::Fresh));
    (warm, fresh)
}

fn bench_chain(c: &mut Criterion) {
    let (warm, fresh) = warm_and_fresh();
    let parsed = NativeParsed::new();
    let req = request();
    assert!(matches!(native_chain(&req), sdk::Decision::Admit(_)));
    assert!(matches!(parsed.decide(&req), sdk::Decision::Admit(_)));
    for chain in [&warm, &fresh] {
        let out = chain.evaluate(&req).expect("chain evaluates");
        assert_eq!(out.decision.kind(), "admit");
    }

    let mut g = c.benchmark_group("reference-chain");
    g.bench_function("wasm-warm-instances", |b| {
        b.iter(|| black_box(warm.evaluate(black_box(&req)).expect("chain evaluates")))
    });
    g.bench_function("wasm-fresh-instances", |b| {
        b.iter(|| black_box(fresh.evaluate(black_box(&req)).expect("chain evaluates")))
    });
    g.bench_function("native", |b| {
        b.iter(|| black_box(native_chain(black_box(&req))))
    });
    g.bench_function("native-settings-parsed-once", |b| {
        b.iter(|| black_box(parsed.decide(black_box(&req))))
    });
    g.finish();
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

/// Time `N` individual decisions of `f` after a warm-up; p50 and p99.
fn time(f: &dyn Fn()) -> (Duration, Duration) {
    const N: usize = 20_000;
    for _ in 0..1_000 {
        f();
    }
    percentiles(
        (0..N)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect(),
    )
}

/// Prints p50/p99 of each variant, interleaved in rounds so that load from elsewhere
/// on the machine hits every variant alike, and one `BENCH` line per variant for
/// `tests/bench/run.sh`.
fn report_percentiles() {
    let (warm, fresh) = warm_and_fresh();
    let parsed = NativeParsed::new();
    let req = request();
    let floor = floor();
    let variants: [(&str, &dyn Fn()); 5] = [
        ("wasm-warm", &|| {
            black_box(warm.evaluate(black_box(&req)).expect("chain evaluates"));
        }),
        ("wasm-fresh", &|| {
            black_box(fresh.evaluate(black_box(&req)).expect("chain evaluates"));
        }),
        ("native", &|| {
            black_box(native_chain(black_box(&req)));
        }),
        ("native-parsed-once", &|| {
            black_box(parsed.decide(black_box(&req)));
        }),
        ("wasm-warm-floor", &|| {
            black_box(floor.evaluate(black_box(&req)).expect("chain evaluates"));
        }),
    ];
    const ROUNDS: usize = 3;
    let mut best: Vec<Option<(Duration, Duration)>> = vec![None; variants.len()];
    for _ in 0..ROUNDS {
        for (i, (_, f)) in variants.iter().enumerate() {
            let (p50, p99) = time(*f);
            // The round least disturbed by the rest of the machine, per variant.
            best[i] = Some(match best[i] {
                Some((b50, b99)) => (b50.min(p50), b99.min(p99)),
                None => (p50, p99),
            });
        }
    }
    println!("\nreference chain, 20000 decisions per variant, best of {ROUNDS} rounds:");
    for ((name, _), b) in variants.iter().zip(&best) {
        let (p50, p99) = b.expect("measured");
        println!("  {name:<20} p50 {p50:>9.2?}  p99 {p99:>9.2?}");
        println!(
            "BENCH policy_chain.{name} p50_us={:.2} p99_us={:.2}",
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6
        );
    }
}

criterion_group!(benches, bench_chain);

fn main() {
    benches();
    report_percentiles();
    Criterion::default().configure_from_args().final_summary();
}
