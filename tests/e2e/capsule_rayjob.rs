//! Capsules end to end (issue 4 "done when"): a capsule assembled from a code tree is
//! stored in a real S3-compatible server (s3s-fs), the gateway's own RayJob builder
//! (`forge_gateway::manifests::build_rayjob`) points the RayJob at it, and the emulator's
//! simulated operator and kubelet (process mode) fetch it, verify its SHA-256, unpack it
//! like Ray and run the entrypoint — once with a presigned URL as `working_dir` and once
//! in the HTTP-only init-container mode (`working_dir` is a `file://` path the
//! `forge-capsule-fetch` init container prepared). A capsule corrupted in the store is
//! refused in both modes with a clear log line.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use forge_capsule::init_container::INIT_CONTAINER_NAME;
use forge_capsule::{Capsule, CapsuleLimits, CodeSource, assemble, init_container};
use forge_gateway::config::Config;
use forge_gateway::domain::Digest as CapsuleDigest;
use forge_gateway::jobspec::{Deadlines, JobSpec, PoolSpec};
use forge_gateway::manifests::{CapsuleRef, JobRef, build_rayjob, rayjob_name};
use forge_kubesim::Sim;
use forge_kubesim::controllers::rayjob_resource;
use forge_object_store::{ObjectStore, S3Config, S3Store, capsule_key};
use forge_policy_host::model::{Placement, PoolPlacement};
use forge_testkit::fs::write_tree;
use forge_testkit::s3::S3Server;
use forge_tests::kubesim::start_process;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::Value;
use sha2::{Digest, Sha256};

const NS: &str = "starforge";
const TEAM: &str = "team-a";

/// The user's code: an entrypoint script that prints lines, reading a data file from a
/// sub-directory and the runtime env the gateway sets.
const RUN_SH: &[u8] = b"#!/bin/sh\nset -eu\n\
echo \"forge job $FORGE_JOB_ID of $FORGE_TEAM\"\n\
i=0\nwhile [ $i -lt 3 ]; do i=$((i+1)); echo \"step $i/3 $(cat data/msg.txt)\"; done\n\
echo \"mode=$MODE\"\necho train-done\n";

/// S3 server, store, the stored capsule and an emulator in process mode.
struct Harness {
    srv: S3Server,
    store: S3Store,
    cap: Capsule,
    sim: Sim,
    client: kube::Client,
    _dirs: Vec<tempfile::TempDir>,
}

fn job_spec(mode: &str, pre_running_seconds: Option<i64>) -> JobSpec {
    JobSpec {
        name: "capsule-e2e".into(),
        framework: "nemo-rl".into(),
        entrypoint: "sh run.sh".into(),
        pools: vec![PoolSpec {
            name: "trainer".into(),
            nodes: 2,
            gpus_per_node: 4,
            series: Some("h100".into()),
            ..PoolSpec::default()
        }],
        env: BTreeMap::from([("MODE".into(), mode.into())]),
        secret_env: BTreeMap::new(),
        shared_storage: false,
        corpus: false,
        deadlines: Deadlines {
            pre_running_seconds,
            active_seconds: None,
            checkpoint_grace_seconds: None,
        },
        priority: 0,
        labels: BTreeMap::new(),
        pip: Vec::new(),
    }
}

fn gateway_config() -> Config {
    Config::from_env_map(HashMap::from([
        (
            "FORGE_IMAGE_NEMO_RL".to_owned(),
            "registry.internal/starforge/nemo-rl:v0.7.0".to_owned(),
        ),
        ("FORGE_KUBERAY_RAY_VERSION".to_owned(), "2.46.0".to_owned()),
    ]))
    .expect("valid gateway config")
}

