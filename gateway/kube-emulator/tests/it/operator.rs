//! The simulated KubeRay operator, job controller and kubelet (process mode), driven
//! only through the `kube` client against a `forge_kubesim::Sim` on port 0: RayJobs
//! run to Complete/SUCCEEDED with the driver output in the submitter pod's log, fail
//! with AppFailed, get ValidationFailed, hit both deadlines, lose only their RayCluster
//! at the TTL, and a capsule init container really checks its SHA-256.

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use forge_kubesim::Sim;
use forge_kubesim::controllers::{raycluster_resource, rayjob_resource};
use forge_kubesim::schema;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, LogParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{NS, holds_for, rayclusters, rayjobs, start_process, wait_for};

async fn start(scratch: &std::path::Path) -> (Sim, kube::Client) {
    let sim = start_process("h100=2x8", scratch).await;
    let client = sim.client().expect("client");
    (sim, client)
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kubesim-op-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// A RayJob shaped like KubeRay's `ray-job.sample.yaml`, with a host-runnable entrypoint.
fn rayjob(name: &str, entrypoint: &str) -> Value {
    json!({
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": {"forge.dev/job-id": "j1", "forge.dev/team": "ml"}},
        "spec": {
            "entrypoint": entrypoint,
            "shutdownAfterJobFinishes": true,
            "runtimeEnvYAML": "env_vars:\n  counter_name: \"test_counter\"\n",
            "rayClusterSpec": {
                "rayVersion": "2.46.0",
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-head", "image": "rayproject/ray:2.46.0",
                        "ports": [{"containerPort": 6379, "name": "gcs-server"}, {"containerPort": 8265, "name": "dashboard"}],
                        "env": [{"name": "HEAD_ENV", "value": "from-head"}],
                        "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "200m"}},
                    }]}},
                },
                "workerGroupSpecs": [{
                    "replicas": 1, "minReplicas": 1, "maxReplicas": 5, "groupName": "small-group",
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [{
                        "name": "ray-worker", "image": "rayproject/ray:2.46.0",
                        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}, "requests": {"cpu": "200m"}},
                    }]}},
                }],
            },
        },
    })
}

async fn create(client: &kube::Client, obj: Value) -> DynamicObject {
    let api = rayjobs(client);
    let obj: DynamicObject = serde_json::from_value(obj).expect("rayjob object");
    api.create(&PostParams::default(), &obj)
        .await
        .expect("create rayjob")
}

async fn get(client: &kube::Client, name: &str) -> Option<DynamicObject> {
    let api = rayjobs(client);
    api.get_opt(name).await.expect("get rayjob")
}

