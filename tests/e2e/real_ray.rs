//! Ray programs through Forge on real Ray: the dev composition with its emulated Ray
//! nodes running `ray start` from the installed Ray (`FORGE_TEST_RAY_VENV`, see
//! `forge_tests::ray`). Each test submits a Ray program from `tests/fixtures/ray/` as
//! a job and reads what the driver printed; the capsule reaches Ray's runtime-env agent
//! the HTTP-only-storage way (the init container verified it, `working_dir` is its
//! `file://` path). They run one cluster at a time and end with no Ray process left.

use std::path::Path;
use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, rayjobs, zip_of};
use forge_tests::ray::{self, DevProcess};
use serde_json::{Value, json};

/// A job's cluster from submit to its driver's end (Ray's start, the gang, the driver).
const RUN: Duration = Duration::from_secs(180);
/// How long a Ray node's processes may outlive its pod, job or emulator.
const GONE: Duration = Duration::from_secs(30);

fn fixture(name: &str) -> String {
    let path = forge_tests::plugins::workspace_root()
        .join("tests/fixtures/ray")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn spec(name: &str, script: &str, pools: Value) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": format!("python3 {script}"),
        "pools": pools,
    })
}

/// One pool `train` of `nodes` machines with `gpus` GPUs each.
fn train(nodes: u32, gpus: u32) -> Value {
    json!([{"name": "train", "nodes": nodes, "gpusPerNode": gpus}])
}

/// The dev gateway on real Ray, the only real-Ray cluster while it lives.
struct RayGateway {
    gw: TestGateway,
    client: JobClient,
    _one: tokio::sync::MutexGuard<'static, ()>,
}

impl RayGateway {
    /// On the node layout `nodes`; `None` when there is no Ray to run (outside CI).
    async fn start(nodes: &str) -> Option<RayGateway> {
        let venv = ray::venv()?;
        let one = ray::one_cluster_at_a_time().await;
        let gw = TestGateway::start_tweaked(nodes, &[], |o| o.ray_venv = Some(venv)).await;
        let client = gw.client(&gw.token);
        Some(RayGateway {
            gw,
            client,
            _one: one,
        })
    }

    fn rayjobs(&self) -> kube::Api<kube::api::DynamicObject> {
        let client = self.gw.sim.client().expect("client");
        rayjobs(client, &self.gw.state.config.k8s.namespace)
    }

    /// Waits until job `id` ends; panics with the job's report and the tails of its Ray
    /// nodes' logs when it does not within [`RUN`].
    async fn wait_terminal(&self, id: &str) -> std::collections::BTreeMap<String, Value> {
        match self.client.try_wait_terminal(&[id.to_owned()], RUN).await {
            Ok(done) => done,
            Err(report) => {
                let pods = self.pods().await;
                let nodes = ray::node_log_tails(self.gw.sim.scratch_root(), 25);
                panic!("{report}\n--- the pods ---\n{pods}\n--- the Ray nodes' logs ---\n{nodes}")
            }
        }
    }

    /// A line per pod of the job namespace: name, phase, and each container's state.
    async fn pods(&self) -> String {
        let client = self.gw.sim.client().expect("client");
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, &self.gw.state.config.k8s.namespace);
        let Ok(list) = api.list(&Default::default()).await else {
            return "(the pods could not be listed)".to_owned();
        };
        let mut out = String::new();
        for pod in list.items {
            let status = pod.status.unwrap_or_default();
            let containers: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .map(|c| format!("{} ready={} {:?}", c.name, c.ready, c.state))
                .collect();
            out.push_str(&format!(
                "{} {:?} {containers:?}\n",
                pod.metadata.name.unwrap_or_default(),
                status.phase
            ));
        }
        out
    }

    /// Waits until the job's RayJob is deleted and no Ray process is left.
    async fn all_gone(&self) {
        forge_tests::jobs::wait_no_rayjobs(&self.rayjobs(), GONE).await;
        let scope = self.gw.sim.scratch_root();
        ray::wait_no_ray_processes(scope, GONE, "after the job's RayJob was deleted").await;
    }
}

/// Runs the job to its end; returns its final view and its log. Panics, with the log,
/// unless it succeeded; with the Ray nodes' logs too when it did not end.
async fn run_ok(rg: &RayGateway, spec: &Value, code: Vec<u8>) -> (Value, String) {
    let client = &rg.client;
    let id = client.submit_ok(spec, code).await;
    let done = rg.wait_terminal(&id).await;
    let job = done[&id].clone();
    let (_, log) = client.logs(&id).await;
    assert_eq!(job["state"], "succeeded", "{job:#}\n--- log ---\n{log}");
    (job, log)
}

/// The driver's line starting with `prefix` (the runner and Ray print others around).
fn line<'a>(log: &'a str, prefix: &str) -> &'a str {
    log.lines()
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in the log:\n{log}"))
}

