//! The emulator driven by the installed `kubectl` (v1.32) through the kubeconfig
//! the emulator writes: its bearer token, discovery, get/describe/delete/logs, `cordon`, `apply -f` of a
//! KubeRay-sample RayJob (and a schema-violating one), `get -w`, and — with the
//! simulated controllers in process mode — a KubeRay-sample RayJob applied with
//! `kubectl apply -f` that waits while `kubectl cordon` leaves no node, then runs to
//! Complete / SUCCEEDED after `kubectl uncordon`, its output in `kubectl logs`; and
//! KubeRay's own `ray-job.sample.yaml` (ConfigMap + RayJob, verbatim) run by real Ray
//! with its runtime env's `pip` packages installed, to SUCCEEDED.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::time::Instant;

use crate::support::{fixture, pod, rayjobs, start_bare, start_process, start_with};
use forge_kubesim::{NodeSpec, SimConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const KUBECTL: &str = "/usr/bin/kubectl";

struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    /// Runs kubectl; returns (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::process::Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("HOME", self.kubeconfig.parent().expect("dir"))
            .output()
            .await
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }
}

fn kubectl_available() -> bool {
    if Path::new(KUBECTL).exists() {
        true
    } else {
        eprintln!("skipping: {KUBECTL} not installed");
        false
    }
}

