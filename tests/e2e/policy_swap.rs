//! Live policy swap under load (issue 7): concurrent admission reviews while the
//! global chain is swapped back and forth between two versions. Asserts zero failed
//! requests, that every decision names the version that made it, and that no request
//! sent after a swap's acknowledgement was decided by an older version. Prints the
//! review rate with and without swaps (same process) and the swap latency
//! (PUT → in effect) p50/p99.
//!
//! CI runs a short version. The load (≥ 1,000 reviews/s for 30 s, 20 swaps)
//! is a release run:
//! `FORGE_SWAP_SECS=30 FORGE_SWAP_COUNT=20 cargo test --release -p forge-tests --test e2e policy_swap -- --nocapture`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use forge_tests::policy::{PolicyClient, gateway, spec_with_gpus};
use serde_json::json;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One review: when it was sent and answered, its status and the deciding version.
struct Sample {
    sent: Instant,
    status: u16,
    version: Option<u64>,
}

/// Run `clients` review loops until `stop`; returns every sample.
async fn load(client: &PolicyClient, clients: usize, stop: Arc<AtomicBool>) -> Vec<Sample> {
    let spec = spec_with_gpus("swap", 1);
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (client, stop, spec) = (client.clone(), stop.clone(), spec.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let sent = Instant::now();
                let resp = client
                    .http
                    .post(format!("{}/v1/admission/review", client.url))
                    .bearer_auth(&client.token)
                    .json(&spec)
                    .send()
                    .await;
                let (status, version) = match resp {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        (status, body["policyVersion"].as_u64())
                    }
                    Err(_) => (0, None),
                };
                out.push(Sample {
                    sent,
                    status,
                    version,
                });
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("client task"));
    }
    all
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn swaps_under_load_fail_no_request_and_leave_no_stale_decision() {
    let secs = env_or("FORGE_SWAP_SECS", 6);
    let swaps = env_or("FORGE_SWAP_COUNT", 8);
    let clients = usize::try_from(env_or("FORGE_SWAP_CLIENTS", 16)).unwrap_or(16);
    let gw = gateway("h100=4x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let a = admin
        .global_links_with("team-quota", json!({"default": {"*": 16}}))
        .await;
    let b = admin
        .global_links_with("team-quota", json!({"default": {"*": 8}}))
        .await;

    // Baseline: the same load without swaps, in the same process.
    let base_secs = (secs / 3).max(2);
    let stop = Arc::new(AtomicBool::new(false));
    let base = {
        let (admin, stop) = (admin.clone(), stop.clone());
        tokio::spawn(async move { load(&admin, clients, stop).await })
    };
    tokio::time::sleep(Duration::from_secs(base_secs)).await;
    stop.store(true, Ordering::Relaxed);
    let base = base.await.expect("baseline");
    let base_rate = base.len() as f64 / base_secs as f64;
    assert!(base.iter().all(|s| s.status == 200), "baseline failures");

    // Under swaps.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let loaded = {
        let (admin, stop) = (admin.clone(), stop.clone());
        tokio::spawn(async move { load(&admin, clients, stop).await })
    };
    let gap = Duration::from_millis(secs * 1000 / (swaps + 1));
    let mut acks: Vec<(Instant, u64)> = Vec::new();
    let mut put_ms = Vec::new();
    let mut activation_ms = Vec::new();
    let mut version = admin.global_version().await;
    for i in 0..swaps {
        tokio::time::sleep(gap).await;
        let links = if i % 2 == 0 { &b } else { &a };
        let t0 = Instant::now();
        let (status, body) = admin
            .put_policy(
                None,
                &json!({"expectedVersion": version, "plugins": links, "comment": format!("swap {i}")}),
            )
            .await;
        let acked = Instant::now();
        assert_eq!(status, 200, "swap {i}: {body:#}");
        assert_eq!(body["activated"]["drained"], true, "{body:#}");
        version = body["activated"]["version"].as_u64().expect("version");
        acks.push((acked, version));
        put_ms.push((acked - t0).as_secs_f64() * 1000.0);
        activation_ms.push(body["activated"]["activationMs"].as_f64().expect("ms"));
    }
    tokio::time::sleep(gap).await;
    stop.store(true, Ordering::Relaxed);
    let samples = loaded.await.expect("load");
    let elapsed = started.elapsed().as_secs_f64();

    let failed = samples.iter().filter(|s| s.status != 200).count();
    let unversioned = samples.iter().filter(|s| s.version.is_none()).count();
    // A request sent after swap k was acknowledged must be decided by version ≥ k's.
    let stale = samples
        .iter()
        .filter(|s| {
            let floor = acks
                .iter()
                .filter(|(at, _)| *at < s.sent)
                .map(|(_, v)| *v)
                .max();
            matches!((floor, s.version), (Some(f), Some(v)) if v < f)
        })
        .count();
    let mut seen: Vec<u64> = samples.iter().filter_map(|s| s.version).collect();
    seen.sort_unstable();
    seen.dedup();
    put_ms.sort_by(f64::total_cmp);
    activation_ms.sort_by(f64::total_cmp);
    let rate = samples.len() as f64 / elapsed;
    println!(
        "reviews: {} in {elapsed:.1} s = {rate:.0}/s under {swaps} swaps (baseline without swaps \
         {base_rate:.0}/s, ratio {:.2}); failed {failed}, stale {stale}, versions seen {seen:?}",
        samples.len(),
        rate / base_rate
    );
    println!(
        "swap latency PUT → in effect (acknowledged after the drain): p50 {:.1} ms, p99 {:.1} ms; \
         server-side activation (swap + drain) p50 {:.2} ms, p99 {:.2} ms",
        percentile(&put_ms, 0.5),
        percentile(&put_ms, 0.99),
        percentile(&activation_ms, 0.5),
        percentile(&activation_ms, 0.99),
    );
    assert_eq!(failed, 0, "failed requests during swaps");
    assert_eq!(unversioned, 0, "decisions without a version");
    assert_eq!(
        stale, 0,
        "requests sent after an acknowledged swap decided by an older version"
    );
    assert!(
        seen.len() as u64 >= swaps.min(3),
        "the load saw too few versions ({seen:?}) to show the swaps"
    );
}
