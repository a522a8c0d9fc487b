//! Dispatch at scale (issue 19): dispatcher passes over 10 000 queued jobs on 10 000
//! nodes, in process, against the emulated API server (`--sim api-only`: RayJobs are
//! stored, nothing runs), with the reference chain (team quota 16 GPUs per team).
//!
//! Ten teams (`FORGE_BENCH_DISPATCH_TEAMS`) each queue 16 one-GPU jobs plus their part
//! of 10 000 (1 016 each); the first pass dispatches 16 per team and holds the other
//! 10 000 on their team's quota. Then, timing `Jobs::dispatch_pass`
//! itself (release build, `FORGE_BENCH_DISPATCH_PASSES` idle passes, default 20):
//!
//! - `cold`: the first pass (every job asked, 160 RayJobs created); `settle`: the
//!   pass after it, which reads what the cold one wrote;
//! - `idle`: passes when nothing changed (the goal: ≤ 50 ms), which find so and skip
//!   (`jobs/dispatch/quiet.rs`); `full_idle`: the same passes forced to decide the
//!   whole queue, as the periodic full pass does;
//! - `team`: passes after one team's job ended (that team's jobs are asked again, one
//!   more of them runs), `FORGE_BENCH_DISPATCH_CHANGES` of them (default 10): the
//!   first (`team_ms`), the median and the slowest;
//! - `capacity`: a pass after a node was cordoned (the cluster view every request
//!   carries changed: every job is asked again — the baseline of a full pass).
//!
//! Then, with those jobs still queued, the console's pages (`dispatch/console_pages.rs`).
//!
//! Prints `BENCH dispatch key=value…` and `BENCH console key=value…` for
//! `tests/bench/run.sh`.
//!
//!   cargo bench -p forge-gateway --bench dispatch

#[path = "dispatch/console_pages.rs"]
mod console_pages;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use forge_gateway::dev::{self, DevOptions, SimMode};
use forge_gateway::domain::{Digest, JobState};
use forge_gateway::jobspec::JobSpec;
use forge_gateway::store::{NewJob, Transition, new_job_id};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};

