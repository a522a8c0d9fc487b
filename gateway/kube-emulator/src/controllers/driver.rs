//! The Ray driver of one submitted job, running "on the head": owned by its dashboard
//! entry (a stop or the cluster going away kills it, not the submitter). In process
//! mode it fetches and unpacks the `working_dir` of the RayJob's `runtimeEnvYAML`
//! (checking the capsule's SHA-256 annotation), runs the entrypoint with `sh -c` and
//! a pod's environment (never the host's: `pod_env`) with the head container's env
//! (Secret references resolved) and the runtime env's variables, its output in the submitter pod's log;
//! in the timed mode the model's draw decides. It then records SUCCEEDED / FAILED.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, ResourceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::names::{CAPSULE_SHA_ANNOTATION, NODE_TYPE, RAY_CLUSTER, SUBMITTER_CONTAINER};
use super::pod_env;
use super::runner::{
    RunnerError, RuntimeEnv, fetch_working_dir, parse_runtime_env, run_logged, unpack_zip,
    verify_sha256,
};
use super::shared::{Shared, rayjob_resource};
use super::timed::Draw;

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
        self.shared
            .dashboard
            .finish(&self.ns, &self.cluster, &self.id, status, &message);
        let verb = if status == "SUCCEEDED" {
            "succeeded"
        } else {
            "failed"
        };
        let ts = Timestamp::now().strftime("%Y-%m-%d %H:%M:%S,%3f");
        self.line(&format!(
            "{ts}\tINFO cli.py:... -- Job '{}' {verb}",
            self.id
        ));
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
            Ok(Some(0)) => Some(("SUCCEEDED", "Job finished successfully.".to_owned())),
            Ok(Some(code)) => Some((
                "FAILED",
                format!("Job entrypoint command failed with exit code {code}"),
            )),
            Ok(None) => None,
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

    async fn process(&self) -> Result<Option<i32>, RunnerError> {
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
        self.shared
            .dashboard
            .set_running(&self.ns, &self.cluster, &self.id);
        let entrypoint = spec
            .get("entrypoint")
            .and_then(Value::as_str)
            .unwrap_or("true");
        let container_env = match head
            .as_ref()
            .and_then(|h| h.spec.as_ref())
            .and_then(|s| s.containers.first())
        {
            Some(c0) => pod_env::resolve(client, &self.ns, c0, str::to_owned).await?,
            None => Vec::new(),
        };
        let head_name = head.as_ref().map(ResourceExt::name_any).unwrap_or_default();
        let cmd = self.command(entrypoint, &workdir, &env, (&head_name, container_env));
        let code = run_logged(
            cmd,
            &self.shared.logs,
            (&self.ns, &self.pod, SUBMITTER_CONTAINER),
            &self.stop,
            None,
        )
        .await?;
        let _ = std::fs::remove_dir_all(&workdir);
        Ok(code)
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
        std::fs::create_dir_all(&workdir)?;
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

    /// `sh -c <entrypoint>` in `workdir` with a pod's base environment (`pod_env`), the
    /// head container's resolved env, the runtime env's `env_vars`, `PYTHONPATH` (the
    /// working directory) and `RAY_JOB_SUBMISSION_ID`.
    fn command(
        &self,
        entrypoint: &str,
        workdir: &std::path::Path,
        env: &RuntimeEnv,
        (head, container_env): (&str, Vec<(String, String)>),
    ) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(entrypoint).current_dir(workdir);
        pod_env::base(&mut cmd, workdir, head);
        cmd.envs(container_env)
            .envs(&env.env_vars)
            .env("PYTHONPATH", workdir)
            .env("RAY_JOB_SUBMISSION_ID", &self.id);
        cmd
    }
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