#[tokio::test]
async fn kubectl_get_describe_cordon_logs_delete() {
    if !kubectl_available() {
        return;
    }
    let sim = start_bare().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl { kubeconfig };
    let client = sim.client().expect("client");

    let nodes = k.ok(&["get", "nodes", "-o", "name"]).await;
    assert_eq!(
        nodes.lines().collect::<Vec<_>>(),
        vec!["node/a100-0", "node/h100-0", "node/h100-1"]
    );
    let by_short = k
        .ok(&["get", "no", "-l", "starforge/gpu-series=h100", "-o", "name"])
        .await;
    assert_eq!(by_short.lines().count(), 2);

    // cordon / uncordon flip spec.unschedulable.
    let out = k.ok(&["cordon", "h100-0"]).await;
    assert!(out.contains("node/h100-0 cordoned"), "{out}");
    let node_api: Api<Node> = Api::all(client.clone());
    let n = node_api.get("h100-0").await.expect("node");
    assert_eq!(n.spec.and_then(|s| s.unschedulable), Some(true));
    k.ok(&["uncordon", "h100-0"]).await;
    let n = node_api.get("h100-0").await.expect("node");
    assert_ne!(n.spec.and_then(|s| s.unschedulable), Some(true));

    // A pod with an event and logs: get, describe, logs, delete.
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod("demo", json!({"app": "demo"}))).expect("pod"),
        )
        .await
        .expect("pod");
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client.clone());
    let ev = json!({
        "metadata": {"name": "demo.1"},
        "involvedObject": {"kind": "Pod", "namespace": "starforge", "name": "demo", "uid": p.metadata.uid, "apiVersion": "v1"},
        "reason": "FailedScheduling", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "type": "Warning", "source": {"component": "default-scheduler"}, "count": 1,
    });
    events
        .create(
            &PostParams::default(),
            &serde_json::from_value(ev).expect("event"),
        )
        .await
        .expect("event");
    sim.logs().append(
        "starforge",
        "demo",
        "main",
        b"hello from demo\nsecond line\n",
    );
    let out = k.ok(&["get", "po", "-o", "name"]).await;
    assert_eq!(out.trim(), "pod/demo");
    let out = k.ok(&["get", "pods"]).await;
    assert!(out.contains("demo"), "{out}");
    let out = k.ok(&["describe", "pod", "demo"]).await;
    assert!(out.contains("Name:") && out.contains("demo"), "{out}");
    assert!(
        out.contains("FailedScheduling") && out.contains("Insufficient nvidia.com/gpu"),
        "describe shows events: {out}"
    );
    let out = k
        .ok(&["get", "ev", "-o", "jsonpath={.items[*].reason}"])
        .await;
    assert_eq!(out, "FailedScheduling");
    let out = k.ok(&["logs", "demo"]).await;
    assert_eq!(out, "hello from demo\nsecond line\n");
    let out = k.ok(&["logs", "demo", "--tail=1"]).await;
    assert_eq!(out, "second line\n");
    let out = k.ok(&["delete", "pod", "demo"]).await;
    assert!(out.contains("pod \"demo\" deleted"), "{out}");
    assert!(pods.get_opt("demo").await.expect("get").is_none());
    let (ok, _, err) = k.run(&["get", "pod", "demo"]).await;
    assert!(
        !ok && err.contains("NotFound") && err.contains("pods \"demo\" not found"),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_apply_rayjob_sample_and_invalid() {
    if !kubectl_available() {
        return;
    }
    let sim = start_bare().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl { kubeconfig };
    let sample = fixture("rayjob-sample.yaml");
    let out = k.ok(&["apply", "-f", sample.to_str().expect("utf8")]).await;
    assert!(out.contains("rayjob.ray.io/rayjob-sample created"), "{out}");
    let api = rayjobs(&sim.client().expect("client"));
    let rj = api.get("rayjob-sample").await.expect("created");
    assert_eq!(
        rj.data["spec"]["submissionMode"], "K8sJobMode",
        "CRD default applied"
    );
    assert!(
        rj.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubectl.kubernetes.io/last-applied-configuration"))
    );
    // Re-applying the same manifest changes nothing. kubectl still sends a merge patch
    // ("configured") because CRD defaults inside lists (ports[].protocol) make the live
    // lists differ from the manifest, exactly as against a real API server; the
    // server treats it as a no-op and keeps the resourceVersion.
    let out = k.ok(&["apply", "-f", sample.to_str().expect("utf8")]).await;
    assert!(
        out.contains("rayjob.ray.io/rayjob-sample configured") || out.contains("unchanged"),
        "{out}"
    );
    let again = api.get("rayjob-sample").await.expect("still there");
    assert_eq!(
        again.metadata.resource_version, rj.metadata.resource_version,
        "no-op apply"
    );
    let out = k.ok(&["get", "rayjobs", "-o", "name"]).await;
    assert_eq!(out.trim(), "rayjob.ray.io/rayjob-sample");
    let out = k
        .ok(&[
            "get",
            "rayjob",
            "rayjob-sample",
            "-o",
            "jsonpath={.spec.backoffLimit}",
        ])
        .await;
    assert_eq!(out, "0");
    k.ok(&["describe", "rayjob", "rayjob-sample"]).await;

    let invalid = fixture("rayjob-invalid.yaml");
    let (ok, _, err) = k
        .run(&["apply", "-f", invalid.to_str().expect("utf8")])
        .await;
    assert!(!ok, "invalid RayJob rejected");
    assert!(
        err.contains("is invalid")
            && err.contains("spec.rayClusterSpec.workerGroupSpecs[0].groupName: Required value"),
        "{err}"
    );

    let out = k.ok(&["delete", "rayjob", "rayjob-sample"]).await;
    assert!(out.contains("deleted"), "{out}");
    sim.shutdown().await;
}

/// Against a server with a token, kubectl works through the kubeconfig the emulator
/// writes (it carries the token) and is refused with another token.
#[tokio::test]
async fn kubectl_uses_the_token_of_the_kubeconfig() {
    if !kubectl_available() {
        return;
    }
    let sim = start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=1x8").expect("layout"),
        run_controllers: false,
        token: Some("kubectl-token-1".into()),
        ..SimConfig::default()
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl { kubeconfig };
    let out = k.ok(&["get", "nodes", "-o", "name"]).await;
    assert_eq!(out.trim(), "node/h100-0");
    let (ok, _, err) = k.run(&["get", "nodes", "--token", "not-it"]).await;
    assert!(!ok, "another token is refused");
    assert!(
        err.contains("You must be logged in to the server (Unauthorized)"),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kubectl_get_watch_prints_changes() {
    if !kubectl_available() {
        return;
    }
    let sim = start_bare().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("first", json!({}))).expect("pod"),
    )
    .await
    .expect("pod");
    let mut child = tokio::process::Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["get", "pods", "-w", "-o", "name"])
        .env("HOME", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl -w");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("initial list")
        .expect("read")
        .expect("line");
    assert_eq!(first, "pod/first");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("second", json!({}))).expect("pod"),
    )
    .await
    .expect("pod");
    let next = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("watch event")
        .expect("read")
        .expect("line");
    assert_eq!(next, "pod/second");
    child.kill().await.expect("kill kubectl");
    sim.shutdown().await;
}