/// The seven-line program of issue 36: four `num_gpus=1` tasks pinned to the pool's
/// custom resource on a 2-machine gang see two alive Ray nodes and four GPUs, and run
/// on both machines. Then the RayJob is deleted and no Ray process is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ray_program_runs_gpu_tasks_on_the_gangs_pool() {
    let Some(rg) = RayGateway::start("h100=2x2").await else {
        return;
    };
    let code = zip_of(&[("gpu_tasks.py", &fixture("gpu_tasks.py"))]);
    let (_, log) = run_ok(&rg, &spec("gpu-tasks", "gpu_tasks.py", train(2, 2)), code).await;
    assert_eq!(
        line(&log, "alive="),
        "alive=2 gpus=4 tasks=4 task_nodes=2",
        "{log}"
    );
    rg.all_gone().await;
}

/// Actors in a `STRICT_SPREAD` placement group land on distinct machines of the gang; a
/// group with more bundles than machines is never placed. The driver's working
/// directory is the capsule Ray's agent unpacked from the init container's `file://`
/// path (the dev store is HTTP-only), not the path itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actors_spread_strictly_across_the_gang_from_an_init_container_capsule() {
    let Some(rg) = RayGateway::start("h100=2x2").await else {
        return;
    };
    let client = &rg.client;
    let code = zip_of(&[("placement.py", &fixture("placement.py"))]);
    let spec = spec("placement", "placement.py", train(2, 1));
    let id = client.submit_ok(&spec, code).await;
    // The RayJob hands Ray the init container's verified copy.
    let api = rg.rayjobs();
    let runtime_env =
        forge_tests::wait::eventually("the job's RayJob", Duration::from_secs(60), || async {
            let list = api.list(&Default::default()).await.expect("list rayjobs");
            match list.items.first() {
                Some(rj) => Ok(rj.data["spec"]["runtimeEnvYAML"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()),
                None => Err(forge_tests::wait::not_yet("no RayJob")),
            }
        })
        .await;
    let runtime_env: Value = serde_json::from_str(&runtime_env).expect("runtimeEnvYAML is JSON");
    let working_dir = runtime_env["working_dir"].as_str().unwrap_or_default();
    assert!(
        working_dir.starts_with("file:///forge/capsule/"),
        "{runtime_env}"
    );
    let done = rg.wait_terminal(&id).await;
    let (_, log) = client.logs(&id).await;
    assert_eq!(done[&id]["state"], "succeeded", "{log}");
    assert_eq!(line(&log, "ranks="), "ranks=[0, 1] nodes=2", "{log}");
    assert_eq!(line(&log, "three_placed="), "three_placed=False", "{log}");
    let cwd = line(&log, "cwd ");
    assert!(
        cwd.contains("/runtime_resources/working_dir_files/") && !cwd.contains("/forge/capsule"),
        "{cwd}"
    );
    rg.all_gone().await;
}

/// Two pools: tasks asking for `forge.pool.a` run on the head (machine zero of the
/// primary pool), those asking for `forge.pool.b` on pool `b`'s worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_land_on_the_worker_group_of_their_pool_resource() {
    let Some(rg) = RayGateway::start("h100=2x2").await else {
        return;
    };
    let code = zip_of(&[("pools.py", &fixture("pools.py"))]);
    let pools = json!([
        {"name": "a", "nodes": 1, "gpusPerNode": 1},
        {"name": "b", "nodes": 1, "gpusPerNode": 1}
    ]);
    let (_, log) = run_ok(&rg, &spec("pools", "pools.py", pools), code).await;
    let a = line(&log, "pool=a ");
    let b = line(&log, "pool=b ");
    assert!(a.contains("-head-") && !a.contains(','), "{a}");
    assert!(b.contains("-b-worker-") && !b.contains(','), "{b}");
}

/// The code's `requirements.txt` is installed by Ray's runtime-env agent (from PyPI)
/// for the driver and the tasks alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pip_runtime_env_is_installed_by_rays_agent() {
    let Some(rg) = RayGateway::start("h100=1x1").await else {
        return;
    };
    let code = zip_of(&[
        ("pip_env.py", &fixture("pip_env.py")),
        ("requirements.txt", "tabulate==0.9.0\n"),
    ]);
    let (_, log) = run_ok(&rg, &spec("pip", "pip_env.py", train(1, 1)), code).await;
    assert_eq!(
        line(&log, "driver_tabulate="),
        "driver_tabulate=0.9.0 task_tabulate=0.9.0 table=forge  1",
        "{log}"
    );
}

