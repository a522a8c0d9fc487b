//! Observability (issue 41): a job is one OpenTelemetry trace from its HTTP submission
//! to its RayJob's deletion, exported over OTLP/HTTP to a real receiver
//! (`tests/otlp/receiver.py`, the official `opentelemetry-proto` messages) by a
//! `forge-gateway serve` process configured only by the standard `OTEL_*` variables;
//! reviews are traced only when their caller sent a `traceparent`; the JSON log lines
//! of a job's spans carry its trace id; and every metric the shipped dashboard and
//! alert rules query is exposed by a running gateway.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{marker_zip, one_gpu_spec, rayjob_names, rayjobs, submission_form, zip_of};
use forge_tests::otlp::{self, Receiver};
use forge_tests::plugins::workspace_root;
use forge_tests::procs::{
    Emulator, Gateway, GatewayOptions, NAMESPACE, TOKEN, write_gateway_files,
};
use forge_tests::wait::eventually;
use serde_json::Value;

/// The chain `write_gateway_files` configures, in order.
const CHAIN: [&str; 3] = ["pool-series", "team-quota", "rwo-guard"];

/// Spans a finished job's trace has after its submission, one each.
const LIFECYCLE: [&str; 8] = [
    "forge.capsule.store",
    "forge.job.queue_wait",
    "forge.dispatch",
    "forge.rayjob.create",
    "forge.job.initializing",
    "forge.job.running",
    "forge.logs.archive",
    "forge.rayjob.delete",
];

/// An emulator and a traced gateway process exporting to `receiver`.
struct Traced {
    emulator: Emulator,
    gateway: Gateway,
    /// Last, so a failing test's logs are still there when its processes report them.
    dir: tempfile::TempDir,
}

impl Traced {
    async fn start(receiver: &Receiver) -> Traced {
        let dir = tempfile::tempdir().expect("tempdir");
        write_gateway_files(dir.path());
        let emulator = Emulator::start(dir.path(), "h100=1x8").await;
        let opts = GatewayOptions::new("traced", dir.path(), &emulator)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.clone())
            .env("OTEL_BSP_SCHEDULE_DELAY", "100")
            .env("FORGE_LOG_FORMAT", "json");
        let gateway = Gateway::start(&opts).await;
        Traced {
            dir,
            emulator,
            gateway,
        }
    }

    /// Submits the marker job (sleeping `secs`), with `traceparent` if given.
    async fn submit(&self, name: &str, secs: f64, traceparent: Option<&str>) -> String {
        let runs = self.dir.path().join("runs");
        std::fs::create_dir_all(&runs).expect("runs dir");
        let spec = one_gpu_spec(name, "python3 job.py");
        let mut req = reqwest::Client::new()
            .post(format!("{}/v1/jobs", self.gateway.url))
            .bearer_auth(TOKEN)
            .multipart(submission_form(&spec, marker_zip(&runs, secs)));
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        let resp = req.send().await.expect("submit");
        let status = resp.status();
        let body: Value = resp.json().await.expect("job JSON");
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().expect("id").to_string()
    }
}

/// Spans by name (several of a name kept in order).
fn by_name(spans: &[Value]) -> BTreeMap<String, Vec<&Value>> {
    let mut out: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for s in spans {
        out.entry(s["name"].as_str().unwrap_or("").to_string())
            .or_default()
            .push(s);
    }
    out
}

/// Waits until `trace_id` has a span named `last`, and returns the trace.
async fn trace_through(receiver: &Receiver, trace_id: &str, last: &str) -> Vec<Value> {
    eventually(
        &format!("a {last} span in trace {trace_id}"),
        Duration::from_secs(90),
        || async {
            let spans = receiver.trace(trace_id).await;
            if spans.iter().any(|s| s["name"] == last) {
                Ok(spans)
            } else {
                let names: Vec<Value> = spans.iter().map(|s| s["name"].clone()).collect();
                Err(Box::new(names) as Box<dyn std::fmt::Debug + Send>)
            }
        },
    )
    .await
}

