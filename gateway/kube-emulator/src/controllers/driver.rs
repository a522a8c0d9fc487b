//! The Ray driver of one submitted job, running "on the head": owned by its dashboard
//! entry (a stop or the cluster going away kills it, not the submitter). In process
//! mode it fetches and unpacks the `working_dir` of the RayJob's `runtimeEnvYAML`
//! (checking the capsule's SHA-256 annotation), runs the entrypoint with `sh -c` and
//! the head's and the runtime env's variables, its output in the submitter pod's log,
//! under the head container's memory limit (over it, the head container is
//! `OOMKilled`: [`super::memory_limit`]); in the timed mode the model's draw decides.
//! It then records SUCCEEDED / FAILED.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::container_env::{self, PodNetwork};
use super::hostpaths::rewrite_mounts;
use super::memory_limit::{MemoryLimit, OomKill};
use super::names::{CAPSULE_SHA_ANNOTATION, NODE_TYPE, RAY_CLUSTER, SUBMITTER_CONTAINER};
use super::pip_env;
use super::runner::{
    Exit, Graceful, RunnerError, RuntimeEnv, container_command, fetch_working_dir,
    parse_runtime_env, run_logged_graceful, unpack_zip, verify_sha256,
};
use super::shared::{Shared, rayjob_resource};
use super::timed::Draw;

/// How long the driver waits for the head's kubelet to record an OOM kill.
const OOM_RECORD_WAIT: Duration = Duration::from_secs(5);