impl Kubectl {
    /// Polls `kubectl args` until its stdout satisfies `done`, or panics after `secs`.
    async fn wait_for(&self, secs: u64, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let (ok, out, err) = self.run(args).await;
            if ok && done(&out) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting on kubectl {args:?}: stdout {out:?} stderr {err:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `kubectl apply -f` of a RayJob shaped like KubeRay's `ray-job.sample.yaml`
/// (fixture on disk) against the emulator with its controllers in process mode. With
/// both nodes cordoned through `kubectl cordon` the head pod stays Pending with the
/// scheduler's `FailedScheduling` event; after `kubectl uncordon` the job runs through
/// the simulated operator to Complete / SUCCEEDED and `kubectl logs` of the submitter
/// pod shows the entrypoint's output (with `env_vars` from `runtimeEnvYAML`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_sample_rayjob_runs_to_complete_in_process_mode() {
    if !kubectl_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = start_process("h100=2x8", &dir.path().join("scratch")).await;
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl { kubeconfig };

    for node in ["h100-0", "h100-1"] {
        let out = k.ok(&["cordon", node]).await;
        assert!(out.contains(&format!("node/{node} cordoned")), "{out}");
    }
    let sample = fixture("rayjob-sample-process.yaml");
    let out = k.ok(&["apply", "-f", sample.to_str().expect("utf8")]).await;
    assert!(out.contains("rayjob.ray.io/rayjob-sample created"), "{out}");

    // Cordoned: the head pod cannot bind, and the scheduler says why.
    let cluster = k
        .wait_for(
            30,
            &[
                "get",
                "rayjob",
                "rayjob-sample",
                "-o",
                "jsonpath={.status.rayClusterName}",
            ],
            |o| !o.is_empty(),
        )
        .await;
    let head_sel = format!("ray.io/cluster={cluster},ray.io/node-type=head");
    let head = k
        .wait_for(30, &["get", "pods", "-l", &head_sel, "-o", "name"], |o| {
            o.starts_with("pod/")
        })
        .await;
    let head = head.trim().trim_start_matches("pod/").to_owned();
    // The scheduler writes events.k8s.io/v1 Events (`note` is their message).
    let msg = k
        .wait_for(
            30,
            &[
                "get",
                "events.events.k8s.io",
                "--field-selector",
                &format!("regarding.name={head},reason=FailedScheduling"),
                "-o",
                "jsonpath={.items[0].note}",
            ],
            |o| !o.is_empty(),
        )
        .await;
    assert!(
        msg.starts_with("0/2 nodes are available: 2 node(s) were unschedulable."),
        "{msg}"
    );
    let phase = k
        .ok(&[
            "get",
            "pod",
            &head,
            "-o",
            "jsonpath={.status.phase} {.spec.nodeName}",
        ])
        .await;
    assert_eq!(phase.trim(), "Pending", "not bound while cordoned");
    let state = k
        .ok(&[
            "get",
            "rayjob",
            "rayjob-sample",
            "-o",
            "jsonpath={.status.jobDeploymentStatus}",
        ])
        .await;
    assert_eq!(state, "Initializing");

    // Uncordoned: it schedules and runs to the end.
    for node in ["h100-0", "h100-1"] {
        k.ok(&["uncordon", node]).await;
    }
    let done = k
        .wait_for(
            90,
            &[
                "get",
                "rayjob",
                "rayjob-sample",
                "-o",
                "jsonpath={.status.jobDeploymentStatus}/{.status.jobStatus}",
            ],
            |o| o.starts_with("Complete/") || o.starts_with("Failed/"),
        )
        .await;
    assert_eq!(done, "Complete/SUCCEEDED");
    let bound = k
        .ok(&["get", "pod", &head, "-o", "jsonpath={.spec.nodeName}"])
        .await;
    assert!(
        bound.starts_with("h100-"),
        "head bound after uncordon: {bound}"
    );

    let log = sample_counted_to_five(&k).await;
    assert!(log.contains("sample done"), "{log}");
    sim.shutdown().await;
}

/// The submitter pod of `rayjob-sample` (`pod/<name>`).
async fn submitter_of_sample(k: &Kubectl) -> String {
    let out = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "batch.kubernetes.io/job-name=rayjob-sample",
            "-o",
            "name",
        ])
        .await;
    let pod = out.trim().to_owned();
    assert!(pod.starts_with("pod/rayjob-sample-"), "{pod}");
    pod
}

