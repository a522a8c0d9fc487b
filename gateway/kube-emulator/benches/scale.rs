//! Scale run of the emulator in timed mode: 10,000 nodes and 1,000 concurrent RayJobs
//! in one process, driven only through the `kube` client.
//!
//! Reports list latency (pods in one list and paged by 500, nodes, RayJobs) and watch
//! latency (p50/p99) on the idle cluster first (the baseline,
//! same process, same nodes) and then under the RayJob load, the time for all jobs to
//! reach Running and a terminal state, events written per second, API writes per
//! second, and peak RSS (`VmHWM`). Run it with
//! `cargo bench -p forge-kubesim --bench scale` (release); optional env:
//! `KUBESIM_SCALE_NODES` (10000), `KUBESIM_SCALE_JOBS` (1000), `KUBESIM_SCALE_RUN_SECS`
//! (30), `KUBESIM_SCALE_MAX_SECS` (900, give up waiting for terminal states). Prints
//! the RayJob states every 10 s while waiting. `harness = false`: one measured scenario, not a criterion micro-benchmark.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_kubesim::controllers::{RunSecs, rayjob_resource};
use forge_kubesim::{ControllerConfig, NodeSpec, RunMode, Sim, SimConfig, TimedModel};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

const NS: &str = "starforge";
const PROBE_NS: &str = "probe";

fn env_num(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(str::to_owned)
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|k| k.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn rayjob(name: &str) -> Value {
    json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "forge-gateway"}},
        "spec": {
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": true,
            "rayClusterSpec": {
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{
                    "name": "ray-head", "image": "rayproject/ray:2.46.0",
                    "resources": {"limits": {"cpu": "2", "memory": "8Gi"}}}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 1,
                    "rayStartParams": {}, "template": {"spec": {"containers": [{
                        "name": "ray-worker", "image": "rayproject/ray:2.46.0",
                        "resources": {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}}}]}}}],
            },
        },
    })
}

/// List latencies for one phase.
struct ListSample {
    pods: Vec<Duration>,
    pods_paged: Vec<Duration>,
    nodes_page: Vec<Duration>,
    nodes_all: Vec<Duration>,
    rayjobs: Vec<Duration>,
}

async fn sample_lists(client: &kube::Client, rounds: usize) -> ListSample {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes: Api<Node> = Api::all(client.clone());
    let rjs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &rayjob_resource());
    let mut s = ListSample {
        pods: vec![],
        pods_paged: vec![],
        nodes_page: vec![],
        nodes_all: vec![],
        rayjobs: vec![],
    };
    for _ in 0..rounds {
        let t = Instant::now();
        pods.list(&ListParams::default()).await.expect("list pods");
        s.pods.push(t.elapsed());
        // Every page of 500, following `continue` to the end.
        let t = Instant::now();
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = pods.list(&lp).await.expect("list pods page");
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        s.pods_paged.push(t.elapsed());
        let t = Instant::now();
        nodes
            .list(&ListParams::default().limit(500))
            .await
            .expect("list nodes page");
        s.nodes_page.push(t.elapsed());
        let t = Instant::now();
        nodes
            .list(&ListParams::default())
            .await
            .expect("list nodes");
        s.nodes_all.push(t.elapsed());
        let t = Instant::now();
        rjs.list(&ListParams::default())
            .await
            .expect("list rayjobs");
        s.rayjobs.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    s
}