/// The driver's outcome: Ray job status and message.
type Outcome = (&'static str, String);

/// The Ray driver of one submitted job.
pub struct Driver {
    pub(super) shared: Arc<Shared>,
    pub(super) ns: String,
    pub(super) cluster: String,
    pub(super) id: String,
    /// The submitter pod, whose log gets the driver's output.
    pub(super) pod: String,
    pub(super) rayjob: String,
    /// Cancelled when the job is stopped or its cluster goes away.
    pub(super) stop: CancellationToken,
}

impl Driver {
    fn line(&self, s: &str) {
        self.shared.logs.append(
            &self.ns,
            &self.pod,
            SUBMITTER_CONTAINER,
            format!("{s}\n").as_bytes(),
        );
    }

    /// Runs the job (timed when `draw` is set) and records its end on the dashboard.
    pub async fn run(self, draw: Option<Draw>) {
        let outcome = match draw {
            Some(d) => self.timed(d).await,
            None => self.process_outcome().await,
        };
        let Some((status, message)) = outcome else {
            return;
        };
        if self
            .shared
            .dashboard
            .get(&self.ns, &self.cluster, &self.id)
            .is_none()
        {
            // Killed because its cluster went away (the RayJob was deleted): the
            // submitter pod goes with it and prints no end, as `ray job submit` killed
            // with its pod does not (a line written here reached a live follower after
            // the gateway had archived the log).
            return;
        }
        let verb = match status {
            "SUCCEEDED" => "succeeded",
            "STOPPED" => "was stopped",
            _ => "failed",
        };
        let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
        // The line first, then the end: whoever archives the log once the job is
        // terminal finds its last line there (a follower once saw it, the archive not).
        self.line(&format!(
            "{ts}\tINFO cli.py:... -- Job '{}' {verb}",
            self.id
        ));
        self.shared
            .dashboard
            .finish(&self.ns, &self.cluster, &self.id, status, &message);
    }

    /// The timed model's run (`None`: stopped).
    async fn timed(&self, d: Draw) -> Option<Outcome> {
        self.shared
            .dashboard
            .set_running(&self.ns, &self.cluster, &self.id);
        tokio::select! {
            () = self.stop.cancelled() => return None,
            () = tokio::time::sleep(Duration::from_secs_f64(d.run_secs)) => {}
        }
        if d.app_fails {
            self.line(
                "Traceback (most recent call last):\nRuntimeError: simulated application failure",
            );
            Some((
                "FAILED",
                "Job entrypoint command failed with exit code 1".to_owned(),
            ))
        } else {
            Some(("SUCCEEDED", "Job finished successfully.".to_owned()))
        }
    }

    /// The process run's outcome (`None`: stopped).
    async fn process_outcome(&self) -> Option<Outcome> {
        match self.process().await {
            Ok(Exit::Code(0)) => Some(("SUCCEEDED", "Job finished successfully.".to_owned())),
            Ok(Exit::Code(code)) => Some((
                "FAILED",
                format!("Job entrypoint command failed with exit code {code}"),
            )),
            // What Ray's job supervisor reports for an entrypoint ended by SIGKILL.
            Ok(Exit::OomKilled { .. }) => Some((
                "FAILED",
                "Job entrypoint command failed with exit code -9".to_owned(),
            )),
            // Stopped (`ray job stop`): gracefully, or killed at the end of its grace.
            // A driver killed because its cluster went away has no entry to record in.
            Ok(Exit::Cancelled) => Some(("STOPPED", "Job was intentionally stopped.".to_owned())),
            Err(e) => {
                self.line(&e.to_string());
                Some((
                    "FAILED",
                    format!(
                        "Job failed due to an error while setting up its runtime environment: {e}"
                    ),
                ))
            }
        }
    }

    async fn process(&self) -> Result<Exit, RunnerError> {
        // The emulated driver reads its RayJob and head pod through the API server, an
        // emulator shortcut (a real driver runs on the head node and reads its own
        // filesystem): such reads are retried through injected or transient API
        // failures rather than failing the job (`internal_read`).
        let client = &self.shared.client;
        let rj_api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &self.ns, &rayjob_resource());
        let rj = internal_read(|| rj_api.get(&self.rayjob))
            .await
            .map_err(|e| RunnerError::Fetch {
                url: format!("rayjob {}", self.rayjob),
                reason: e.to_string(),
            })?;
        let spec = rj.data.get("spec").cloned().unwrap_or(Value::Null);
        let env = parse_runtime_env(spec.get("runtimeEnvYAML").and_then(Value::as_str))?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &self.ns);
        let lp = ListParams::default()
            .labels(&format!("{RAY_CLUSTER}={},{NODE_TYPE}=head", self.cluster));
        let head = internal_read(|| pods.list(&lp))
            .await
            .ok()
            .and_then(|l| l.items.into_iter().next());
        let workdir = self.prepare_workdir(&rj, &env, head.as_ref()).await?;
        let head_env = match &head {
            Some(h) => head_env(&self.shared.client, h).await?,
            None => Vec::new(),
        };
        // The runtime env is set up while the job is PENDING, as Ray does.
        let pip = match (&self.shared.cfg.pip_envs, env.pip.is_empty()) {
            (Some(root), false) => {
                let path = image_path(&self.shared.cfg.image_path);
                Some(pip_env::ensure(root, &env.pip, &path).await?)
            }
            _ => None,
        };
        self.shared
            .dashboard
            .set_running(&self.ns, &self.cluster, &self.id);
        let entrypoint = spec
            .get("entrypoint")
            .and_then(Value::as_str)
            .unwrap_or("true");
        let cmd = self.command(
            entrypoint,
            &workdir,
            &env,
            head.as_ref(),
            &head_env,
            pip.as_deref(),
        );
        // The driver runs in the head container: its memory limit applies.
        let head_container = head
            .as_ref()
            .and_then(|h| h.spec.as_ref())
            .and_then(|s| s.containers.first());
        let limit = head_container.and_then(MemoryLimit::of);
        let graceful = Graceful {
            terminate: self
                .shared
                .dashboard
                .graceful_stop(&self.ns, &self.cluster, &self.id)
                .unwrap_or_default(),
            grace: stop_wait(&env, &head_env),
        };
        let exit = run_logged_graceful(
            cmd,
            &self.shared.logs,
            (&self.ns, &self.pod, SUBMITTER_CONTAINER),
            &self.stop,
            &graceful,
            None,
            limit.as_ref().map(|l| l.bytes),
        )
        .await?;
        let _ = std::fs::remove_dir_all(&workdir);
        if let (Exit::OomKilled { rss }, Some(h), Some(c), Some(l)) =
            (exit, &head, head_container, &limit)
        {
            tracing::info!(
                rayjob = %self.rayjob, pod = %h.name_any(), rss, limit = %l.quantity,
                "the driver went over the head container's memory limit: OOMKilled"
            );
            self.oom_killed(h, &c.name).await;
        }
        Ok(exit)
    }

    /// Tells the head pod's kubelet that its container `container` was OOM-killed and
    /// waits (briefly) until the pod's status shows it, so whoever sees the job fail
    /// finds the reason on the pod.
    async fn oom_killed(&self, head: &Pod, container: &str) {
        let recorded = Arc::new(tokio::sync::Notify::new());
        self.shared.ooms.report(OomKill {
            pod_uid: head.uid().unwrap_or_default(),
            container: container.to_owned(),
            recorded: recorded.clone(),
        });
        if tokio::time::timeout(OOM_RECORD_WAIT, recorded.notified())
            .await
            .is_err()
        {
            tracing::warn!(pod = %head.name_any(), "the OOM kill was not recorded on the pod in time");
        }
    }

    /// A fresh `<scratch>/jobs/<ns>/<id>` with the unpacked `working_dir`, if any.
    async fn prepare_workdir(
        &self,
        rj: &DynamicObject,
        env: &RuntimeEnv,
        head: Option<&Pod>,
    ) -> Result<PathBuf, RunnerError> {
        let root = &self.shared.cfg.scratch_root;
        let workdir: PathBuf = root.join("jobs").join(&self.ns).join(&self.id);
        if workdir.exists() {
            std::fs::remove_dir_all(&workdir)?;
        }
        super::hostpaths::create_dir_under(root, &workdir)?;
        if let Some(uri) = &env.working_dir {
            let bytes = fetch_working_dir(root, head, uri).await?;
            if let Some(sha) = rj.annotations().get(CAPSULE_SHA_ANNOTATION) {
                verify_sha256(&bytes, sha)?;
            }
            let dest = workdir.clone();
            tokio::task::spawn_blocking(move || unpack_zip(&bytes, &dest))
                .await
                .map_err(|e| RunnerError::Io(std::io::Error::other(e)))??;
        }
        Ok(workdir)
    }

    /// `sh -c <entrypoint>` in `workdir` with the head container's env (as its kubelet
    /// built it, nothing of the emulator's; without `RAY_ADDRESS`), the runtime env's
    /// `env_vars`, `PYTHONPATH` (working dir, installed `pip` packages, the head's) and
    /// `RAY_JOB_SUBMISSION_ID`, and `PATH` led by what the images provide; paths under
    /// the head container's volumeMounts (in the entrypoint and env values) are
    /// rewritten to the volumes' host directories.
    fn command(
        &self,
        entrypoint: &str,
        workdir: &std::path::Path,
        env: &RuntimeEnv,
        head: Option<&Pod>,
        head_env: &[(String, String)],
        pip: Option<&std::path::Path>,
    ) -> tokio::process::Command {
        let root = &self.shared.cfg.scratch_root;
        let mounts = head
            .and_then(|h| h.spec.as_ref())
            .and_then(|s| s.containers.first())
            .and_then(|c| c.volume_mounts.clone())
            .unwrap_or_default();
        let rw = |s: &str| match head {
            Some(h) => rewrite_mounts(root, h, &mounts, s),
            None => s.to_owned(),
        };
        let host = head.map(ResourceExt::name_any).unwrap_or_default();
        let mut cmd = container_command("sh", &host);
        cmd.arg("-c").arg(rw(entrypoint)).current_dir(workdir);
        for (k, v) in head_env {
            cmd.env(k, rw(v));
        }
        for (k, v) in &env.env_vars {
            cmd.env(k, v);
        }
        let mut pp = workdir.display().to_string();
        if let Some(pip) = pip {
            pp = format!("{pp}:{}", pip.display());
        }
        if let Some((_, p)) = head_env.iter().rev().find(|(k, _)| k == "PYTHONPATH") {
            pp = format!("{pp}:{}", rw(p));
        }
        cmd.env("PATH", image_path(&self.shared.cfg.image_path));
        // The head's `RAY_ADDRESS` names a GCS the emulator does not run (its Ray nodes
        // are simulated): a driver using real Ray (`ray.init()`) gets a local Ray
        // instance of its own instead of waiting for one that never answers.
        cmd.env_remove("RAY_ADDRESS");
        cmd.env("PYTHONPATH", pp)
            .env("RAY_JOB_SUBMISSION_ID", &self.id);
        cmd
    }
}