/// The sample's submitter log, which must show its counter going 1..=5 (in order,
/// nothing else counted).
async fn sample_counted_to_five(k: &Kubectl) -> String {
    let log = k.ok(&["logs", submitter_of_sample(k).await.as_str()]).await;
    let counted: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("test_counter got "))
        .collect();
    let expected: Vec<String> = (1..=5).map(|i| format!("test_counter got {i}")).collect();
    assert_eq!(counted, expected, "{log}");
    log
}

/// The Ray installation `tests/run.sh` provides (`FORGE_TEST_RAY_VENV`): its `bin`
/// stands for what the Ray image puts on `PATH`. `None` outside CI when it is missing
/// (the test says so); in CI a missing Ray is a failure.
fn ray_venv() -> Option<PathBuf> {
    match std::env::var_os("FORGE_TEST_RAY_VENV") {
        Some(v) if Path::new(&v).join("bin/python").exists() => Some(PathBuf::from(v)),
        _ if std::env::var_os("CI").is_some() => {
            panic!("FORGE_TEST_RAY_VENV must name a venv with ray (tests/run.sh makes one)")
        }
        _ => {
            eprintln!("skipping: FORGE_TEST_RAY_VENV (a venv with ray) is not set");
            None
        }
    }
}

/// KubeRay's `ray-job.sample.yaml` as published (a RayJob whose entrypoint runs
/// `sample_code.py` from the ConfigMap that follows it in the file), applied with
/// `kubectl`: the head mounts the ConfigMap, the driver runs the sample with real Ray
/// (`ray.init()`, a `Counter` actor) under its runtime env — `env_vars` and the `pip`
/// packages, really installed, which the sample checks (`requests` 2.26.0) — and the
/// RayJob ends Complete / SUCCEEDED with the actor's lines in the submitter's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kuberay_sample_runs_with_real_ray_to_succeeded() {
    if !kubectl_available() {
        return;
    }
    let Some(venv) = ray_venv() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=2x8").expect("layout"),
        controllers: forge_kubesim::ControllerConfig {
            scratch_root: dir.path().join("scratch"),
            image_path: vec![venv.join("bin")],
            ray: Some(
                forge_kubesim::controllers::ray::install::RayInstall::from_venv(&venv)
                    .expect("a venv with ray"),
            ),
            ..forge_kubesim::testing::process_controllers()
        },
        ..SimConfig::default()
    })
    .await;
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let k = Kubectl { kubeconfig };
    let sample = fixture("kuberay/ray-job.sample.yaml");
    let out = k.ok(&["apply", "-f", sample.to_str().expect("utf8")]).await;
    assert!(out.contains("rayjob.ray.io/rayjob-sample created"), "{out}");
    assert!(
        out.contains("configmap/ray-job-code-sample created"),
        "{out}"
    );
    // Installing the sample's packages (pendulum 2.1.2 builds from source) takes a while.
    let done = k
        .wait_for(
            300,
            &[
                "get",
                "rayjob",
                "rayjob-sample",
                "-o",
                "jsonpath={.status.jobDeploymentStatus}/{.status.jobStatus}",
            ],
            |o| o.starts_with("Complete/") || o.starts_with("Failed/"),
        )
        .await;
    if done != "Complete/SUCCEEDED" {
        let log = k
            .ok(&["logs", submitter_of_sample(&k).await.as_str()])
            .await;
        panic!("the sample ended {done}; submitter log:\n{log}");
    }
    sample_counted_to_five(&k).await;
    sim.shutdown().await;
}
