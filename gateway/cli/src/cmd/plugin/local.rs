//! `forge plugin run` and `forge plugin bench`: a component evaluated on a request in
//! `forge-policy-host` — the gateway's own host: the same load checks (a component of
//! a supported contract version importing nothing but `forge:policy/host`), the same
//! settings check, deadline and memory cap (the gateway's defaults unless told), the
//! same chain semantics and decision checks. Plugin logs go to stderr.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_policy_host::model::PolicyRequest;
use forge_policy_host::{Chain, ChainLink, ChainOutcome, EngineLimits, Plugin, PolicyEngine};
use serde_json::json;

use crate::cmd::jobs::{print_decision, trace_table};
use crate::exit::{CliError, code};
use crate::output::{Format, emit};
use crate::progress::note;

/// What both commands evaluate.
#[derive(Debug, clap::Args)]
pub struct Evaluation {
    /// The component (`.wasm`)
    pub component: PathBuf,
    /// The policy request (JSON: job, cluster, usage — see a scaffold's request.json)
    #[arg(long)]
    pub request: PathBuf,
    /// The plugin's settings (JSON) [default: {}]
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// Per-call deadline, like FORGE_POLICY_DEADLINE_MS
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub deadline_ms: u64,
    /// Memory cap, like FORGE_POLICY_MEMORY_MIB
    #[arg(long, value_name = "MIB", default_value_t = 32)]
    pub memory_mib: u64,
}

/// Arguments of `forge plugin run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub eval: Evaluation,
}

/// Arguments of `forge plugin bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub eval: Evaluation,
    /// Measured evaluations
    #[arg(long, default_value_t = 1000)]
    pub iterations: u32,
    /// Evaluations before measuring
    #[arg(long, default_value_t = 50)]
    pub warmup: u32,
}

fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// Plugin logs (`forge::plugin`) on stderr at `level`.
fn show_plugin_logs(level: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "forge::plugin={level}"
        )))
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .with_ansi(false)
        .try_init();
}

/// Where compiled plugins are kept between runs: `$XDG_CACHE_HOME/forge/plugins`
/// (`~/.cache/forge/plugins`), so running or benchmarking the same component again
/// does not compile it again (a Python or TypeScript component takes seconds). Every
/// artifact is verified before it is loaded, as the gateway's are; without a cache
/// directory nothing is kept.
fn cache_dir() -> Option<std::path::PathBuf> {
    let dir = dirs::cache_dir()?.join("forge").join("plugins");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// The chain of one plugin, and the request.
fn load(e: &Evaluation) -> Result<(Chain, PolicyRequest, String), CliError> {
    let engine = PolicyEngine::new(
        EngineLimits {
            deadline: Duration::from_millis(e.deadline_ms),
            memory_cap_bytes: usize::try_from(e.memory_mib << 20).unwrap_or(usize::MAX),
            ..EngineLimits::default()
        },
        cache_dir(),
    )
    .map_err(|err| CliError::local("the policy engine", err))?;
    let name = e
        .component
        .file_stem()
        .map_or_else(|| "plugin".into(), |s| s.to_string_lossy().into_owned());
    let bytes = read(&e.component)?;
    let plugin = Plugin::load(&engine, &name, &bytes).map_err(|err| {
        CliError::Local(format!("{} refused at load: {err}", e.component.display()))
    })?;
    let settings = match &e.settings {
        Some(p) => String::from_utf8(read(p)?)
            .map_err(|err| CliError::Usage(format!("{}: {err}", p.display())))?,
        None => "{}".into(),
    };
    let chain = Chain::new(&engine, vec![ChainLink { plugin, settings }])
        .map_err(|err| CliError::Local(format!("settings refused: {err}")))?;
    let request: PolicyRequest = serde_json::from_slice(&read(&e.request)?).map_err(|err| {
        CliError::Usage(format!(
            "{}: not a policy request: {err}",
            e.request.display()
        ))
    })?;
    Ok((chain, request, name))
}

fn evaluate(chain: &Chain, request: &PolicyRequest) -> Result<ChainOutcome, CliError> {
    chain.evaluate(request).map_err(|err| {
        CliError::Local(format!(
            "the plugin failed (the gateway fails closed): {err}"
        ))
    })
}

/// `forge plugin run`: exits 6 when the decision is a rejection.
pub async fn run(args: RunArgs, format: Format) -> Result<u8, CliError> {
    show_plugin_logs("debug");
    let (outcome, took) = tokio::task::spawn_blocking(move || {
        let (chain, request, _) = load(&args.eval)?;
        let started = Instant::now();
        let outcome = evaluate(&chain, &request)?;
        Ok::<_, CliError>((outcome, started.elapsed()))
    })
    .await
    .map_err(|e| CliError::local("evaluating", e))??;
    let value = json!({
        "decision": outcome.decision,
        "trace": outcome.trace,
        "elapsedUs": u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
    });
    emit(format, &value, || {
        let d = &value["decision"];
        print_decision(d);
        if d["kind"] == "admit" {
            println!("placement {}", d["placement"]);
        }
        println!(
            "time      {} µs (a fresh instance, as in the gateway)",
            value["elapsedUs"]
        );
        if let Some(trace) = value["trace"].as_array() {
            println!("{}", trace_table(trace));
        }
    })?;
    if value["decision"]["kind"] == "reject" {
        return Ok(code::REJECTED);
    }
    Ok(code::OK)
}

/// `forge plugin bench`.
pub async fn bench(args: BenchArgs, format: Format) -> Result<u8, CliError> {
    show_plugin_logs("warn");
    let iterations = args.iterations.max(1);
    let warmup = args.warmup;
    let (mut samples, name) = tokio::task::spawn_blocking(move || {
        let (chain, request, name) = load(&args.eval)?;
        let chain = Arc::new(chain);
        for _ in 0..warmup {
            evaluate(&chain, &request)?;
        }
        let mut samples = Vec::with_capacity(iterations as usize);
        for _ in 0..iterations {
            let started = Instant::now();
            evaluate(&chain, &request)?;
            samples.push(started.elapsed());
        }
        Ok::<_, CliError>((samples, name))
    })
    .await
    .map_err(|e| CliError::local("benchmarking", e))??;
    samples.sort_unstable();
    let pct = |p: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i.min(samples.len() - 1)]
    };
    let total: Duration = samples.iter().sum();
    let mean = total / u32::try_from(samples.len()).unwrap_or(u32::MAX);
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let report = json!({
        "plugin": name,
        "iterations": samples.len(),
        "p50Us": us(pct(0.50)),
        "p99Us": us(pct(0.99)),
        "meanUs": us(mean),
        "minUs": us(samples[0]),
        "maxUs": us(samples[samples.len() - 1]),
    });
    emit(format, &report, || {
        note(format!(
            "{name}: {} evaluations, each on a fresh instance",
            samples.len()
        ));
        println!(
            "p50 {} µs   p99 {} µs   mean {} µs   min {} µs   max {} µs",
            report["p50Us"], report["p99Us"], report["meanUs"], report["minUs"], report["maxUs"]
        );
    })?;
    Ok(code::OK)
}