fn status<'a>(rj: &'a DynamicObject, key: &str) -> &'a str {
    rj.data
        .pointer(&format!("/status/{key}"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

async fn wait_state(
    client: &kube::Client,
    name: &str,
    states: &[&str],
    secs: u64,
) -> DynamicObject {
    wait_for(secs, &format!("{name} in {states:?}"), || async {
        let rj = get(client, name).await?;
        states
            .contains(&status(&rj, "jobDeploymentStatus"))
            .then_some(rj)
    })
    .await
}

async fn events(client: &kube::Client) -> Vec<Event> {
    Api::<Event>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
}

async fn submitter_pod(client: &kube::Client, rayjob: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={rayjob}"));
    pods.list(&lp)
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("a submitter pod")
}

async fn submitter_log(client: &kube::Client, rayjob: &str) -> String {
    let pod = submitter_pod(client, rayjob).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = LogParams {
        container: Some("ray-job-submitter".into()),
        ..LogParams::default()
    };
    pods.logs(pod.metadata.name.as_deref().expect("name"), &lp)
        .await
        .expect("logs")
}

fn suffix_ok(full: &str, base: &str) -> bool {
    full.strip_prefix(&format!("{base}-")).is_some_and(|s| {
        s.len() == 5
            && s.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_rayjob_completes_with_driver_output_in_submitter_log() {
    let dir = scratch("ok");
    let (sim, client) = start(&dir).await;
    // A TTL keeps the RayCluster around after Complete so its pods can be inspected.
    let mut obj = rayjob(
        "rayjob-sample",
        "echo \"counter=$counter_name head=$HEAD_ENV\"; echo driver-done",
    );
    obj["spec"]["ttlSecondsAfterFinished"] = json!(300);
    create(&client, obj).await;
    let rj = wait_state(&client, "rayjob-sample", &["Complete", "Failed"], 60).await;
    assert_eq!(
        status(&rj, "jobDeploymentStatus"),
        "Complete",
        "{:#}",
        rj.data["status"]
    );
    assert_eq!(status(&rj, "jobStatus"), "SUCCEEDED");
    assert!(!status(&rj, "startTime").is_empty() && !status(&rj, "endTime").is_empty());
    assert!(
        suffix_ok(status(&rj, "jobId"), "rayjob-sample"),
        "{}",
        status(&rj, "jobId")
    );
    let cluster = status(&rj, "rayClusterName").to_owned();
    assert!(suffix_ok(&cluster, "rayjob-sample"), "{cluster}");
    assert_eq!(
        status(&rj, "dashboardURL"),
        format!("{cluster}-head-svc.{NS}.svc.cluster.local:8265")
    );
    assert_eq!(
        rj.metadata.finalizers.as_deref(),
        Some(&["ray.io/rayjob-finalizer".to_owned()][..])
    );

    let log = submitter_log(&client, "rayjob-sample").await;
    assert!(log.contains("counter=test_counter head=from-head"), "{log}");
    assert!(log.contains("driver-done"), "{log}");
    assert!(log.contains("submitted successfully"), "{log}");

    let job = Api::<Job>::namespaced(client.clone(), NS)
        .get("rayjob-sample")
        .await
        .expect("submitter job");
    let conds = job.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True"),
        "{conds:?}"
    );
    let labels = job.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("ray.io/originated-from-crd").map(String::as_str),
        Some("RayJob")
    );
    assert_eq!(job.spec.and_then(|s| s.backoff_limit), Some(2));

    // The cluster's pods carry KubeRay's labels and are owned by the RayCluster.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let ray_pods = pods
        .list(&ListParams::default().labels(&format!("ray.io/cluster={cluster}")))
        .await
        .expect("pods")
        .items;
    let types: BTreeSet<String> = ray_pods
        .iter()
        .filter_map(|p| p.metadata.labels.as_ref()?.get("ray.io/node-type").cloned())
        .collect();
    assert_eq!(
        types,
        BTreeSet::from(["head".to_owned(), "worker".to_owned()])
    );
    for p in &ray_pods {
        let l = p.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            l.get("app.kubernetes.io/created-by").map(String::as_str),
            Some("kuberay-operator")
        );
        let owner = &p.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("RayCluster", cluster.as_str(), Some(true))
        );
    }
    let worker = ray_pods
        .iter()
        .find(|p| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("ray.io/node-type"))
                .map(String::as_str)
                == Some("worker")
        })
        .expect("worker");
    assert_eq!(
        worker
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("ray.io/worker-group-replica-index"))
            .map(String::as_str),
        Some("0")
    );
    assert!(
        worker
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with(&format!("{cluster}-small-group-worker-")))
    );

    let evs = events(&client).await;
    let reasons: BTreeSet<(String, String)> = evs
        .iter()
        .map(|e| {
            (
                e.reporting_controller.clone().unwrap_or_default(),
                e.reason.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (c, r) in [
        ("rayjob-controller", "CreatedRayCluster"),
        ("rayjob-controller", "CreatedRayJobSubmitter"),
        ("raycluster-controller", "CreatedHeadPod"),
        ("raycluster-controller", "CreatedWorkerPod"),
        ("raycluster-controller", "CreatedService"),
        ("default-scheduler", "Scheduled"),
    ] {
        assert!(
            reasons.contains(&(c.to_owned(), r.to_owned())),
            "missing {c}/{r} in {reasons:?}"
        );
    }
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_entrypoint_ends_failed_app_failed_with_submitter_job_complete() {
    let dir = scratch("fail");
    let (sim, client) = start(&dir).await;
    create(
        &client,
        rayjob("rayjob-fails", "echo about-to-fail; echo boom >&2; exit 3"),
    )
    .await;
    let rj = wait_state(&client, "rayjob-fails", &["Complete", "Failed"], 60).await;
    assert_eq!(status(&rj, "jobDeploymentStatus"), "Failed");
    assert_eq!(status(&rj, "reason"), "AppFailed");
    assert_eq!(status(&rj, "jobStatus"), "FAILED");
    assert!(
        status(&rj, "message").contains("exit code 3"),
        "{}",
        status(&rj, "message")
    );
    assert_eq!(
        rj.data.pointer("/status/failed").and_then(Value::as_i64),
        Some(1)
    );
    let log = submitter_log(&client, "rayjob-fails").await;
    assert!(
        log.contains("about-to-fail") && log.contains("boom"),
        "{log}"
    );
    // `ray job logs --follow` exits 0 even for a failed job: the K8s Job is Complete.
    let job = Api::<Job>::namespaced(client.clone(), NS)
        .get("rayjob-fails")
        .await
        .expect("job");
    let conds = job.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(
        conds
            .iter()
            .any(|c| c.type_ == "Complete" && c.status == "True"),
        "{conds:?}"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_name_is_validation_failed_for_good() {
    let dir = scratch("val");
    let (sim, client) = start(&dir).await;
    let name = "a2345678901234567890123456789012345678901234567x"; // 48 characters
    assert_eq!(name.len(), 48);
    create(&client, rayjob(name, "true")).await;
    let rj = wait_state(&client, name, &["ValidationFailed"], 20).await;
    assert_eq!(status(&rj, "reason"), "ValidationFailed");
    assert!(
        status(&rj, "message").contains("47"),
        "{}",
        status(&rj, "message")
    );
    let ev = wait_for(10, "InvalidRayJobMetadata event", || async {
        events(&client)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidRayJobMetadata"))
    })
    .await;
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("rayjob-controller")
    );
    // Past a requeue period (3 s) and then some: it stays ValidationFailed, with no
    // RayCluster.
    let rcs = rayclusters(&client);
    holds_for(
        Duration::from_secs(4),
        "ValidationFailed without a RayCluster",
        || async {
            let rj = get(&client, name).await.expect("still there");
            assert_eq!(
                status(&rj, "jobDeploymentStatus"),
                "ValidationFailed",
                "never leaves ValidationFailed"
            );
            let clusters = rcs.list(&ListParams::default()).await.expect("list");
            assert!(clusters.items.is_empty(), "no cluster created");
            true
        },
    )
    .await;
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_deadline_fails_a_running_job_and_stops_the_driver() {
    let dir = scratch("ads");
    let (sim, client) = start(&dir).await;
    let mut obj = rayjob("rayjob-slow", "echo started; sleep 60; echo never");
    obj["spec"]["activeDeadlineSeconds"] = json!(4);
    create(&client, obj).await;
    let rj = wait_state(&client, "rayjob-slow", &["Complete", "Failed"], 30).await;
    assert_eq!(status(&rj, "jobDeploymentStatus"), "Failed");
    assert_eq!(status(&rj, "reason"), "DeadlineExceeded");
    assert!(
        status(&rj, "message").contains("activeDeadlineSeconds"),
        "{}",
        status(&rj, "message")
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_running_deadline_with_an_unfittable_worker() {
    let dir = scratch("prd");
    let (sim, client) = start(&dir).await;
    let mut obj = rayjob("rayjob-stuck", "true");
    obj["spec"]["preRunningDeadlineSeconds"] = json!(3);
    obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
        ["limits"]["nvidia.com/gpu"] = json!("64");
    create(&client, obj).await;
    let rj = wait_state(
        &client,
        "rayjob-stuck",
        &["Complete", "Failed", "Running"],
        30,
    )
    .await;
    assert_eq!(status(&rj, "jobDeploymentStatus"), "Failed");
    assert_eq!(status(&rj, "reason"), "PreRunningDeadlineExceeded");
    assert!(rj.data.pointer("/status/endTime").is_some());
    // The worker never bound: FailedScheduling says why.
    let ev = wait_for(10, "FailedScheduling", || async {
        events(&client)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedScheduling"))
    })
    .await;
    assert_eq!(
        ev.note.as_deref(),
        Some(
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_deletes_only_the_raycluster_and_deletion_cleans_up() {
    let dir = scratch("ttl");
    let (sim, client) = start(&dir).await;
    let mut obj = rayjob("rayjob-ttl", "echo kept-in-the-log");
    obj["spec"]["ttlSecondsAfterFinished"] = json!(2);
    create(&client, obj).await;
    let rj = wait_state(&client, "rayjob-ttl", &["Complete", "Failed"], 60).await;
    assert_eq!(status(&rj, "jobDeploymentStatus"), "Complete");
    let cluster = status(&rj, "rayClusterName").to_owned();
    let rcs = rayclusters(&client);
    assert!(
        rcs.get_opt(&cluster).await.expect("get").is_some(),
        "cluster lives until the TTL"
    );
    let started = Instant::now();
    wait_for(15, "RayCluster deleted", || async {
        rcs.get_opt(&cluster)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "deleted at endTime + TTL, not before"
    );
    // Head/worker pods follow by GC; the submitter Job, its pod and its log stay.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    wait_for(45, "ray pods gone", || async {
        pods.list(&ListParams::default().labels(&format!("ray.io/cluster={cluster}")))
            .await
            .expect("pods")
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(
        Api::<Job>::namespaced(client.clone(), NS)
            .get_opt("rayjob-ttl")
            .await
            .expect("get")
            .is_some()
    );
    assert!(
        submitter_log(&client, "rayjob-ttl")
            .await
            .contains("kept-in-the-log")
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|e| e.reason.as_deref() == Some("DeletedRayCluster"))
    );
    assert!(
        get(&client, "rayjob-ttl").await.is_some(),
        "the RayJob itself stays"
    );

    // Deleting the RayJob: finalizer removed, then GC removes the submitter Job.
    let api = rayjobs(&client);
    api.delete("rayjob-ttl", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(15, "RayJob gone", || async {
        get(&client, "rayjob-ttl").await.is_none().then_some(())
    })
    .await;
    wait_for(15, "submitter Job gone", || async {
        Api::<Job>::namespaced(client.clone(), NS)
            .get_opt("rayjob-ttl")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_rayjob_stops_its_driver() {
    let dir = scratch("stop");
    let (sim, client) = start(&dir).await;
    let marker = dir.join("still-running");
    let pid_file = dir.join("driver.pid");
    let entry = format!(
        "echo $$ > {}; echo running; sleep 3; touch {}",
        pid_file.display(),
        marker.display()
    );
    create(&client, rayjob("rayjob-stop", &entry)).await;
    wait_for(60, "job RUNNING", || async {
        let rj = get(&client, "rayjob-stop").await?;
        (status(&rj, "jobStatus") == "RUNNING").then_some(())
    })
    .await;
    let pid = wait_for(15, "the driver to write its pid", || async {
        let pid = std::fs::read_to_string(&pid_file).ok()?;
        pid.ends_with('\n').then(|| pid.trim().to_owned())
    })
    .await;
    let api = rayjobs(&client);
    api.delete("rayjob-stop", &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(15, "RayJob gone", || async {
        get(&client, "rayjob-stop").await.is_none().then_some(())
    })
    .await;
    // The driver's shell has gone (killed, or finished after touching the marker).
    let proc_dir = std::path::Path::new("/proc").join(&pid);
    wait_for(15, "the driver process to end", || async {
        (!proc_dir.exists()).then_some(())
    })
    .await;
    assert!(
        !marker.exists(),
        "the driver process was killed by the stop"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Every RayJob and RayCluster status the operator writes is one a real API server
/// stores as written: valid against the CRD schema, with no field the schema does
/// not define (a real server prunes those, so nothing may rely on them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_status_written_fits_the_crd_schemas() {
    let dir = scratch("schema");
    let (sim, client) = start(&dir).await;
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let mut watches = Vec::new();
    for ar in [rayjob_resource(), raycluster_resource()] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let seen = seen.clone();
        watches.push(tokio::spawn(async move {
            let mut objects =
                std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
            while let Some(Ok(o)) = objects.next().await {
                let v = serde_json::to_value(&o).expect("object as json");
                seen.lock().expect("seen lock").push(v);
            }
        }));
    }
    create(&client, rayjob("rayjob-fits", "echo fine")).await;
    create(&client, rayjob("rayjob-fails", "exit 3")).await;
    wait_state(&client, "rayjob-fits", &["Complete", "Failed"], 60).await;
    wait_state(&client, "rayjob-fails", &["Complete", "Failed"], 60).await;
    let ready_seen = |kind: &str, ptr: &str| {
        seen.lock()
            .expect("seen lock")
            .iter()
            .any(|o| o["kind"] == kind && o.pointer(ptr) == Some(&json!("ready")))
    };
    wait_for(10, "ready statuses seen", || async {
        (ready_seen("RayCluster", "/status/state")
            && ready_seen("RayJob", "/status/rayClusterStatus/state"))
        .then_some(())
    })
    .await;
    for w in &watches {
        w.abort();
    }
    let objects = seen.lock().expect("seen lock").clone();
    for o in &objects {
        let kind = o["kind"].as_str().expect("kind");
        let what = format!("{kind} {} status {}", o["metadata"]["name"], o["status"]);
        let crd = schema::schema_for(kind)
            .expect("a ray.io kind")
            .as_ref()
            .expect("CRD schema compiles");
        let causes = schema::validate(crd, o);
        assert!(causes.is_empty(), "{what}: {causes:?}");
        let status_schema = crd.openapi.pointer("/properties/status").expect("status");
        let undefined = schema::undefined_fields(status_schema, &o["status"]);
        assert!(
            undefined.is_empty(),
            "{what}: not in the CRD: {undefined:?}"
        );
    }
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The capsule init container per the Forge convention (POSIX sh, curl, sha256sum).
const FETCH_SCRIPT: &str = r#"set -e
tmp="$FORGE_CAPSULE_PATH.tmp"
curl -fsSL -o "$tmp" "$FORGE_CAPSULE_URL" || wget -q -O "$tmp" "$FORGE_CAPSULE_URL"
got=$(sha256sum "$tmp" | cut -d' ' -f1)
if [ "$got" != "$FORGE_CAPSULE_SHA256" ]; then
  echo "capsule sha256 mismatch: expected $FORGE_CAPSULE_SHA256 got $got"
  exit 1
fi
mv "$tmp" "$FORGE_CAPSULE_PATH"
echo "capsule ready at $FORGE_CAPSULE_PATH""#;

fn capsule_zip() -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    w.add_directory("proj/", opts).expect("dir");
    w.start_file("proj/run.sh", opts).expect("file");
    w.write_all(b"echo \"capsule says $(cat data.txt)\"\n")
        .expect("write");
    w.start_file("proj/data.txt", opts).expect("file");
    w.write_all(b"hello-capsule").expect("write");
    w.finish().expect("zip").into_inner()
}

fn capsule_rayjob(
    name: &str,
    url: &str,
    init_sha: &str,
    file_sha: &str,
    annotation_sha: &str,
) -> Value {
    let mut obj = rayjob(name, "sh run.sh");
    obj["metadata"]["annotations"] = json!({"forge.dev/capsule-sha256": annotation_sha});
    obj["spec"]["runtimeEnvYAML"] = json!(format!(
        "working_dir: file:///forge/capsule/{file_sha}.zip\n"
    ));
    let head = &mut obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"];
    head["volumes"] = json!([{"name": "forge-capsule", "emptyDir": {}}]);
    head["initContainers"] = json!([{
        "name": "forge-capsule-fetch", "image": "curlimages/curl:8.10.1",
        "command": ["sh", "-c", FETCH_SCRIPT],
        "env": [
            {"name": "FORGE_CAPSULE_URL", "value": url},
            {"name": "FORGE_CAPSULE_SHA256", "value": init_sha},
            {"name": "FORGE_CAPSULE_PATH", "value": format!("/forge/capsule/{file_sha}.zip")},
        ],
        "volumeMounts": [{"name": "forge-capsule", "mountPath": "/forge/capsule"}],
    }]);
    head["containers"][0]["volumeMounts"] =
        json!([{"name": "forge-capsule", "mountPath": "/forge/capsule"}]);
    obj
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_init_container_fetches_verifies_and_the_driver_runs_from_it() {
    let dir = scratch("capsule");
    let bytes = capsule_zip();
    let sha = hex::encode(Sha256::digest(&bytes));
    let src = dir.join("capsule.zip");
    std::fs::write(&src, &bytes).expect("write capsule");
    let url = format!("file://{}", src.display());
    let (sim, client) = start(&dir.join("scratch")).await;

    // Good capsule: the init container really fetches and checks it, the driver runs
    // `sh run.sh` from the unpacked (top-level dir stripped) working_dir.
    let mut ok = capsule_rayjob("capsule-ok", &url, &sha, &sha, &sha);
    ok["spec"]["ttlSecondsAfterFinished"] = json!(300);
    create(&client, ok).await;
    let rj = wait_state(&client, "capsule-ok", &["Complete", "Failed"], 60).await;
    assert_eq!(
        status(&rj, "jobStatus"),
        "SUCCEEDED",
        "{:#}",
        rj.data["status"]
    );
    assert!(
        submitter_log(&client, "capsule-ok")
            .await
            .contains("capsule says hello-capsule")
    );
    let cluster = status(&rj, "rayClusterName").to_owned();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let head = pods
        .list(
            &ListParams::default()
                .labels(&format!("ray.io/cluster={cluster},ray.io/node-type=head")),
        )
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("head pod");
    let lp = LogParams {
        container: Some("forge-capsule-fetch".into()),
        ..LogParams::default()
    };
    let init_log = pods
        .logs(head.metadata.name.as_deref().expect("name"), &lp)
        .await
        .expect("init log");
    assert!(init_log.contains("capsule ready at"), "{init_log}");

    // Wrong digest in the init container: it exits 1 with the clear line, the head
    // pod stays in Init:Error / Init:CrashLoopBackOff and the job never starts.
    let wrong = "0".repeat(64);
    create(
        &client,
        capsule_rayjob("capsule-bad", &url, &wrong, &wrong, &wrong),
    )
    .await;
    let (head_name, state) = wait_for(30, "init container failure", || async {
        let rj = get(&client, "capsule-bad").await?;
        let cluster = status(&rj, "rayClusterName").to_owned();
        let lp = ListParams::default()
            .labels(&format!("ray.io/cluster={cluster},ray.io/node-type=head"));
        let head = pods.list(&lp).await.ok()?.items.into_iter().next()?;
        let st = head
            .status
            .as_ref()?
            .init_container_statuses
            .as_ref()?
            .first()?
            .clone();
        let failed = st
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()
            || st
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0);
        failed.then(|| (head.metadata.name.clone().unwrap_or_default(), st))
    })
    .await;
    let term = state
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .or_else(|| state.state.as_ref().and_then(|s| s.terminated.clone()))
        .expect("terminated");
    assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
    let lp = LogParams {
        container: Some("forge-capsule-fetch".into()),
        ..LogParams::default()
    };
    let log = pods.logs(&head_name, &lp).await.expect("init log");
    assert!(
        log.contains(&format!(
            "capsule sha256 mismatch: expected {wrong} got {sha}"
        )),
        "{log}"
    );
    let head = pods.get(&head_name).await.expect("head");
    assert_eq!(
        head.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    let rj = get(&client, "capsule-bad").await.expect("rayjob");
    assert_eq!(status(&rj, "jobDeploymentStatus"), "Initializing");

    // The init container is fine but the RayJob's published digest differs: the
    // driver refuses the capsule and the job FAILS with the clear line.
    let other = "f".repeat(64);
    create(
        &client,
        capsule_rayjob("capsule-annot", &url, &sha, &sha, &other),
    )
    .await;
    let rj = wait_state(&client, "capsule-annot", &["Complete", "Failed"], 60).await;
    assert_eq!(
        (status(&rj, "jobDeploymentStatus"), status(&rj, "jobStatus")),
        ("Failed", "FAILED")
    );
    let log = submitter_log(&client, "capsule-annot").await;
    assert!(
        log.contains(&format!(
            "capsule sha256 mismatch: expected {other} got {sha}"
        )),
        "{log}"
    );
    sim.shutdown().await;
    let _ = std::fs::remove_dir_all(dir);
}
