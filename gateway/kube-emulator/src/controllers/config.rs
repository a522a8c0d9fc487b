//! Configuration of the simulated controllers: the kubelet's run mode (really run
//! the jobs, or the timed model), failing images, the scratch root, simulated pull
//! time, back-off base, reconcile concurrency and the inference stand-in's image.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::ray::install::RayInstall;
use super::timed::TimedModel;

/// How the simulated kubelet runs the submitter pods (and init containers).
#[derive(Clone, Debug, Default)]
pub enum RunMode {
    /// Really run the job: fetch and unpack `working_dir`, run the entrypoint with
    /// `sh -c`, and run init containers' commands on the host.
    #[default]
    Process,
    /// No process: run time and outcome come from a [`TimedModel`] (scale tests).
    Timed(TimedModel),
}

/// Configuration of the simulated controllers.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Run mode of the kubelet.
    pub mode: RunMode,
    /// Images whose pulls fail (`ErrImagePull` then `ImagePullBackOff`). Matched against
    /// the image string as written in the pod spec.
    pub failing_images: BTreeSet<String>,
    /// Root of the kubelet's host scratch space: emptyDir volumes live in
    /// `<root>/pods/<pod uid>/volumes/<volume>`, unpacked jobs in `<root>/jobs/…`.
    ///
    /// A root that does not exist when [`crate::Sim::start`] runs is created by the
    /// simulator and removed again when it is shut down or dropped; an existing
    /// directory belongs to the caller and is left in place. The default is a fresh
    /// `<tmp>/forge-kubesim-<pid>-<n>-<random>` per configuration, so simulators running side by
    /// side in one process never share (or remove) each other's scratch space.
    pub scratch_root: PathBuf,
    /// Simulated image pull time (per image, first pull on a node).
    pub image_pull: Duration,
    /// Base of the kubelet back-off (image pulls, crashing init containers); doubles up
    /// to 300 s like the real kubelet (which starts at 10 s).
    pub backoff_base: Duration,
    /// Number of RayJob / RayCluster / Job reconciles run concurrently (0 = unbounded).
    pub concurrency: u16,
    /// Whether the simulated operator enforces `preRunningDeadlineSeconds` (recent
    /// KubeRay). `false` plays an older operator that silently ignores the field, so a
    /// job that never starts waits forever unless its submitter times it out.
    pub pre_running_deadline: bool,
    /// Process mode: directories the container images provide first on `PATH` (the
    /// Ray image's `python` with `ray`, for example) for the Ray driver. Empty: the
    /// host's `PATH` only.
    pub image_path: Vec<PathBuf>,
    /// Process mode: the Ray that Ray node and submitter containers run
    /// ([`crate::controllers::ray`]). `None`: Ray is simulated (the submitter runs the
    /// entrypoint as a plain local process).
    pub ray: Option<RayInstall>,
    /// Process mode: where a runtime env's `pip` packages are installed (one directory
    /// per package list, reused; `pip_env.rs`). `None`: `pip` is accepted and ignored.
    pub pip_envs: Option<PathBuf>,
    /// The image whose containers run the OpenAI-compatible inference stand-in
    /// ([`crate::inference`]) in process mode, in place of vLLM (matched against the
    /// image string as written in the pod spec). `None`: no stand-in.
    pub inference_image: Option<String>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            mode: RunMode::Process,
            failing_images: BTreeSet::new(),
            scratch_root: default_scratch_root(),
            image_pull: Duration::from_millis(200),
            backoff_base: Duration::from_secs(10),
            concurrency: 0,
            pre_running_deadline: true,
            image_path: Vec::new(),
            ray: None,
            pip_envs: None,
            inference_image: None,
        }
    }
}

/// A scratch root no other default configuration uses:
/// `<tmp>/forge-kubesim-<pid>-<n>-<random>`. The random part keeps it apart from roots
/// an earlier process with the same (reused) pid left behind — a killed simulator
/// cannot remove its root, and pids wrap (32 768 by default) over a long test run.
fn default_scratch_root() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let random: u64 = rand::random();
    std::env::temp_dir().join(format!(
        "forge-kubesim-{}-{n}-{random:016x}",
        std::process::id()
    ))
}