async fn harness() -> Harness {
    let code = tempfile::tempdir().expect("tmp");
    write_tree(
        code.path(),
        &[
            ("run.sh", RUN_SH, true),
            ("data/msg.txt", b"hello-from-capsule", false),
            ("lib/util.py", b"X = 1\n", false),
        ],
    );
    let out = tempfile::tempdir().expect("tmp");
    let spec_json = serde_json::to_vec(&job_spec("any", None)).expect("spec json");
    let cap = assemble(
        CodeSource::Dir(code.path().into()),
        &spec_json,
        None,
        &CapsuleLimits::default(),
        out.path(),
    )
    .expect("assemble");
    let srv = S3Server::start();
    let store = S3Store::connect(S3Config::new(
        &srv.endpoint,
        &srv.bucket,
        &srv.access_key,
        &srv.secret_key,
    ))
    .await
    .expect("connect");
    store.check().await.expect("s3 check");
    store.put_file(&cap.digest, &cap.path).await.expect("put");
    let scratch = tempfile::tempdir().expect("tmp");
    let sim = start_process("h100=4x8", scratch.path()).await;
    let client = sim.client().expect("client");
    Harness {
        srv,
        store,
        cap,
        sim,
        client,
        _dirs: vec![code, out, scratch],
    }
}

impl Harness {
    /// Builds the RayJob with the gateway's builder (presigned URL, or the init
    /// container when `init_mode`) and creates it; returns (name, manifest).
    async fn submit(
        &self,
        job_id: &str,
        init_mode: bool,
        pre_running: Option<i64>,
    ) -> (String, Value) {
        let url = self
            .store
            .get_url(&self.cap.digest, Duration::from_secs(3600))
            .await
            .expect("presigned url");
        let init = init_mode
            .then(|| init_container(&url, &self.cap.digest, None).expect("init container"));
        let capsule = CapsuleRef {
            digest: CapsuleDigest::parse(&self.cap.digest).expect("digest"),
            working_dir_url: url.to_string(),
            init,
        };
        let spec = job_spec(if init_mode { "init" } else { "presigned" }, pre_running);
        let job = JobRef {
            id: job_id,
            team: TEAM,
            spec: &spec,
            instance: "capsule-test",
            trace_parent: None,
            access: None,
            resume_step: None,
            attempt: 0,
        };
        let manifest = build_rayjob(&job, &initial_placement(&spec), &capsule, &gateway_config())
            .expect("builds");
        let manifest = serde_json::to_value(&manifest).expect("RayJob serializes");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), NS, &rayjob_resource());
        let obj: DynamicObject = serde_json::from_value(manifest.clone()).expect("object");
        api.create(&PostParams::default(), &obj)
            .await
            .expect("create rayjob");
        (rayjob_name(job_id), manifest)
    }

    /// Waits until the RayJob is Complete or Failed.
    async fn wait_terminal(&self, name: &str, secs: u64) -> Value {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), NS, &rayjob_resource());
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let rj = api.get(name).await.expect("get rayjob");
            let st = rj.data["status"].clone();
            if matches!(
                st["jobDeploymentStatus"].as_str(),
                Some("Complete" | "Failed")
            ) {
                return st;
            }
            if Instant::now() >= deadline {
                let pods = self
                    .pods()
                    .list(&ListParams::default())
                    .await
                    .expect("pods");
                let mut diag = String::new();
                for p in pods.items {
                    let pod = p.metadata.name.clone().unwrap_or_default();
                    let log = self.log(&pod, INIT_CONTAINER_NAME).await;
                    diag.push_str(&format!(
                        "\n{pod}: {:?}\n  init log: {log}",
                        p.status
                            .map(|s| (s.phase, s.init_container_statuses, s.conditions))
                    ));
                }
                panic!("{name} not terminal: {st:#}{diag}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn log(&self, pod: &str, container: &str) -> String {
        self.log_of(pod, container, false).await
    }

    /// The log of the container's current instance, or with `previous` of the one
    /// that ended before it (a crash-looping container restarts with an empty log).
    async fn log_of(&self, pod: &str, container: &str, previous: bool) -> String {
        let lp = LogParams {
            container: Some(container.into()),
            previous,
            ..LogParams::default()
        };
        self.pods()
            .logs(pod, &lp)
            .await
            .unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    async fn submitter_log(&self, rayjob: &str) -> String {
        let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={rayjob}"));
        let pod = self.pods().list(&lp).await.expect("pods").items;
        let name = pod
            .first()
            .and_then(|p| p.metadata.name.clone())
            .expect("a submitter pod");
        self.log(&name, "ray-job-submitter").await
    }

    /// The Ray pods (head and workers) of the RayJob's cluster.
    async fn ray_pods(&self, cluster: &str) -> Vec<Pod> {
        let lp = ListParams::default().labels(&format!("ray.io/cluster={cluster}"));
        self.pods().list(&lp).await.expect("pods").items
    }

    /// Flips one byte of the stored object on the S3 server's disk (same size, the
    /// presigned URL stays valid: it signs the request, not the content).
    fn corrupt_stored_capsule(&self) -> String {
        let key = capsule_key(&self.cap.digest).expect("key");
        let path = self.srv.root.path().join(&self.srv.bucket).join(key);
        let mut bytes = std::fs::read(&path).expect("stored object");
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, &bytes).expect("rewrite object");
        hex::encode(Sha256::digest(&bytes))
    }
}