/// As the gateway (see its `main.rs` for why): the pass allocates per queued job, so
/// the allocator is part of what is measured.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Jobs the teams queue, together, beyond the 16 each one's quota lets run.
const HELD: usize = 10_000;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // `RUST_LOG=forge_gateway::jobs::dispatch=debug` shows where each pass's time
    // goes (reading, deciding, the creates after the last decision) on stderr.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let nodes = env_usize("FORGE_BENCH_DISPATCH_NODES", 10_000);
    let passes = env_usize("FORGE_BENCH_DISPATCH_PASSES", 20);
    // The teams sharing the 10 000 held jobs (fair share orders them: 100 in its
    // issue's figure).
    let teams = env_usize("FORGE_BENCH_DISPATCH_TEAMS", 10).max(1);
    // How many jobs the quota holds (`FORGE_BENCH_DISPATCH_HELD`: the queue's length,
    // to see what grows with it).
    let held = env_usize("FORGE_BENCH_DISPATCH_HELD", HELD);
    let changes_n = env_usize("FORGE_BENCH_DISPATCH_CHANGES", 10).max(1);
    let per_team = held / teams + 16;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let data = tempfile::tempdir()?;
    let env: HashMap<String, String> = [
        ("FORGE_DATA_DIR", data.path().display().to_string()),
        ("FORGE_MAX_QUEUED_PER_TEAM", "0".to_string()),
        ("FORGE_SUBMISSIONS_PER_MINUTE", "0".to_string()),
        ("RUST_LOG", "warn".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let opts = DevOptions {
        nodes: format!("h100={nodes}x8"),
        plugins_dir: root.join("target/plugins/components"),
        env,
        sim: SimMode::ApiOnly,
        policy_chain: None,
        failing_images: Vec::new(),
        old_operator: false,
        ray_venv: None,
        fleets: 1,
    };
    let dev = dev::start(&opts, &"http://127.0.0.1:9/".parse()?).await?;
    let jobs = dev.state.jobs.dispatcher.clone();
    let cluster = dev.state.jobs.fleets.first().clone();
    cluster.capacity.synced().await;
    let store = dev.state.jobs.store();

    let spec: JobSpec = serde_json::from_value(serde_json::json!({
        "name": "bench", "framework": "nemo-rl", "entrypoint": "python3 train.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 1, "series": "h100"}]
    }))?;
    let digest = Digest::parse(&"ab".repeat(32)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let started = Instant::now();
    for i in 0..per_team {
        for t in 0..teams {
            store
                .insert(
                    NewJob {
                        id: new_job_id(),
                        team: format!("team-{t}"),
                        spec: JobSpec {
                            name: format!("bench-{t}-{i}"),
                            ..spec.clone()
                        },
                        state: JobState::Queued,
                        reason: None,
                        capsule_sha256: Some(digest.clone()),
                        queue_series: Some("h100".into()),
                        trace_parent: None,
                    },
                    None,
                )
                .await?;
        }
    }
    let inserted = started.elapsed();

    let timed = || async {
        let t = Instant::now();
        let n = jobs.dispatch_pass().await.expect("pass");
        (t.elapsed(), n)
    };
    let (cold, cold_dispatched) = timed().await;
    // The pass after it reads what it wrote (1 600 jobs dispatched): not idle yet.
    let (settle, _) = timed().await;
    let mut idle = Vec::new();
    for _ in 0..passes {
        let (t, n) = timed().await;
        assert_eq!(n, 0, "an idle pass dispatched");
        idle.push(ms(t));
    }
    idle.sort_by(f64::total_cmp);
    // The same passes forced to decide the whole queue: what the periodic full pass
    // (every 30 s when nothing changed) costs, and every pass cost before it.
    let mut full = Vec::new();
    for _ in 0..passes {
        let t = Instant::now();
        let (n, settled) = jobs.full_pass().await.expect("pass");
        assert_eq!((n, settled), (0, true), "an idle full pass did something");
        full.push(ms(t.elapsed()));
    }
    full.sort_by(f64::total_cmp);
    // What an idle pass spends reading the store: its two listings, alone.
    let mut reads = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let q = store.queued(None).await?;
        let a = store.active().await?;
        reads.push(ms(t.elapsed()));
        assert!(q.len() + a.len() > 0);
    }
    reads.sort_by(f64::total_cmp);

    // One running job of a team ends (team-0's, team-1's, …): its team's usage
    // changes, and one more of its jobs runs. `FORGE_BENCH_DISPATCH_CHANGES` samples.
    let mut team = Vec::new();
    let mut team_dispatched = 0;
    for k in 0..changes_n {
        let owner = format!("team-{}", k % teams);
        let done = store
            .active()
            .await?
            .into_iter()
            .find(|j| j.team == owner)
            .expect("an active job of the team");
        store
            .transition(Transition::new(
                &done.id,
                done.state,
                JobState::Failed,
                Some("bench".into()),
            ))
            .await?;
        let (t, n) = timed().await;
        team.push(ms(t));
        team_dispatched += n;
    }
    let team_first = team.first().copied().unwrap_or_default();
    team.sort_by(f64::total_cmp);

    // A node is cordoned: the cluster view changes for every job.
    let before = *cluster.capacity.changes().borrow();
    let api: Api<Node> = Api::all(dev.sim.client()?);
    let node = api
        .list(&ListParams::default().limit(1))
        .await?
        .items
        .into_iter()
        .next()
        .expect("a node");
    let name = node.metadata.name.clone().expect("name");
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})),
    )
    .await?;
    let mut changes = cluster.capacity.changes();
    while *changes.borrow() == before {
        changes.changed().await?;
    }
    let (capacity, _) = timed().await;

    let waiting = store.queued(None).await?;
    let queued = waiting.len();
    println!(
        "BENCH dispatch queued={queued} teams={teams} nodes={nodes} inserted_s={:.1} cold_ms={:.1} cold_dispatched={cold_dispatched} settle_ms={:.1} idle_p50_ms={:.2} idle_p99_ms={:.2} idle_max_ms={:.2} full_idle_p50_ms={:.2} full_idle_p99_ms={:.2} store_reads_ms={:.2} team_ms={:.1} team_p50_ms={:.1} team_max_ms={:.1} team_changes={changes_n} team_dispatched={team_dispatched} capacity_ms={:.1}",
        inserted.as_secs_f64(),
        ms(cold),
        ms(settle),
        percentile(&idle, 0.5),
        percentile(&idle, 0.99),
        idle.last().copied().unwrap_or_default(),
        percentile(&full, 0.5),
        percentile(&full, 0.99),
        percentile(&reads, 0.5),
        team_first,
        percentile(&team, 0.5),
        team.last().copied().unwrap_or_default(),
        ms(capacity),
    );
    let one = waiting.first().map(|j| j.id.clone()).unwrap_or_default();
    console_pages::measure(dev.state.clone(), &dev.token, &one).await?;
    dev.sim.shutdown().await;
    Ok(())
}
