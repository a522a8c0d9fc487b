//! Load tool: list and watch latency of the kubesim API server through the real
//! `kube` client, at 10,000 nodes with a 100-node baseline measured in the same run,
//! plus write throughput (pod creates/s, each fanned out to an open watch).
//!
//! Run: `cargo run --release -p forge-kubesim --example load [-- NODES]`.

use std::time::{Duration, Instant};

use forge_kubesim::{NodeSpec, Sim, SimConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

async fn measure(nodes: u32) -> anyhow::Result<()> {
    let sim = Sim::start(SimConfig {
        nodes: NodeSpec::parse_layout(&format!(
            "h100={}x8,a100={}x8",
            nodes / 2,
            nodes - nodes / 2
        ))?,
        run_controllers: false,
        ..SimConfig::default()
    })
    .await?;
    let client = sim.client()?;
    let api: Api<Node> = Api::all(client.clone());

    let mut full = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let l = api.list(&ListParams::default()).await?;
        full.push(t.elapsed());
        anyhow::ensure!(l.items.len() == nodes as usize, "listed {}", l.items.len());
    }
    let mut paged = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let mut lp = ListParams::default().limit(500);
        let mut n = 0;
        loop {
            let page = api.list(&lp).await?;
            n += page.items.len();
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(c) => lp = lp.continue_token(&c),
                None => break,
            }
        }
        paged.push(t.elapsed());
        anyhow::ensure!(n == nodes as usize);
    }
    let mut selected = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        api.list(
            &ListParams::default()
                .labels("starforge/gpu-series=a100")
                .fields("spec.unschedulable=false"),
        )
        .await?;
        selected.push(t.elapsed());
    }

    // Watch latency: patch a node, time until the watch delivers the change.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed();
    let mut watch = Vec::new();
    for i in 0..200 {
        let name = format!("h100-{}", i % (nodes / 2).max(1));
        let t = Instant::now();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"load": i.to_string()}}})),
        )
        .await?;
        loop {
            match stream.next().await {
                Some(Ok(WatchEvent::Modified(n))) if n.metadata.name.as_deref() == Some(&name) => {
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => anyhow::bail!("watch: {e}"),
                None => anyhow::bail!("watch ended"),
            }
        }
        watch.push(t.elapsed());
    }

    // Write throughput: 2,000 pod creates from 16 concurrent tasks.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let t = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..16 {
        let pods = pods.clone();
        set.spawn(async move {
            for i in 0..125 {
                let p: Pod = serde_json::from_value(json!({"metadata": {"name": format!("p-{w}-{i}")}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))?;
                pods.create(&PostParams::default(), &p).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let creates = 2000.0 / t.elapsed().as_secs_f64();

    println!(
        "{nodes:>6} nodes | list all p50 {:>8.2?} p90 {:>8.2?} | paged(500) p50 {:>8.2?} | selector p50 {:>8.2?} | watch p50 {:>7.2?} p99 {:>7.2?} | {creates:>6.0} creates/s",
        pct(full.clone(), 0.5),
        pct(full, 0.9),
        pct(paged, 0.5),
        pct(selected, 0.5),
        pct(watch.clone(), 0.5),
        pct(watch, 0.99),
    );
    sim.shutdown().await;
    Ok(())
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let big: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    println!("baseline (same run):");
    measure(100).await?;
    println!("target:");
    measure(big).await?;
    println!("peak-ish RSS after run: {:.0} MiB", rss_mib());
    Ok(())
}