/// Whether the pod's capsule init container has terminated with a non-zero exit code
/// (now or in its last run).
fn init_failed(p: &Pod) -> bool {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.clone())
        .unwrap_or_default();
    statuses
        .iter()
        .filter(|s| s.name == INIT_CONTAINER_NAME)
        .any(|s| {
            [s.state.as_ref(), s.last_state.as_ref()]
                .into_iter()
                .flatten()
                .filter_map(|st| st.terminated.as_ref())
                .any(|t| t.exit_code != 0)
        })
}

fn working_dir(manifest: &Value) -> String {
    let yaml = manifest["spec"]["runtimeEnvYAML"]
        .as_str()
        .expect("runtimeEnvYAML");
    forge_capsule::runtime_env::parse(yaml)
        .expect("parses")
        .working_dir
}

fn assert_ran(log: &str, job_id: &str, mode: &str) {
    assert!(
        log.contains(&format!("forge job {job_id} of {TEAM}")),
        "{log}"
    );
    for i in 1..=3 {
        assert!(
            log.contains(&format!("step {i}/3 hello-from-capsule")),
            "{log}"
        );
    }
    assert!(log.contains(&format!("mode={mode}")), "{log}");
    assert!(log.contains("train-done"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presigned_url_mode_runs_the_capsule_from_s3() {
    let h = harness().await;
    let (name, manifest) = h.submit("cap-presigned", false, None).await;
    let wd = working_dir(&manifest);
    assert!(
        wd.starts_with(&format!(
            "{}/{}/capsules/{}.zip?",
            h.srv.endpoint, h.srv.bucket, h.cap.digest
        )) && wd.contains("X-Amz-Signature="),
        "presigned working_dir: {wd}"
    );
    assert_eq!(
        manifest["metadata"]["annotations"]["forge.dev/capsule-sha256"],
        h.cap.digest.as_str()
    );
    let st = h.wait_terminal(&name, 90).await;
    assert_eq!(
        (st["jobDeploymentStatus"].as_str(), st["jobStatus"].as_str()),
        (Some("Complete"), Some("SUCCEEDED")),
        "{st:#}"
    );
    assert_ran(&h.submitter_log(&name).await, "cap-presigned", "presigned");
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_container_mode_verifies_and_runs_the_capsule() {
    let h = harness().await;
    let (name, manifest) = h.submit("cap-init", true, None).await;
    assert_eq!(
        working_dir(&manifest),
        format!("file:///forge/capsule/{}.zip", h.cap.digest)
    );
    let st = h.wait_terminal(&name, 90).await;
    assert_eq!(
        (st["jobDeploymentStatus"].as_str(), st["jobStatus"].as_str()),
        (Some("Complete"), Some("SUCCEEDED")),
        "{st:#}"
    );
    assert_ran(&h.submitter_log(&name).await, "cap-init", "init");
    // Every Ray pod (head and worker) ran the fetch-and-verify init container.
    let cluster = st["rayClusterName"].as_str().expect("cluster").to_owned();
    let pods = h.ray_pods(&cluster).await;
    assert_eq!(pods.len(), 2, "head + 1 worker");
    for p in pods {
        let pod = p.metadata.name.clone().expect("name");
        let log = h.log(&pod, INIT_CONTAINER_NAME).await;
        assert!(
            log.contains(&format!("capsule {} verified", h.cap.digest)),
            "{pod}: {log}"
        );
        assert!(!log.contains("X-Amz-Signature"), "URL not logged: {log}");
    }
    h.sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_capsule_is_refused_in_both_modes() {
    let h = harness().await;
    let bad = h.corrupt_stored_capsule();
    let expected = format!(
        "capsule sha256 mismatch: expected {} got {bad}",
        h.cap.digest
    );

    // Init-container mode: the init container fails with the clear line, the head never
    // starts, and the pre-running deadline ends the job.
    let (init_name, _) = h.submit("cap-bad-init", true, Some(8)).await;
    // Presigned mode: the driver checks the published digest and refuses the bytes.
    let (url_name, _) = h.submit("cap-bad-url", false, None).await;

    let st = h.wait_terminal(&url_name, 90).await;
    assert_eq!(
        (st["jobDeploymentStatus"].as_str(), st["jobStatus"].as_str()),
        (Some("Failed"), Some("FAILED")),
        "{st:#}"
    );
    let log = h.submitter_log(&url_name).await;
    assert!(log.contains(&expected), "{log}");
    assert!(
        !log.contains("train-done"),
        "the entrypoint never ran: {log}"
    );

    // Every Ray pod's init container exits 1 with the mismatch line (before the
    // deadline, and the TTL keeps the cluster afterwards anyway).
    let api: Api<DynamicObject> = Api::namespaced_with(h.client.clone(), NS, &rayjob_resource());
    let deadline = Instant::now() + Duration::from_secs(60);
    let failed_pods = loop {
        let rj = api.get(&init_name).await.expect("rayjob");
        let cluster = rj.data["status"]["rayClusterName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let pods = if cluster.is_empty() {
            Vec::new()
        } else {
            h.ray_pods(&cluster).await
        };
        let failed: Vec<String> = pods
            .iter()
            .filter(|p| init_failed(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        if !pods.is_empty() && failed.len() == pods.len() {
            break failed;
        }
        assert!(Instant::now() < deadline, "init containers did not fail");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for pod in &failed_pods {
        // The init container is retried with back-off: between the failure seen above
        // and this read it may have started again, with an empty log of its own, so
        // the failure's line is in the current log or in the previous instance's.
        let log = h.log(pod, INIT_CONTAINER_NAME).await;
        let log = if log.contains(&expected) {
            log
        } else {
            let previous = h.log_of(pod, INIT_CONTAINER_NAME, true).await;
            format!("current: {log:?}; previous: {previous}")
        };
        assert!(log.contains(&expected), "{pod}: {log}");
        let p = h.pods().get(pod).await.expect("pod");
        assert_eq!(
            p.status.and_then(|s| s.phase).as_deref(),
            Some("Pending"),
            "{pod} never starts"
        );
    }
    let st = h.wait_terminal(&init_name, 90).await;
    assert_eq!(
        (st["jobDeploymentStatus"].as_str(), st["reason"].as_str()),
        (Some("Failed"), Some("PreRunningDeadlineExceeded")),
        "{st:#}"
    );
    h.sim.shutdown().await;
}

/// The chain's initial placement: each pool with the series its spec asks for.
fn initial_placement(spec: &JobSpec) -> Placement {
    Placement {
        pools: spec
            .pools
            .iter()
            .map(|p| PoolPlacement {
                pool: p.name.clone(),
                series: p.series.clone(),
                ..PoolPlacement::default()
            })
            .collect(),
    }
}
