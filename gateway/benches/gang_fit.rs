//! The gang fit across fleets (issue 42): what one dispatcher pass's fit costs when the
//! same nodes are one fleet or split over three, in the same run. The single fleet is
//! the baseline: a job placed in one of three fleets is tried in each it may use, and
//! the best fit compared, so the three-fleet pass does more work by design; this
//! measures how much.
//!
//! A pass is [`Rooms::new`] over 10 000 nodes (`FORGE_BENCH_FIT_NODES`) of two series,
//! 8 GPUs each, a fifth of them part-used, then [`Rooms::reserve`] for 10 000 queued
//! jobs (`FORGE_BENCH_FIT_JOBS`) of mixed gangs in queue order, until the rooms are
//! full and the rest is refused (the refusals are remembered per shape and fleet, as in
//! the dispatcher). Three layouts of the same nodes:
//! - `one`: one fleet;
//! - `three`: three fleets of a third each, every job free to go to any;
//! - `pinned`: three fleets, each job's pools pinned to one of them (data residency);
//! - `submitters`: one fleet, each job's gang with its submitter pod, as the dispatcher
//!   asks since stop 65 (a 0-GPU, 1-CPU pod on any node: a kind of every node).
//!
//! Timed over `FORGE_BENCH_FIT_PASSES` passes (default 20) after one warm-up; prints
//! `BENCH fit key=value…` with each layout's median and slowest pass, the jobs placed,
//! and each layout's median against `one`'s.
//!
//!   cargo bench -p forge-gateway --bench gang_fit

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_gateway::cluster::NodeRoom;
use forge_gateway::jobs::dispatch::demand::submitter;
use forge_gateway::jobs::fit::{PoolDemand, Rooms};

/// As the gateway: the fit allocates per attempt, so the allocator is measured too.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FLEETS: [&str; 3] = ["eu-west", "us-east", "ap-south"];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `count` nodes, alternately h100 and a100; every fifth has 3 GPUs in use. `fleets`
/// nodes in a row share a fleet's third (1: all in the first).
fn nodes(count: usize, fleets: usize) -> Vec<NodeRoom> {
    let per_fleet = count.div_ceil(fleets);
    (0..count)
        .map(|i| {
            let series = if i % 2 == 0 { "h100" } else { "a100" };
            NodeRoom {
                fleet: FLEETS[i / per_fleet].to_string(),
                name: format!("node-{i}"),
                series: series.to_string(),
                labels: [("starforge/gpu-series".to_string(), series.to_string())].into(),
                taints: Vec::new(),
                gpus: if i % 5 == 0 { 5 } else { 8 },
                cpu_millis: 96_000,
                memory_bytes: 768 << 30,
            }
        })
        .collect()
}

/// The queue: jobs of one to four pools' shapes, cycling, each pinned to a fleet when
/// `pinned`.
fn jobs(count: usize, pinned: bool) -> Vec<Vec<PoolDemand>> {
    let pool = |series: &str, nodes: u32, gpus: u32| PoolDemand {
        series: series.into(),
        nodes,
        gpus_per_node: gpus,
        cpu_millis: 8_000 * u64::from(gpus),
        memory_bytes: (64 << 30) * u64::from(gpus),
        ..PoolDemand::default()
    };
    let shapes: [Vec<PoolDemand>; 5] = [
        vec![pool("h100", 1, 1)],
        vec![pool("a100", 1, 4)],
        vec![pool("h100", 2, 8)],
        vec![pool("h100", 1, 8), pool("a100", 2, 4)],
        vec![pool("a100", 4, 8)],
    ];
    (0..count)
        .map(|i| {
            let mut job = shapes[i % shapes.len()].clone();
            if pinned {
                for p in &mut job {
                    p.fleets = vec![FLEETS[i % FLEETS.len()].to_string()];
                }
            }
            job
        })
        .collect()
}

/// `queue` with each job's submitter pod after its pools, as the dispatcher asks.
fn with_submitters(queue: &[Vec<PoolDemand>]) -> Vec<Vec<PoolDemand>> {
    queue
        .iter()
        .map(|job| {
            let mut gang = job.clone();
            gang.extend(submitter(job));
            gang
        })
        .collect()
}

/// One pass: the rooms of `nodes`, every job of `queue` reserved in order; returns the
/// jobs placed.
fn pass(nodes: &Arc<Vec<NodeRoom>>, queue: &[Vec<PoolDemand>]) -> usize {
    let mut rooms = Rooms::new(nodes.clone());
    queue
        .iter()
        .filter(|job| rooms.reserve(job).is_ok())
        .count()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Median and slowest pass, ms, and the jobs one pass placed.
fn time(nodes: &Arc<Vec<NodeRoom>>, queue: &[Vec<PoolDemand>], passes: usize) -> (f64, f64, usize) {
    let placed = pass(nodes, queue);
    let mut took: Vec<f64> = (0..passes)
        .map(|_| {
            let t = Instant::now();
            let again = pass(nodes, queue);
            let d = ms(t.elapsed());
            assert_eq!(again, placed, "a pass is deterministic");
            d
        })
        .collect();
    took.sort_by(f64::total_cmp);
    (took[took.len() / 2], took[took.len() - 1], placed)
}

fn main() {
    let count = env_usize("FORGE_BENCH_FIT_NODES", 10_000);
    let queued = env_usize("FORGE_BENCH_FIT_JOBS", 10_000);
    let passes = env_usize("FORGE_BENCH_FIT_PASSES", 20).max(1);
    let one = Arc::new(nodes(count, 1));
    let three = Arc::new(nodes(count, FLEETS.len()));
    let free = jobs(queued, false);
    let pinned = jobs(queued, true);
    let (one_p50, one_max, one_placed) = time(&one, &free, passes);
    let (three_p50, three_max, three_placed) = time(&three, &free, passes);
    let (pinned_p50, pinned_max, pinned_placed) = time(&three, &pinned, passes);
    let (sub_p50, sub_max, sub_placed) = time(&one, &with_submitters(&free), passes);
    println!(
        "BENCH fit nodes={count} queued={queued} passes={passes} \
         one_p50_ms={one_p50:.2} one_max_ms={one_max:.2} one_placed={one_placed} \
         three_p50_ms={three_p50:.2} three_max_ms={three_max:.2} three_placed={three_placed} \
         pinned_p50_ms={pinned_p50:.2} pinned_max_ms={pinned_max:.2} pinned_placed={pinned_placed} \
         submitters_p50_ms={sub_p50:.2} submitters_max_ms={sub_max:.2} \
         submitters_placed={sub_placed} \
         three_vs_one={:.2} pinned_vs_one={:.2} submitters_vs_one={:.2}",
        three_p50 / one_p50,
        pinned_p50 / one_p50,
        sub_p50 / one_p50
    );
}
