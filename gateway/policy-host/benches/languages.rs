//! Benchmark: the same rule (`scratch-guard`) written in Rust, Python and TypeScript, as
//! components in the real host, side by side in one run: component size, compile time
//! (no cache), load time from the precompile cache (what a gateway restart pays), and
//! per-call latency p50/p99 of one plugin call (a fresh instance per call, settings
//! parsed per call, as admission runs it) on an admitted scratch job.
//!
//! Run: `cargo bench -p forge-policy-host --bench languages` (needs the SDK toolchains:
//! `bash plugin-sdk/install-toolchains.sh`). `FORGE_BENCH_CALLS` sets the number of
//! timed calls per language (default 5000).

#[path = "../tests/it/support.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use forge_policy_host::model::PolicyRequest;
use forge_policy_host::{EngineLimits, Plugin, PluginLimits, PolicyEngine};

const LANGUAGES: [(&str, &str); 3] = [
    ("rust", "scratch-guard"),
    ("python", "scratch-guard-py"),
    ("typescript", "scratch-guard-ts"),
];

fn limits() -> EngineLimits {
    EngineLimits {
        deadline: Duration::from_secs(1),
        ..EngineLimits::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // Cargo passes `--bench`; nothing to filter.
    let calls: usize = std::env::var("FORGE_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let table: serde_json::Value =
        serde_json::from_slice(&support::fixture("plugins/scratch-guard-cases.json"))
            .expect("table");
    let settings = table["settings"].to_string();
    // "scratch job on idle GPUs: admitted and labelled": the rule's full path.
    let request: PolicyRequest =
        serde_json::from_value(table["decisions"][1]["request"].clone()).expect("request");
    let plugin_limits = PluginLimits {
        memory_cap_bytes: 128 << 20,
        deadline: Duration::from_secs(1),
    };
    let cache = tempfile_dir();

    println!(
        "| language | component | compile (no cache) | load from cache | call p50 | call p99 | mean | vs Rust (p50) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut rust_p50 = None;
    for (lang, dir) in LANGUAGES {
        let bytes = support::component(dir);
        // Compile: an engine without a cache.
        let cold = PolicyEngine::new(limits(), None).expect("engine");
        let t = Instant::now();
        Plugin::load_with_limits(&cold, lang, "bench", &bytes, plugin_limits).expect("load");
        let compile = t.elapsed();
        // Fill the cache, then load as a restarted gateway does.
        let first = PolicyEngine::new(limits(), Some(cache.clone())).expect("engine");
        Plugin::load_with_limits(&first, lang, "bench", &bytes, plugin_limits).expect("load");
        let restarted = PolicyEngine::new(limits(), Some(cache.clone())).expect("engine");
        let t = Instant::now();
        let plugin = Plugin::load_with_limits(&restarted, lang, "bench", &bytes, plugin_limits)
            .expect("load");
        let from_cache = t.elapsed();
        assert_eq!(restarted.compilations(), 0, "{lang}: loaded from the cache");

        for _ in 0..calls.min(200) {
            plugin.evaluate(&settings, &request).expect("warm-up");
        }
        let mut times = Vec::with_capacity(calls);
        let started = Instant::now();
        for _ in 0..calls {
            let t = Instant::now();
            let d = plugin.evaluate(&settings, &request).expect("call");
            times.push(t.elapsed());
            std::hint::black_box(d);
        }
        let mean = started.elapsed() / calls as u32;
        times.sort();
        let (p50, p99) = (percentile(&times, 0.50), percentile(&times, 0.99));
        let ratio = match rust_p50 {
            None => {
                rust_p50 = Some(p50);
                "1.0×".to_string()
            }
            Some(base) => format!("{:.0}×", us(p50) / us(base)),
        };
        println!(
            "| {lang} | {:.1} MiB ({} bytes) | {:.0} ms | {:.1} ms | {:.0} µs | {:.0} µs | {:.0} µs | {ratio} |",
            bytes.len() as f64 / f64::from(1 << 20),
            bytes.len(),
            compile.as_secs_f64() * 1e3,
            from_cache.as_secs_f64() * 1e3,
            us(p50),
            us(p99),
            us(mean),
        );
    }
    println!("\n{calls} calls per language; fresh instance per call; release build.");
    let _ = std::fs::remove_dir_all(&cache);
}

/// A private precompile cache for this run.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = support::workspace_root()
        .join(format!("target/plugins/bench-cwasm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir
}
