//! RayJobs a real cluster runs well, end to end through the gateway (dev composition,
//! emulator in process mode): a GPU-less cluster runs the sample; tainted GPU nodes
//! keep jobs waiting with the reason until a global policy tolerates the taint; a chain
//! mixing a component built from the frozen `forge:policy@0.1.0` contract with 0.3.0
//! components admits, queues and rejects; the code's `requirements.txt` and the spec's
//! `pip` become the runtime env's `pip` list, and credentials in it are refused; an
//! operator that ignores `preRunningDeadlineSeconds` does not keep a job waiting forever;
//! a job whose code goes over its machine's memory limit fails with the OOM kill (and
//! the limit) in its reason, the output it printed before archived.

use std::time::Duration;

use forge_tests::jobs::{self, JobClient, zip_of};
use forge_tests::plugins;
use forge_tests::policy::{self, ALICE, PolicyClient};
use forge_tests::wait::{eventually, not_yet};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const SAMPLE_PY: &str = "import os\nprint('forge sample: starting on', os.environ.get('FORGE_JOB_ID'), flush=True)\nprint('forge sample: done', flush=True)\n";

fn sample(name: &str, gpus: u32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 train.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": gpus}]
    })
}

fn code() -> Vec<u8> {
    zip_of(&[("train.py", SAMPLE_PY)])
}

/// The capacity entry of `series` (`GET /v1/capacity`).
async fn capacity(client: &JobClient, series: &str) -> Value {
    let (status, body) = client.call(reqwest::Method::GET, "/v1/capacity").await;
    assert_eq!(status, 200, "{body:#}");
    body["series"]
        .as_array()
        .and_then(|s| s.iter().find(|c| c["series"] == series).cloned())
        .unwrap_or(Value::Null)
}

/// The job once it is dispatched (its RayJob named).
async fn dispatched(client: &JobClient, id: &str) -> Value {
    eventually(
        "the job to be dispatched",
        Duration::from_secs(30),
        || async {
            let j = client.job(id).await;
            if j["rayjobName"].is_string() {
                Ok(j)
            } else {
                Err(not_yet(j))
            }
        },
    )
    .await
}