/// `PATH` of the driver: what the images provide (`image_path`), then the host's.
fn image_path(image: &[PathBuf]) -> String {
    let host = std::env::var_os("PATH").unwrap_or_default();
    let dirs = image.iter().cloned().chain(std::env::split_paths(&host));
    std::env::join_paths(dirs)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| host.to_string_lossy().into_owned())
}

/// How long a stopped driver has between SIGTERM and SIGKILL: Ray's job supervisor
/// reads `RAY_JOB_STOP_WAIT_TIME_S` from its environment (the runtime env's variables
/// over the head's), default 3 s.
fn stop_wait(env: &RuntimeEnv, head_env: &[(String, String)]) -> Duration {
    const VAR: &str = "RAY_JOB_STOP_WAIT_TIME_S";
    let value = env.env_vars.get(VAR).cloned().or_else(|| {
        head_env
            .iter()
            .find(|(k, _)| k == VAR)
            .map(|(_, v)| v.clone())
    });
    Duration::from_secs(value.and_then(|v| v.trim().parse().ok()).unwrap_or(3))
}

/// The environment of the head pod's Ray container, as its kubelet built it.
async fn head_env(client: &kube::Client, head: &Pod) -> Result<Vec<(String, String)>, RunnerError> {
    let Some(c0) = head.spec.as_ref().and_then(|s| s.containers.first()) else {
        return Ok(Vec::new());
    };
    let status = head.status.clone().unwrap_or_default();
    let net = PodNetwork {
        pod_ip: status.pod_ip.unwrap_or_default(),
        host_ip: status.host_ip.unwrap_or_default(),
    };
    container_env::resolve(client, head, c0, &net)
        .await
        .map_err(|e| RunnerError::RuntimeEnv(format!("head container environment: {e}")))
}

/// Retry a read the emulator makes for its own bookkeeping through 429 / 5xx answers
/// (fault injection, a busy server) for up to ~10 s.
async fn internal_read<T, F, Fut>(mut read: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(50);
    let mut waited = Duration::ZERO;
    loop {
        match read().await {
            Err(kube::Error::Api(s))
                if (s.code == 429 || s.code >= 500) && waited < Duration::from_secs(10) =>
            {
                tokio::time::sleep(delay).await;
                waited += delay;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}