/// Every span of the trace hangs from the root, and names the job and its team.
fn assert_one_tree(spans: &[Value], root: &Value, job_id: &str) {
    let ids: BTreeSet<&str> = spans.iter().filter_map(|s| s["spanId"].as_str()).collect();
    for s in spans {
        let name = &s["name"];
        assert_eq!(s["attributes"]["forge.job.id"], job_id, "{name}: {s}");
        assert_eq!(s["attributes"]["forge.team"], "team-a", "{name}: {s}");
        assert_eq!(s["resource"]["service.name"], "forge-gateway", "{name}");
        if s["spanId"] != root["spanId"] {
            let parent = s["parentSpanId"].as_str().unwrap_or("");
            assert!(
                ids.contains(parent),
                "{name} hangs from no span of the trace: {s}"
            );
        }
        let (start, end) = (&s["startTimeUnixNano"], &s["endTimeUnixNano"]);
        assert!(
            start.as_u64() <= end.as_u64(),
            "{name} ends before it starts: {s}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_one_trace_from_its_submission_to_its_rayjobs_deletion() {
    let Some(python) = otlp::python() else { return };
    let receiver = Receiver::start(&python).await;
    let cluster = Traced::start(&receiver).await;
    let (traceparent, trace_id, client_span) = otlp::new_traceparent();
    let id = cluster.submit("traced", 2.0, Some(&traceparent)).await;

    // The RayJob carries the job's trace context, and its Ray processes get it too.
    let api = rayjobs(cluster.emulator.kube.clone(), NAMESPACE);
    let rayjob = eventually("the job's RayJob", Duration::from_secs(30), || async {
        let names = rayjob_names(&api).await;
        match names.into_iter().find(|n| n.contains(&id)) {
            Some(n) => Ok(api.get(&n).await.expect("get RayJob")),
            None => Err(Box::new("no RayJob yet") as Box<dyn std::fmt::Debug + Send>),
        }
    })
    .await;
    let annotated = rayjob.metadata.annotations.clone().unwrap_or_default();
    let stored = annotated
        .get("forge.dev/traceparent")
        .expect("the traceparent annotation");
    assert!(
        stored.contains(&trace_id),
        "{stored} is not of trace {trace_id}"
    );
    let runtime_env = rayjob.data["spec"]["runtimeEnvYAML"].as_str().unwrap_or("");
    assert!(
        runtime_env.contains("TRACEPARENT") && runtime_env.contains(stored.as_str()),
        "the Ray processes do not get TRACEPARENT: {runtime_env}"
    );

    let client = cluster.gateway.client();
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(90))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{}", done[&id]);
    let spans = trace_through(&receiver, &trace_id, "forge.rayjob.delete").await;
    let named = by_name(&spans);

    // One root, the submission, whose parent is the client's span.
    let roots = &named["forge.job.submit"];
    assert_eq!(roots.len(), 1, "{spans:?}");
    let root = roots[0];
    assert_eq!(root["parentSpanId"], client_span, "{root}");
    assert_eq!(root["kind"], "SPAN_KIND_SERVER");
    assert_one_tree(&spans, root, &id);
    // The root, admission, a span per plugin and one per phase: nothing else, and ≥ 6.
    let expected = 2 + CHAIN.len() + LIFECYCLE.len();
    assert_eq!(spans.len(), expected, "{:?}", named.keys());

    // Admission: one span, and under it one span per plugin of the chain, in order.
    let admission = named["forge.admission"][0];
    assert_eq!(admission["parentSpanId"], root["spanId"]);
    let plugins = &named["forge.policy.plugin"];
    let names: Vec<&str> = plugins
        .iter()
        .map(|p| p["attributes"]["forge.plugin.name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, CHAIN, "{plugins:?}");
    for p in plugins {
        assert_eq!(p["parentSpanId"], admission["spanId"], "{p}");
        assert_eq!(p["attributes"]["forge.plugin.outcome"], "admit", "{p}");
        assert!(
            !p["attributes"]["forge.plugin.version"]
                .as_str()
                .unwrap_or("")
                .is_empty()
        );
        assert!(
            p["attributes"]["forge.plugin.elapsed_us"]
                .as_i64()
                .is_some(),
            "{p}"
        );
    }

    // Every phase of the job's life after it, once, in order of time.
    for name in LIFECYCLE {
        assert_eq!(
            named.get(name).map_or(0, Vec::len),
            1,
            "{name}: {:?}",
            named.keys()
        );
    }
    let start = |n: &str| named[n][0]["startTimeUnixNano"].as_u64().unwrap_or(0);
    let end = |n: &str| named[n][0]["endTimeUnixNano"].as_u64().unwrap_or(0);
    assert!(end("forge.job.queue_wait") <= start("forge.job.running"));
    assert!(end("forge.job.initializing") <= start("forge.job.running") + 1_000_000);
    assert!(end("forge.job.running") <= start("forge.rayjob.delete") + 1_000_000);
    assert_eq!(
        named["forge.rayjob.create"][0]["parentSpanId"],
        named["forge.dispatch"][0]["spanId"]
    );
    assert!(
        named["forge.job.queue_wait"][0]["attributes"]["forge.queue.reason"].is_string(),
        "the queue wait says why: {}",
        named["forge.job.queue_wait"][0]
    );

    // The log line written inside the archive span carries the trace id.
    let log = cluster.gateway.log();
    let line = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["fields"]["message"] == "logs archived" || l["message"] == "logs archived")
        .unwrap_or_else(|| panic!("no JSON `logs archived` line in the log:\n{log}"));
    assert_eq!(line["openTelemetry"]["traceId"], trace_id, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_client_context_roots_its_own_trace_and_reviews_follow_their_caller() {
    let Some(python) = otlp::python() else { return };
    let receiver = Receiver::start(&python).await;
    let cluster = Traced::start(&receiver).await;

    // No traceparent: the submission is a root of its own.
    let id = cluster.submit("untraced-client", 0.1, None).await;
    let spans = eventually(
        "the job's submission span",
        Duration::from_secs(30),
        || async {
            let all = receiver.received().await;
            let root = all["spans"].as_array().and_then(|s| {
                s.iter()
                    .find(|s| {
                        s["name"] == "forge.job.submit" && s["attributes"]["forge.job.id"] == id
                    })
                    .cloned()
            });
            root.ok_or_else(|| Box::new(all["requests"].clone()) as Box<dyn std::fmt::Debug + Send>)
        },
    )
    .await;
    assert_eq!(spans["parentSpanId"], "", "{spans}");

    // A review without a traceparent is not traced; one with a traceparent is, with
    // its plugins. The exporter sends in order: once the second is in, the first
    // would be too.
    let review = |tp: Option<String>| {
        let mut req = reqwest::Client::new()
            .post(format!("{}/v1/admission/review", cluster.gateway.url))
            .bearer_auth(TOKEN)
            .json(&one_gpu_spec("reviewed", "python3 job.py"));
        if let Some(tp) = tp {
            req = req.header("traceparent", tp);
        }
        async move {
            let r = req.send().await.expect("review");
            assert_eq!(r.status(), 200);
        }
    };
    review(None).await;
    let (traceparent, trace_id, client_span) = otlp::new_traceparent();
    review(Some(traceparent)).await;
    let reviewed = trace_through(&receiver, &trace_id, "forge.admission.review").await;
    let named = by_name(&reviewed);
    let root = named["forge.admission.review"][0];
    assert_eq!(root["parentSpanId"], client_span);
    assert_eq!(
        named["forge.policy.plugin"].len(),
        CHAIN.len(),
        "{reviewed:?}"
    );
    let all = receiver.received().await;
    let reviews = all["spans"].as_array().map_or(0, |s| {
        s.iter()
            .filter(|s| s["name"] == "forge.admission.review")
            .count()
    });
    assert_eq!(reviews, 1, "an untraced review made a span");
}

/// Metric family names the shipped dashboard and alert rules query
/// (`deploy/observability/dashboard_metrics.py`).
fn queried_metrics() -> Vec<String> {
    let root = workspace_root();
    let out = std::process::Command::new("python3")
        .arg(root.join("deploy/observability/dashboard_metrics.py"))
        .current_dir(&root)
        .output()
        .expect("run dashboard_metrics.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
}

/// The families `/metrics` declares (`# TYPE <name> …`), with a counter's samples'
/// `_total` name too.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            if kind == "counter" {
                out.insert(format!("{name}_total"));
            }
            out.insert(name.to_string());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exposed() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    // What a working gateway has done: a job runs, one was refused, one waits. The
    // first runs until the test ends: had it ended, the 8-GPU job would not wait (a
    // run on a fast machine once saw both succeed and no team's queue).
    let client = gw.client(&gw.token);
    let code = || zip_of(&[("job.py", "print(1)")]);
    let runs = "python3 -c \"import time; print(1, flush=True); time.sleep(600)\"";
    let ran = client.submit_ok(&one_gpu_spec("ran", runs), code()).await;
    client.wait_running(&ran, Duration::from_secs(60)).await;
    let mut refused = one_gpu_spec("refused", "python3 job.py");
    refused["pools"][0]["series"] = "a100".into();
    let (status, body) = client.submit(&refused, code()).await;
    assert_eq!(status, 403, "{body}");
    let mut waits = one_gpu_spec("waits", "python3 job.py");
    waits["pools"][0]["gpusPerNode"] = 8.into();
    client.submit_ok(&waits, code()).await;
    let queried = queried_metrics();
    assert!(queried.len() >= 15, "too few metrics found: {queried:?}");
    // The waiting job's team shows in the queue once a dispatcher pass has seen it.
    let text = eventually(
        "every queried metric exposed",
        Duration::from_secs(30),
        || async {
            let text = gw.metrics().await;
            let have = exposed(&text);
            let missing: Vec<String> = queried
                .iter()
                .filter(|m| !have.contains(*m))
                .cloned()
                .collect();
            if missing.is_empty() {
                Ok(text)
            } else {
                Err(
                    Box::new(format!("queried but not exposed: {missing:?}\n{text}"))
                        as Box<dyn std::fmt::Debug + Send>,
                )
            }
        },
    )
    .await;
    // The scrape-time capacity gauges describe the emulated node.
    assert!(
        text.contains(r#"forge_capacity_gpus{series="h100",state="total"} 8"#),
        "{text}"
    );
}