/// The RayJob of a dispatched job, as the API server holds it.
async fn rayjob_of(gw: &forge_tests::gateway::TestGateway, job: &Value) -> Value {
    let name = job["rayjobName"].as_str().expect("rayjob name");
    let api = jobs::rayjobs(gw.sim.client().expect("client"), "starforge");
    serde_json::to_value(api.get(name).await.expect("rayjob")).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_less_cluster_runs_the_sample() {
    let gw =
        forge_tests::gateway::TestGateway::start("h100=1x8", &[("FORGE_K8S_GPU_PASSTHROUGH", "0")])
            .await;
    let client = gw.client(&gw.token);

    // The nodes have no nvidia.com/gpu; capacity counts the GPU-count label.
    let nodes: Api<Node> = Api::all(gw.sim.client().expect("client"));
    let node = nodes.get("h100-0").await.expect("node");
    let status = node.status.expect("status");
    assert!(
        !status
            .capacity
            .unwrap_or_default()
            .contains_key("nvidia.com/gpu"),
        "a GPU-less node"
    );
    assert_eq!(
        node.metadata.labels.unwrap_or_default()["starforge/gpu-count"],
        "8"
    );
    let h100 = capacity(&client, "h100").await;
    assert_eq!(
        (h100["total"].as_u64(), h100["free"].as_u64()),
        (Some(8), Some(8)),
        "{h100:#}"
    );

    let id = client.submit_ok(&sample("sample", 8), code()).await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    let (status, log) = client.logs(&id).await;
    assert_eq!(status, 200, "{log}");
    assert!(log.contains("forge sample: done"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tainted_gpu_nodes_hold_jobs_until_a_global_policy_tolerates_them() {
    let gw = policy::gateway("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let nodes: Api<Node> = Api::all(gw.sim.client().expect("client"));
    let taint = json!({"spec": {"taints": [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]}});
    nodes
        .patch("h100-0", &PatchParams::default(), &Patch::Merge(taint))
        .await
        .expect("taint the node");

    // Capacity shows the GPUs apart, as tainted, with the taint.
    let h100 = eventually(
        "capacity to show the taint",
        Duration::from_secs(20),
        || async {
            let c = capacity(&client, "h100").await;
            if c["tainted"] == 8 {
                Ok(c)
            } else {
                Err(not_yet(c))
            }
        },
    )
    .await;
    assert_eq!(
        (h100["allocatable"].as_u64(), h100["free"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(h100["taints"][0]["taint"]["key"], "nvidia.com/gpu");
    assert_eq!(h100["taints"][0]["nodes"], 1);

    // The job is admitted (the series is not unavailable) but waits, saying why.
    let id = client.submit_ok(&sample("tainted", 8), code()).await;
    gw.dispatcher_settled().await;
    let job = client.job(&id).await;
    assert_eq!(job["state"], "queued", "{job:#}");
    assert_eq!(job["queue"]["code"], "capacity.tainted", "{job:#}");
    let reason = job["queue"]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("nvidia.com/gpu=present:NoSchedule") && reason.contains("8 more"),
        "{reason}"
    );

    // A global policy adds the toleration: the job runs, and its pods carry it.
    let admin = PolicyClient::new(&gw, &gw.token);
    let tolerate = json!({"default_series": "h100", "allowed": ["h100", "h200"],
        "tolerations": {"h100": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}});
    let links = admin.global_links_with("pool-series", tolerate).await;
    let version = admin.global_version().await;
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": version, "plugins": links}))
        .await;
    assert_eq!(s, 200, "{body:#}");
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    let placed = &done[&id]["placement"]["pools"][0]["tolerations"][0];
    assert_eq!(placed["key"], "nvidia.com/gpu", "{:#}", done[&id]);

    // A team may not add tolerations itself: its link fails the admission closed.
    let alice = PolicyClient::new(&gw, ALICE);
    let (s, rec) = alice
        .upload(
            "own-series",
            "1.0.0",
            plugins::component("pool-series"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 201, "{rec:#}");
    let own = json!({"expectedVersion": 0, "plugins": [{"name": "own-series", "version": "1.0.0",
        "settings": {"default_series": "h100",
                     "tolerations": {"*": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}]});
    let (s, body) = alice.put_policy(Some("team-a"), &own).await;
    assert_eq!(s, 200, "{body:#}");
    // The job names its series, so the team link keeps it (a team may not choose one)
    // and only its tolerations widen.
    let mut widen = sample("widen", 8);
    widen["pools"][0]["series"] = json!("h100");
    let (s, review) = alice.review(&widen).await;
    assert_eq!(s, 503, "a widening team link fails closed: {review:#}");
    let details = &review["error"]["details"];
    assert_eq!(details["cause"], "widened", "{review:#}");
    let why = details["reason"].as_str().unwrap_or("");
    assert!(
        why.starts_with("placement.pools[0].tolerations") && why.contains("nvidia.com/gpu"),
        "{review:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_mixing_contract_versions_admits_queues_and_rejects() {
    let gw = policy::gateway("h100=1x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let (s, rec) = admin
        .upload(
            "legacy-guard",
            "0.1.0",
            plugins::component("legacy-guard"),
            Some(&json!({"max_gpus": 8, "hold_label": "hold"})),
            Some("global"),
        )
        .await;
    assert_eq!(s, 201, "{rec:#}");
    assert_eq!(rec["world"], "forge:policy/policy@0.1.0", "{rec:#}");

    let mut links = admin
        .global_links_with(
            "pool-series",
            json!({"default_series": "h100",
        "tolerations": {"*": [{"key": "example.com/maintenance", "operator": "Exists"}]}}),
        )
        .await;
    links.insert(
        1,
        json!({"digest": rec["digest"], "settings": {"max_gpus": 8, "hold_label": "hold"}}),
    );
    let version = admin.global_version().await;
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": version, "plugins": links}))
        .await;
    assert_eq!(s, 200, "{body:#}");

    let client = gw.client(&gw.token);
    // Admitted through every link; the 0.1.0 link's label is on the pods, and the
    // 0.3.0 toleration set before it survived it.
    let id = client.submit_ok(&sample("mixed", 8), code()).await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    let pool = &done[&id]["placement"]["pools"][0];
    assert_eq!(
        pool["labels"]["team-a.teams.forge.dev/legacy-seen"], "v0-1-0",
        "{pool:#}"
    );
    assert_eq!(
        pool["tolerations"][0]["key"], "example.com/maintenance",
        "{pool:#}"
    );

    // Queued by the 0.1.0 link.
    let mut held = sample("held", 8);
    held["labels"] = json!({"hold": "yes"});
    let (s, body) = client.submit(&held, code()).await;
    assert_eq!(s, 202, "{body:#}");
    assert_eq!(body["admission"]["decision"]["kind"], "queue", "{body:#}");
    assert_eq!(body["admission"]["decision"]["code"], "legacy.hold");
    let kinds: Vec<&str> = body["admission"]["trace"]
        .as_array()
        .expect("trace")
        .iter()
        .map(|t| t["outcome"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["admit", "queue", "admit", "admit"], "{body:#}");

    // Rejected by the 0.1.0 link.
    let mut big = sample("big", 8);
    big["pools"] = json!([{"name": "a", "nodes": 2, "gpusPerNode": 8}]);
    let (s, body) = client.submit(&big, code()).await;
    assert_eq!(s, 403, "{body:#}");
    assert_eq!(
        body["error"]["details"]["reason"], "legacy.too-big",
        "{body:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ray_pods_request_cpu_and_memory_equal_to_their_limits() {
    let gw = forge_tests::gateway::TestGateway::start(
        "h100=1x8",
        &[("FORGE_K8S_CPUS_PER_NODE", "h100=16,*=4")],
    )
    .await;
    let client = gw.client(&gw.token);
    let mut spec = sample("sized", 8);
    spec["pools"][0]["memoryPerNode"] = json!("24Gi");
    let id = client.submit_ok(&spec, code()).await;
    let job = dispatched(&client, &id).await;
    let rj = rayjob_of(&gw, &job).await;
    let head = &rj["spec"]["rayClusterSpec"]["headGroupSpec"];
    let res = &head["template"]["spec"]["containers"][0]["resources"];
    assert_eq!(res["requests"], res["limits"]);
    assert_eq!(res["requests"]["cpu"], "16");
    assert_eq!(res["requests"]["memory"], "24Gi");
    assert_eq!(head["rayStartParams"]["num-cpus"], "16");
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requirements_txt_pyproject_and_spec_packages_become_the_runtime_env() {
    let gw = forge_tests::gateway::TestGateway::start("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let mut spec = sample("deps", 8);
    spec["pip"] = json!(["einops==0.8.0", "numpy==2.1.0"]);
    let requirements = "# pinned\nnumpy==2.1.0\ntorch>=2.4 ; \\\n  python_version >= '3.10'\n";
    let archive = zip_of(&[("train.py", SAMPLE_PY), ("requirements.txt", requirements)]);
    let id = client.submit_ok(&spec, archive).await;
    let job = dispatched(&client, &id).await;
    let expected = json!([
        "numpy==2.1.0",
        "torch>=2.4 ;   python_version >= '3.10'",
        "einops==0.8.0"
    ]);
    assert_eq!(job["spec"]["pip"], expected, "{job:#}");
    let rj = rayjob_of(&gw, &job).await;
    let env =
        forge_capsule::runtime_env::parse(rj["spec"]["runtimeEnvYAML"].as_str().expect("yaml"))
            .expect("runtime env parses");
    assert_eq!(json!(env.pip), expected);

    // No requirements.txt: pyproject.toml's dependencies, pinned from uv.lock.
    let pyproject = "[project]\nname = \"trainer\"\nversion = \"0.1.0\"\n\
        dependencies = [\"einops>=0.7\", \"Numpy ; python_version >= '3.10'\"]\n";
    let lock = "version = 1\n[[package]]\nname = \"trainer\"\nversion = \"0.1.0\"\n\
        source = { editable = \".\" }\n[[package]]\nname = \"einops\"\nversion = \"0.8.0\"\n\
        source = { registry = \"https://pypi.org/simple\" }\n[[package]]\nname = \"numpy\"\n\
        version = \"2.1.0\"\nsource = { registry = \"https://pypi.org/simple\" }\n";
    let project = zip_of(&[
        ("train.py", SAMPLE_PY),
        ("pyproject.toml", pyproject),
        ("uv.lock", lock),
    ]);
    let id = client.submit_ok(&sample("uv-project", 8), project).await;
    let job = dispatched(&client, &id).await;
    let expected = json!(["einops==0.8.0", "Numpy==2.1.0 ; python_version >= '3.10'"]);
    assert_eq!(job["spec"]["pip"], expected, "{job:#}");
    let rj = rayjob_of(&gw, &job).await;
    let env =
        forge_capsule::runtime_env::parse(rj["spec"]["runtimeEnvYAML"].as_str().expect("yaml"))
            .expect("runtime env parses");
    assert_eq!(json!(env.pip), expected);
    let broken = zip_of(&[("train.py", SAMPLE_PY), ("pyproject.toml", "[project\n")]);
    let (status, body) = client.submit(&sample("broken-project", 8), broken).await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"]["code"], "capsule.python_project", "{body:#}");

    // Credentials in the file refuse the upload, naming the line; nothing is queued.
    let before = client.list_ids().await;
    let leaky = zip_of(&[
        ("train.py", SAMPLE_PY),
        (
            "requirements.txt",
            "numpy\n--index-url https://bob:s3cret@pypi.internal/simple\n",
        ),
    ]);
    let (status, body) = client.submit(&sample("leaky", 8), leaky).await;
    assert_eq!(status, 400, "{body:#}");
    assert_eq!(body["error"]["code"], "capsule.requirements", "{body:#}");
    let message = body["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("line 2") && !message.contains("s3cret"),
        "{message}"
    );
    assert_eq!(client.list_ids().await, before);

    // The same in the spec is a field error.
    let mut leaky_spec = sample("leaky-spec", 8);
    leaky_spec["pip"] = json!(["pkg @ https://token@git.example/pkg.whl"]);
    let (status, body) = client.submit(&leaky_spec, code()).await;
    assert_eq!(status, 422, "{body:#}");
    assert_eq!(
        body["error"]["details"]["fields"][0]["field"], "pip[0]",
        "{body:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_times_out_a_job_the_operator_lets_wait() {
    let image = "registry.invalid/forge/ray:missing";
    let gw = forge_tests::gateway::TestGateway::start_tweaked(
        "h100=1x8",
        &[("FORGE_IMAGE_NEMO_RL", image)],
        |o| {
            o.failing_images = vec![image.to_string()];
            o.old_operator = true;
        },
    )
    .await;
    let client = gw.client(&gw.token);
    let mut spec = sample("never-starts", 8);
    spec["deadlines"] = json!({"preRunningSeconds": 3});
    let id = client.submit_ok(&spec, code()).await;
    let job = dispatched(&client, &id).await;
    let name = job["rayjobName"].as_str().expect("name").to_string();
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let job = &done[&id];
    assert_eq!(job["state"], "timed-out", "{job:#}");
    assert!(
        job["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("gateway.pre-running-deadline: not running 3 s")),
        "{job:#}"
    );
    // The operator never failed the RayJob itself; the gateway deleted it.
    let api = jobs::rayjobs(gw.sim.client().expect("client"), "starforge");
    eventually(
        "the RayJob to be deleted",
        Duration::from_secs(30),
        || async {
            match api.get_opt(&name).await.expect("get") {
                None => Ok(()),
                Some(rj) => Err(not_yet(rj.data["status"].clone())),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_shows_its_ray_dashboard() {
    let gw = forge_tests::gateway::TestGateway::start("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let waits = "import os, time\nprint('waiting for the stop file', flush=True)\nwhile not os.path.exists(os.environ['STOP_FILE']):\n    time.sleep(0.1)\n";
    let stop = tempfile::tempdir().expect("temp dir");
    let stop_file = stop.path().join("stop");
    let mut spec = sample("dashboard", 8);
    spec["env"] = json!({"STOP_FILE": stop_file.display().to_string()});
    let id = client
        .submit_ok(&spec, zip_of(&[("train.py", waits)]))
        .await;
    let job = eventually("the job to run", Duration::from_secs(60), || async {
        let j = client.job(&id).await;
        if j["state"] == "running" && j["dashboard"].is_object() {
            Ok(j)
        } else {
            Err(not_yet(j))
        }
    })
    .await;
    let cluster = rayjob_of(&gw, &job).await["status"]["rayClusterName"]
        .as_str()
        .expect("cluster")
        .to_string();
    let service = format!("{cluster}-head-svc");
    assert_eq!(
        job["dashboard"]["url"],
        format!("http://{service}.starforge.svc.cluster.local:8265"),
        "{job:#}"
    );
    assert_eq!(
        job["dashboard"]["portForward"],
        format!("kubectl -n starforge port-forward svc/{service} 8265:8265")
    );
    std::fs::write(&stop_file, b"").expect("stop");
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
    assert!(
        client.job(&id).await.get("dashboard").is_none(),
        "no dashboard once over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_over_its_memory_limit_fails_as_oom_killed_with_its_log_archived() {
    let gw = forge_tests::gateway::TestGateway::start("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let mut spec = sample("hungry", 8);
    spec["pools"][0]["memoryPerNode"] = json!("256Mi");
    // Prints, then holds twice its machine's memory (as a data loader that reads a
    // whole shard would), then waits: only the limit ends it.
    let hungry = "print('loading shard 0', flush=True)\n\
                  shard = b'x' * (512 << 20)\n\
                  import time\n\
                  time.sleep(600)\n";
    let id = client
        .submit_ok(&spec, zip_of(&[("train.py", hungry)]))
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    let job = &done[&id];
    assert_eq!(job["state"], "failed", "{job:#}");
    let reason = job["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("container ray-head was OOMKilled (limit 256Mi)"),
        "the reason names the kill and the limit: {reason}"
    );
    let (status, log) = client.logs(&id).await;
    assert_eq!(status, 200, "{log}");
    assert!(log.contains("loading shard 0"), "archived log: {log}");
    println!("OOM-killed job: {reason}");
}