/// A job cancelled while its Ray program runs (actors on both machines) stops every
/// Ray process of its cluster, and removes the nodes' temp dirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_ray_job_leaves_no_ray_process() {
    let Some(rg) = RayGateway::start("h100=2x1").await else {
        return;
    };
    let client = &rg.client;
    let code = zip_of(&[("forever.py", &fixture("forever.py"))]);
    let id = client
        .submit_ok(&spec("forever", "forever.py", train(2, 1)), code)
        .await;
    let dirs = holding(client, &id, rg.gw.sim.scratch_root()).await;
    let (status, view) = client
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
        .await;
    assert_eq!(status, 200, "{view}");
    let scope = rg.gw.sim.scratch_root();
    ray::wait_no_ray_processes(scope, GONE, "after the job was cancelled").await;
    ray::wait_removed(&dirs, GONE).await;
}

/// A preemption on real Ray: the gateway stops the victim through its head's real
/// dashboard (`POST /api/jobs/<id>/stop` through the pod proxy), Ray's job supervisor
/// delivers the SIGTERM, the program acknowledges its step and exits; the victim is
/// released, the preemptor runs, and the victim's next attempt, on a cluster of its
/// own, resumes from that step and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_ray_job_checkpoints_on_sigterm_and_resumes() {
    let Some(rg) = RayGateway::start("h100=1x8").await else {
        return;
    };
    let client = &rg.client;
    let victim = client
        .submit_ok(
            &forge_tests::jobs::trainer_spec(
                "victim",
                0,
                1,
                "steps=300 step_s=0.05 on_term=ack",
                30,
            ),
            forge_tests::jobs::trainer_zip(),
        )
        .await;
    forge_tests::wait::eventually("the victim's program running", RUN, || async {
        let (_, log) = client.logs(&victim).await;
        if log.contains("attempt 0 starting from step 0") {
            Ok(())
        } else {
            Err(forge_tests::wait::not_yet(log))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await; // a few steps to save
    let preemptor = client
        .submit_ok(
            &forge_tests::jobs::short_spec("preemptor", 50),
            forge_tests::jobs::note_zip(),
        )
        .await;
    let done = rg.wait_terminal(&preemptor).await;
    assert_eq!(
        done[&preemptor]["state"], "succeeded",
        "{:#}",
        done[&preemptor]
    );
    let done = rg.wait_terminal(&victim).await;
    assert_eq!(done[&victim]["state"], "succeeded", "{:#}", done[&victim]);
    let job = client.job(&victim).await;
    let step = job["preemptions"][0]["checkpointStep"]
        .as_u64()
        .unwrap_or_else(|| panic!("acknowledged on SIGTERM: {job:#}"));
    let first = client
        .call(
            reqwest::Method::GET,
            &format!("/v1/jobs/{victim}/logs?attempt=0"),
        )
        .await
        .1;
    let first = first.as_str().unwrap_or_default();
    // It acknowledges only on SIGTERM: the step recorded is Ray's signal at work.
    assert!(first.contains("attempt 0 starting from step 0"), "{first}");
    assert!(step > 0, "{job:#}");
    let (_, second) = client.logs(&victim).await;
    assert!(
        second.contains(&format!("attempt 1 starting from step {step}")),
        "{second}"
    );
    assert!(second.contains("done at step 300"), "{second}");
    rg.all_gone().await;
}

/// `forge-gateway dev` killed (SIGKILL) while a Ray program runs: its emulator goes
/// with it, and so does every Ray process it started (the fate-sharing supervisors),
/// and the nodes' temp dirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_dev_gateway_leaves_no_ray_process() {
    let Some(venv) = ray::venv() else { return };
    let _one = ray::one_cluster_at_a_time().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut dev = DevProcess::start(dir.path(), &venv, "h100=2x1").await;
    let client = dev.client();
    let code = zip_of(&[("forever.py", &fixture("forever.py"))]);
    let id = client
        .submit_ok(&spec("forever", "forever.py", train(2, 1)), code)
        .await;
    let dirs = holding(&client, &id, &dev.scope).await;
    dev.proc.signal("KILL");
    dev.proc.wait_exit(Duration::from_secs(10)).await;
    ray::wait_no_ray_processes(&dev.scope, GONE, "after forge-gateway dev was killed").await;
    ray::wait_removed(&dirs, GONE).await;
    let log = std::fs::read_to_string(&dev.log).unwrap_or_default();
    assert!(
        log.contains("Ray nodes run the installed Ray"),
        "the dev log says which Ray runs:\n{log}"
    );
}

/// Waits until job `id`'s program holds its actors (its log says so); returns the temp
/// dirs of the Ray nodes running then (two: the gang's machines).
async fn holding(client: &JobClient, id: &str, scope: &Path) -> Vec<std::path::PathBuf> {
    forge_tests::wait::eventually("the Ray program to hold its actors", RUN, || async {
        let (_, log) = client
            .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs"))
            .await;
        let text = log.as_str().unwrap_or_default().to_owned();
        if text.contains("holding ['pong', 'pong']") {
            Ok(())
        } else {
            Err(forge_tests::wait::not_yet(text))
        }
    })
    .await;
    let dirs = ray::node_dirs(scope);
    assert_eq!(dirs.len(), 2, "the gang's two Ray nodes: {dirs:?}");
    dirs
}