/// Watch latency: time from just before a probe pod's create call to its ADDED event
/// on an independent watch.
async fn sample_watch(client: &kube::Client, rounds: usize, tag: &str) -> Vec<Duration> {
    let seen: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let api: Api<Pod> = Api::namespaced(client.clone(), PROBE_NS);
    let s2 = seen.clone();
    let w = tokio::spawn(async move {
        let mut st = watcher(api, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Ok(Some(p)) = st.try_next().await {
            if let Some(n) = p.metadata.name {
                s2.lock()
                    .expect("lock")
                    .entry(n)
                    .or_insert_with(Instant::now);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let api: Api<Pod> = Api::namespaced(client.clone(), PROBE_NS);
    let mut sent = Vec::new();
    for i in 0..rounds {
        let name = format!("probe-{tag}-{i}");
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"schedulerName": "none", "containers": [{"name": "c", "image": "busybox"}]}}))
        .expect("pod");
        let t = Instant::now();
        api.create(&PostParams::default(), &pod)
            .await
            .expect("probe");
        sent.push((name, t));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    w.abort();
    let seen = seen.lock().expect("lock");
    sent.into_iter()
        .filter_map(|(n, t)| seen.get(&n).map(|s| s.saturating_duration_since(t)))
        .collect()
}

fn report(label: &str, l: &ListSample, w: &[Duration]) {
    println!("{label}:");
    for (what, v) in [
        ("list pods (ns)", &l.pods),
        ("list pods paged by 500", &l.pods_paged),
        ("list nodes limit=500", &l.nodes_page),
        ("list nodes (all)", &l.nodes_all),
        ("list rayjobs", &l.rayjobs),
        ("watch ADDED latency", &w.to_vec()),
    ] {
        println!(
            "  {what:<24} p50 {:>10}  p99 {:>10}  (n={})",
            ms(pct(v.clone(), 0.5)),
            ms(pct(v.clone(), 0.99)),
            v.len()
        );
    }
}

async fn count_by_state(client: &kube::Client) -> HashMap<String, usize> {
    let rjs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &rayjob_resource());
    let mut m = HashMap::new();
    for rj in rjs.list(&ListParams::default()).await.expect("list").items {
        let s = rj
            .data
            .pointer("/status/jobDeploymentStatus")
            .and_then(Value::as_str)
            .unwrap_or("New")
            .to_owned();
        *m.entry(s).or_default() += 1;
    }
    m
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let nodes = env_num("KUBESIM_SCALE_NODES", 10_000);
    let jobs = env_num("KUBESIM_SCALE_JOBS", 1_000);
    let run_secs = env_num("KUBESIM_SCALE_RUN_SECS", 30) as f64;
    let half = nodes / 2;
    let layout = format!("h100={}x8,a100={}x8", nodes - half, half);
    let controllers = ControllerConfig {
        mode: RunMode::Timed(TimedModel {
            run_secs: RunSecs::Uniform {
                min: run_secs * 0.5,
                max: run_secs * 1.5,
            },
            fail_ratio: 0.1,
            submit_fail_ratio: 0.0,
            start_secs: 0.0,
        }),
        image_pull: Duration::from_millis(100),
        concurrency: 64,
        ..ControllerConfig::default()
    };
    let t0 = Instant::now();
    let sim = Sim::start(SimConfig {
        nodes: NodeSpec::parse_layout(&layout).expect("layout"),
        namespaces: vec![NS.into(), PROBE_NS.into()],
        controllers,
        event_window: 1_000_000,
        ..SimConfig::default()
    })
    .await
    .expect("sim starts");
    let client = sim.client().expect("client");
    println!(
        "kubesim scale: {nodes} nodes, {jobs} RayJobs, timed mode (run {run_secs}s ±50%, 10% app failures)"
    );
    println!(
        "startup (seeding {nodes} nodes): {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    let base_lists = sample_lists(&client, 20).await;
    let base_watch = sample_watch(&client, 20, "idle").await;
    report("baseline (idle cluster)", &base_lists, &base_watch);

    let rv0 = sim.resource_version();
    let load_start = Instant::now();
    let rjs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &rayjob_resource());
    stream::iter(0..jobs)
        .map(|i| {
            let rjs = rjs.clone();
            async move {
                let obj: DynamicObject =
                    serde_json::from_value(rayjob(&format!("bench-{i:05}"))).expect("rayjob");
                rjs.create(&PostParams::default(), &obj)
                    .await
                    .expect("create rayjob");
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let submitted = load_start.elapsed();
    println!(
        "submitted {jobs} RayJobs in {:.2} s",
        submitted.as_secs_f64()
    );

    // Sample while the jobs run.
    let load_lists = sample_lists(&client, 20).await;
    let load_watch = sample_watch(&client, 20, "load").await;
    report("under load (RayJobs running)", &load_lists, &load_watch);

    let mut all_running: Option<Duration> = None;
    let mut peak_running = 0usize;
    let max_secs = env_num("KUBESIM_SCALE_MAX_SECS", 900) as u64;
    let deadline = Instant::now() + Duration::from_secs(max_secs);
    let mut last_progress = Instant::now();
    let finished = loop {
        let by = count_by_state(&client).await;
        let terminal =
            by.get("Complete").copied().unwrap_or(0) + by.get("Failed").copied().unwrap_or(0);
        let running = by.get("Running").copied().unwrap_or(0);
        peak_running = peak_running.max(running);
        let past_init = terminal + running;
        if all_running.is_none() && past_init == jobs {
            all_running = Some(load_start.elapsed());
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let mut states: Vec<_> = by.iter().collect();
            states.sort();
            println!(
                "  t+{:>4.0} s: {states:?}",
                load_start.elapsed().as_secs_f64()
            );
        }
        if terminal == jobs {
            break Some((load_start.elapsed(), by));
        }
        if Instant::now() > deadline {
            println!("gave up; states: {by:?}");
            break None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let elapsed = load_start.elapsed();
    let writes = sim.resource_version() - rv0;
    let ev_new = Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .len();
    let ev_core = Api::<CoreEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .len();
    if let Some(d) = all_running {
        println!(
            "all {jobs} RayJobs Running (or past it): {:.1} s after the first create",
            d.as_secs_f64()
        );
    }
    println!("peak RayJobs Running at the same time (1 s polls): {peak_running}");
    if let Some((d, by)) = finished {
        println!(
            "all {jobs} RayJobs terminal: {:.1} s ({by:?})",
            d.as_secs_f64()
        );
    }
    let secs = elapsed.as_secs_f64();
    println!(
        "events: {ev_new} events.k8s.io/v1 + {ev_core} core/v1 = {} in {secs:.1} s → {:.0} events/s",
        ev_new + ev_core,
        (ev_new + ev_core) as f64 / secs
    );
    println!(
        "API writes (resourceVersion delta): {writes} → {:.0} writes/s",
        writes as f64 / secs
    );
    println!("peak RSS (VmHWM): {:.0} MiB", peak_rss_mib());
    sim.shutdown().await;
}
