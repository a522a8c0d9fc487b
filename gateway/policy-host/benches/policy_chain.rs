//! Benchmark: the 3-plugin reference chain decision in the WebAssembly host (a fresh
//! instance of every plugin per call, settings parsed per call) against the same three
//! policies linked natively and run with the same chain semantics, in the same run.
//!
//! Criterion reports the means; a second pass times 20,000 individual decisions of each
//! and prints p50/p99 and the ratio. Run: `cargo bench -p forge-policy-host --bench policy_chain`.

#[path = "../tests/it/support.rs"]
#[allow(dead_code)]
mod support;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use forge_plugin_sdk as sdk;
use forge_policy_host::model::{
    ClusterView, JobView, PolicyRequest, PoolView, SeriesCapacity, SeriesUsage, StorageMode,
};
use support::{self as plugins, POOL_SERIES, RWO_GUARD, TEAM_QUOTA};

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
fn to_sdk(req: &PolicyRequest) -> sdk::Request {
    let job = &req.job;
    sdk::Request {
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
        cluster: sdk::Cluster {
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
        },
        usage: req
            .usage
            .iter()
            .map(|u| sdk::SeriesUsage {
                series: u.series.clone(),
                running: u.running,
                queued: u.queued,
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
                })
                .collect(),
        },
    }
}

/// The native baseline: same policies, same settings parsing, same chain semantics.
fn native_chain(req: &PolicyRequest) -> sdk::Decision {
    let mut r = to_sdk(req);
    let steps: [fn(&str, &sdk::Request) -> sdk::Decision; 3] = [
        sdk::__evaluate::<forge_policy_pool_series::PoolSeries>,
        sdk::__evaluate::<forge_policy_team_quota::TeamQuota>,
        sdk::__evaluate::<forge_policy_rwo_guard::RwoGuard>,
    ];
    let settings = [POOL_SERIES, TEAM_QUOTA, RWO_GUARD];
    let mut hold = None;
    for (step, s) in steps.iter().zip(settings) {
        match step(s, &r) {
            sdk::Decision::Admit(p) => r.placement = p,
            q @ sdk::Decision::Queue(_) => {
                hold.get_or_insert(q);
            }
            rej @ sdk::Decision::Reject(_) => return rej,
        }
    }
    hold.unwrap_or(sdk::Decision::Admit(r.placement))
}

fn bench_chain(c: &mut Criterion) {
    let engine = plugins::engine();
    let chain = plugins::reference_chain(&engine);
    let req = request();
    assert!(matches!(native_chain(&req), sdk::Decision::Admit(_)));
    assert_eq!(
        chain
            .evaluate(&req)
            .expect("chain evaluates")
            .decision
            .kind(),
        "admit"
    );

    let mut g = c.benchmark_group("reference-chain");
    g.bench_function("wasm-fresh-instances", |b| {
        b.iter(|| black_box(chain.evaluate(black_box(&req)).expect("chain evaluates")))
    });
    g.bench_function("native", |b| {
        b.iter(|| black_box(native_chain(black_box(&req))))
    });
    g.finish();
}

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99))
}

fn report_percentiles() {
    const N: usize = 20_000;
    let engine = plugins::engine();
    let chain = plugins::reference_chain(&engine);
    let req = request();
    let time = |f: &dyn Fn()| {
        for _ in 0..1_000 {
            f();
        }
        (0..N)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect::<Vec<_>>()
    };
    let (w50, w99) = percentiles(time(&|| {
        black_box(chain.evaluate(black_box(&req)).expect("chain evaluates"));
    }));
    let (n50, n99) = percentiles(time(&|| {
        black_box(native_chain(black_box(&req)));
    }));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!("\nreference chain, {N} decisions each (fresh instances per call):");
    println!("  wasm   p50 {:>8.2?}  p99 {:>8.2?}", w50, w99);
    println!("  native p50 {:>8.2?}  p99 {:>8.2?}", n50, n99);
    println!(
        "  ratio  p50 {:>7.1}x  p99 {:>7.1}x",
        ratio(w50, n50),
        ratio(w99, n99)
    );
}

criterion_group!(benches, bench_chain);

fn main() {
    benches();
    report_percentiles();
    Criterion::default().configure_from_args().final_summary();
}
