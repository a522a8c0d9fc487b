//! The manifests a job runs as — the RayJob builder: a pure function from an admitted
//! job (id, team, spec), its placement, its capsule and the configuration to the typed
//! `ray.io/v1` [`RayJob`](crate::cluster::RayJob) Forge creates, with its pods
//! (`pod.rs`), its NetworkPolicy (`network.rs`) and its submitter (`submitter.rs`).
//!
//! Shape (decisions where the issue is silent are marked *decision*):
//! - name `forge-<job id>` (≤ 47 characters, DNS-1035; a job id that does not fit is
//!   shortened to a prefix plus 8 hex digits of its SHA-256), so a re-create after a
//!   crash hits AlreadyExists and can be adopted;
//! - labels `app.kubernetes.io/managed-by: forge-gateway`, `forge.dev/job-id`,
//!   `forge.dev/team` (+ the spec's labels on the RayJob), annotation
//!   `forge.dev/capsule-sha256`;
//! - head = machine zero of the primary pool (it carries that machine's GPUs, node
//!   selector and Ray resources); one worker group per pool, named after the pool; the
//!   primary pool's group has `nodes − 1` replicas and is *omitted when that is 0*
//!   (*decision*: KubeRay accepts zero-replica groups, but an empty group only adds
//!   noise); `minReplicas = maxReplicas = replicas`;
//! - every pod has `nodeSelector {<FORGE_K8S_GPU_NODE_LABEL>: <series>}` plus the
//!   placement's selector, the tolerations `FORGE_K8S_GPU_TOLERATIONS` plus the
//!   placement's, and the placement's node affinity ([`scheduling`]); Ray resources go
//!   in `rayStartParams` only (`num-gpus`, `num-cpus`, `memory`, `object-store-memory`
//!   and a `resources` JSON), never in the group `resources` map, so the two never
//!   conflict (SEMANTICS §1). Each group advertises `forge.pool.<pool>: 1` per machine
//!   (*decision*: lets the entrypoint pin actors to a pool) merged with the placement's
//!   resources (placement wins);
//! - the Ray container requests CPU and memory equal to its limits ([`resources`]: the
//!   pool's `cpusPerNode`/`memoryPerNode`, else `FORGE_K8S_CPUS_PER_NODE` /
//!   `FORGE_K8S_MEMORY_PER_NODE` of its series), plus `nvidia.com/gpu` unless
//!   `FORGE_K8S_GPU_PASSTHROUGH=0`; the pod carries `forge.dev/gpus` (its GPUs, counted
//!   by capacity when it requests no `nvidia.com/gpu`); the capsule fetcher requests
//!   100m / 128Mi (= limits), so a namespace ResourceQuota on CPU or memory admits the
//!   pods;
//! - `/dev/shm` memory emptyDir of `FORGE_K8S_SHM_SIZE`; the storage claim's team
//!   directory `teams/<team>` at `FORGE_STORAGE_ROOT` (or `FORGE_K8S_STORAGE_MOUNT`)
//!   *only for jobs with `sharedStorage: true`* (*decision*: a job that did not ask for
//!   storage must not be bound to an RWO claim), with the common directory read-only at
//!   `<mount>/common` when configured; the corpus claim read-only at `<mount>/corpus`
//!   for jobs with `corpus: true` ([`pod`]);
//! - `secretEnv` as `env` with `secretKeyRef` on the Ray containers; the restricted
//!   security context, no service-account token, no service links ([`security`]);
//! - the submitter pod written out ([`submitter`]: the head's tolerations, job labels,
//!   requests = limits) and `submitterConfig.backoffLimit: 0` (KubeRay's default is 2:
//!   a failed driver would be re-run);
//! - `shutdownAfterJobFinishes: true`, `backoffLimit: 0`, `ttlSecondsAfterFinished`,
//!   `rayVersion`, `submissionMode: K8sJobMode`, pre-running deadline from the spec or
//!   `FORGE_KUBERAY_PRERUNNING_DEADLINE_S`, active deadline from the spec;
//! - the head container declares `gcs-server` 6379, `dashboard` 8265, `client` 10001
//!   (reachable only as each RayJob's NetworkPolicy allows, [`network`]);
//! - `runtimeEnvYAML` with `working_dir` and `env_vars` (the spec's env plus
//!   `FORGE_JOB_ID`, `FORGE_TEAM`, `FORGE_STORAGE_ROOT` when storage is mounted,
//!   `FORGE_NEMO_RL_DIR` when configured) and `pip` (the spec's packages, which hold
//!   the code's `requirements.txt` since submission), written by
//!   `forge_capsule::runtime_env_yaml_of`;
//! - with a [`forge_capsule::CapsuleInit`] (HTTP-only storage): its init container and
//!   `forge-capsule` emptyDir are added to every pod (mounted at `/forge/capsule` in the
//!   init container and the Ray container), and `working_dir` is its
//!   `file:///forge/capsule/<sha256>.zip`.

pub mod network;
mod pod;
pub mod resources;
pub mod scheduling;
pub mod security;
pub mod submitter;

use std::collections::BTreeMap;

use forge_capsule::CapsuleInit;
use forge_policy_host::model::{BORROWED_GPUS_ANNOTATION, Placement};
use sha2::{Digest as _, Sha256};

use crate::cluster::labels::{
    ANNOTATION_CAPSULE, ANNOTATION_TRACEPARENT, FORGE_PREFIX, job_labels,
};
use crate::cluster::rayjob_crd::{
    HeadGroupSpec, RayClusterSpec, RayJob, RayJobSpec, WorkerGroupSpec,
};
use crate::config::Config;
use crate::domain::Digest;
use crate::jobs::job_access::JobAccess;
use crate::jobspec::{JobSpec, names};

pub(crate) use pod::{claim_volume, volume_mount};
pub use resources::{MachineResources, cpu_and_memory, machine_resources};

/// Longest RayJob name KubeRay accepts (`MaxRayJobNameLength`).
pub const MAX_RAYJOB_NAME: usize = 47;
/// Ray dashboard port (named `dashboard` on the head).
pub const DASHBOARD_PORT: u16 = 8265;

/// The job being built (a view of the stored job record).
#[derive(Debug, Clone, Copy)]
pub struct JobRef<'a> {
    /// Gateway-assigned job id (a label value).
    pub id: &'a str,
    /// The submitting team (from authentication).
    pub team: &'a str,
    /// The validated spec.
    pub spec: &'a JobSpec,
    /// The installation identity (labels every object, see [`crate::cluster::labels`]).
    pub instance: &'a str,
    /// The job's trace context (W3C `traceparent`), passed to the Ray processes as
    /// `TRACEPARENT` and annotated on the RayJob and its pods.
    pub trace_parent: Option<&'a str>,
    /// The job's access to the gateway (`FORGE_JOB_URL`, `FORGE_JOB_TOKEN`), when the
    /// gateway hands it out.
    pub access: Option<&'a JobAccess>,
    /// The step of the last checkpoint the job acknowledged, on a run after it
    /// (`FORGE_RESUME_STEP`).
    pub resume_step: Option<u64>,
    /// The job's attempt (0: its first run; each release after a preemption adds
    /// one): the RayJob's name ([`rayjob_name_of`]) and `FORGE_ATTEMPT`.
    pub attempt: u32,
}

/// The job's code archive.
#[derive(Debug, Clone, PartialEq)]
pub struct CapsuleRef {
    /// The capsule's digest.
    pub digest: Digest,
    /// URL Ray downloads (`https://…zip`) — ignored in init-container mode.
    pub working_dir_url: String,
    /// HTTP-only storage: the `forge-capsule-fetch` init container, volume and `file://`
    /// working dir, from [`forge_capsule::init_container`].
    pub init: Option<CapsuleInit>,
}

/// Why a manifest cannot be built (the job cannot be dispatched as is).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// The spec has no pools.
    #[error("the job has no pools")]
    NoPools,
    /// The placement does not list the spec's pools in order.
    #[error("placement does not match the job's pools (expected {expected:?}, got {got:?})")]
    PlacementMismatch {
        /// Pools of the spec.
        expected: Vec<String>,
        /// Pools of the placement.
        got: Vec<String>,
    },
    /// No series was chosen for a pool.
    #[error("pool {pool}: no GPU series chosen")]
    NoSeries {
        /// The pool.
        pool: String,
    },
    /// A placement entry is not valid Kubernetes / Ray input.
    #[error("pool {pool}: invalid placement {field}: {reason}")]
    InvalidPlacement {
        /// The pool.
        pool: String,
        /// Which part (`series`, `nodeSelector`, `rayResources`, `labels`, `annotations`).
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// No image is configured for the framework.
    #[error("no image configured for framework {0}")]
    NoImage(String),
    /// `FORGE_KUBERAY_RAY_VERSION` is not set.
    #[error("FORGE_KUBERAY_RAY_VERSION is not set")]
    NoRayVersion,
    /// The job id or team cannot be used as a label value.
    #[error("{what} `{value}` is not a valid label value")]
    BadIdentity {
        /// `job id` or `team`.
        what: &'static str,
        /// The value.
        value: String,
    },
    /// The capsule's init container is not a valid Kubernetes object.
    #[error("capsule init container: {0}")]
    CapsuleInit(String),
    /// The runtime env could not be serialized.
    #[error("runtime env: {0}")]
    RuntimeEnv(String),
    /// A machine's resources are inconsistent (e.g. the object store ≥ the memory).
    #[error("pool {pool}: {reason}")]
    InvalidResources {
        /// The pool.
        pool: String,
        /// Why.
        reason: String,
    },
}

/// The RayJob name for a job id: `forge-<id>` when that is a DNS-1035 label of at most
/// 47 characters, otherwise `forge-<sanitized prefix>-<8 hex of sha256(id)>`.
pub fn rayjob_name(job_id: &str) -> String {
    let direct = format!("forge-{job_id}");
    if direct.len() <= MAX_RAYJOB_NAME && names::is_dns1035_label(&direct) {
        return direct;
    }
    let digest = hex::encode(Sha256::digest(job_id.as_bytes()));
    let sanitized: String = job_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    // forge- (6) + prefix (≤ 32) + - (1) + 8 = ≤ 47.
    let prefix: String = sanitized.chars().take(32).collect();
    let prefix = prefix.trim_matches('-');
    if prefix.is_empty() {
        format!("forge-{}", &digest[..8])
    } else {
        format!("forge-{prefix}-{}", &digest[..8])
    }
}

/// The RayJob name of a job's attempt: [`rayjob_name`] for the first run, and one
/// of its own for each later attempt (a released attempt's RayJob may still be being
/// deleted when the next one is created).
pub fn rayjob_name_of(job_id: &str, attempt: u32) -> String {
    if attempt == 0 {
        rayjob_name(job_id)
    } else {
        rayjob_name(&format!("{job_id}-{attempt}"))
    }
}

/// Checks a map as Kubernetes labels / node selector / annotations.
fn check_pairs(
    pool: &str,
    field: &'static str,
    pairs: &BTreeMap<String, String>,
    value_is_label: bool,
) -> Result<(), BuildError> {
    for (k, v) in pairs {
        let bad_value = value_is_label && !names::is_label_value(v);
        if !names::is_qualified_name(k) || bad_value {
            return Err(BuildError::InvalidPlacement {
                pool: pool.to_string(),
                field,
                reason: format!("`{k}`: `{v}` is not a valid key/value"),
            });
        }
        // Forge's own keys are Forge's to set — except the one a quota policy sets to
        // mark an admission as borrowing, which the dispatcher reads back.
        let policy_key = field == "annotations" && k == BORROWED_GPUS_ANNOTATION;
        if field != "nodeSelector" && k.starts_with(FORGE_PREFIX) && !policy_key {
            return Err(BuildError::InvalidPlacement {
                pool: pool.to_string(),
                field,
                reason: format!("`{k}` is reserved for Forge"),
            });
        }
    }
    Ok(())
}

fn runtime_env_yaml(
    job: &JobRef<'_>,
    capsule: &CapsuleRef,
    cfg: &Config,
) -> Result<String, BuildError> {
    let working_dir = match &capsule.init {
        Some(init) => init.working_dir.clone(),
        None => capsule.working_dir_url.clone(),
    };
    let mut env: BTreeMap<String, String> = job.spec.env.clone();
    env.insert("FORGE_JOB_ID".into(), job.id.into());
    env.insert("FORGE_TEAM".into(), job.team.into());
    if let Some(tp) = job.trace_parent {
        env.insert("TRACEPARENT".into(), tp.into());
    }
    if job.spec.shared_storage && cfg.storage.pvc.is_some() {
        let root = cfg.storage.mount_path();
        env.insert("FORGE_STORAGE_ROOT".into(), root.into());
        // The team's own directory of the claim is mounted there: a per-job directory
        // in it outlives every run of the job.
        let dir = format!("{}/checkpoints/{}", root.trim_end_matches('/'), job.id);
        env.insert("FORGE_CHECKPOINT_DIR".into(), dir);
    }
    if let Some(access) = job.access {
        env.insert("FORGE_JOB_URL".into(), access.url(job.id).into());
        env.insert("FORGE_JOB_TOKEN".into(), access.token(job.id));
    }
    if let Some(step) = job.resume_step {
        env.insert("FORGE_RESUME_STEP".into(), step.to_string());
    }
    env.insert("FORGE_ATTEMPT".into(), job.attempt.to_string());
    // A preemption stops the job as `ray job stop` does: SIGTERM, then SIGKILL after
    // this long (Ray's job supervisor reads it; its own default is 3 s).
    env.insert(
        "RAY_JOB_STOP_WAIT_TIME_S".into(),
        job.spec.deadlines.checkpoint_grace_s().to_string(),
    );
    if let Some(dir) = &cfg.nemo_rl_dir {
        env.insert("FORGE_NEMO_RL_DIR".into(), dir.clone());
    }
    forge_capsule::runtime_env_yaml_of(&forge_capsule::RuntimeEnv {
        working_dir,
        env_vars: env,
        pip: job.spec.pip.clone(),
    })
    .map_err(|e| BuildError::RuntimeEnv(e.to_string()))
}

fn replicas(n: u32) -> Option<i32> {
    Some(i32::try_from(n).unwrap_or(i32::MAX))
}

/// Builds the RayJob for an admitted job. The steps: check the identity and the
/// placement against the spec, build each pool's group (its series and machine),
/// then the head and worker groups, then the RayJob around them.
pub fn build_rayjob(
    job: &JobRef<'_>,
    placement: &Placement,
    capsule: &CapsuleRef,
    cfg: &Config,
) -> Result<RayJob, BuildError> {
    let spec = job.spec;
    check_job(job, placement)?;
    let image = cfg
        .image_for(&spec.framework)
        .ok_or_else(|| BuildError::NoImage(spec.framework.clone()))?;
    let ray_version = cfg
        .kuberay
        .ray_version
        .as_deref()
        .ok_or(BuildError::NoRayVersion)?;
    let groups = spec
        .pools
        .iter()
        .zip(&placement.pools)
        .map(|(pool, pp)| group(pool, pp, cfg))
        .collect::<Result<Vec<_>, _>>()?;
    let head_group = &groups[0];
    let submitter_tolerations = scheduling::tolerations(
        &head_group.pool.name,
        &cfg.pods.tolerations,
        &head_group.placement.tolerations,
    )?;
    let head = HeadGroupSpec {
        ray_start_params: pod::ray_start_params(head_group)?,
        template: pod::pod_template(head_group, true, job, capsule, cfg, image)?,
    };
    let workers = worker_groups(&groups, job, capsule, cfg, image)?;
    let mut labels = spec.labels.clone();
    labels.extend(job_labels(job.id, job.team, job.instance));
    let mut rayjob = RayJob::new(
        &rayjob_name_of(job.id, job.attempt),
        RayJobSpec {
            entrypoint: spec.entrypoint.clone(),
            runtime_env_yaml: Some(runtime_env_yaml(job, capsule, cfg)?),
            submission_mode: Some("K8sJobMode".into()),
            shutdown_after_job_finishes: Some(true),
            backoff_limit: Some(0),
            ttl_seconds_after_finished: Some(cfg.kuberay.ttl_seconds),
            pre_running_deadline_seconds: Some(
                spec.deadlines
                    .pre_running_seconds
                    .unwrap_or(i64::from(cfg.kuberay.prerunning_deadline_s)),
            ),
            active_deadline_seconds: spec.deadlines.active_seconds,
            ray_cluster_spec: Some(RayClusterSpec {
                ray_version: Some(ray_version.into()),
                head_group_spec: head,
                worker_group_specs: workers,
            }),
            submitter_pod_template: Some(submitter::pod_template(
                job.id,
                job.team,
                job.instance,
                image,
                submitter_tolerations,
            )),
            submitter_config: Some(submitter::config()),
        },
    );
    rayjob.metadata.namespace = Some(cfg.k8s.namespace.clone());
    rayjob.metadata.labels = Some(labels);
    let mut annotations =
        BTreeMap::from([(ANNOTATION_CAPSULE.to_string(), capsule.digest.to_string())]);
    if let Some(tp) = job.trace_parent {
        annotations.insert(ANNOTATION_TRACEPARENT.to_string(), tp.to_string());
    }
    rayjob.metadata.annotations = Some(annotations);
    Ok(rayjob)
}

/// A job with pools, placed pool by pool, whose id and team are label values.
fn check_job(job: &JobRef<'_>, placement: &Placement) -> Result<(), BuildError> {
    let spec = job.spec;
    if spec.pools.is_empty() {
        return Err(BuildError::NoPools);
    }
    let expected: Vec<String> = spec.pools.iter().map(|p| p.name.clone()).collect();
    let got: Vec<String> = placement.pools.iter().map(|p| p.pool.clone()).collect();
    if expected != got {
        return Err(BuildError::PlacementMismatch { expected, got });
    }
    for (what, value) in [("job id", job.id), ("team", job.team)] {
        if value.is_empty() || !names::is_label_value(value) {
            return Err(BuildError::BadIdentity {
                what,
                value: value.to_string(),
            });
        }
    }
    Ok(())
}

/// One pool as placed: its series (a label value) and its machine, with the
/// placement's selectors, labels and annotations checked.
fn group<'a>(
    pool: &'a crate::jobspec::PoolSpec,
    pp: &'a forge_policy_host::model::PoolPlacement,
    cfg: &Config,
) -> Result<pod::Group<'a>, BuildError> {
    let series = pp
        .series
        .as_deref()
        .or(pool.series.as_deref())
        .ok_or_else(|| BuildError::NoSeries {
            pool: pool.name.clone(),
        })?;
    if series.is_empty() || !names::is_label_value(series) {
        return Err(BuildError::InvalidPlacement {
            pool: pool.name.clone(),
            field: "series",
            reason: format!("`{series}` is not a label value"),
        });
    }
    check_pairs(&pool.name, "nodeSelector", &pp.node_selector, true)?;
    check_pairs(&pool.name, "labels", &pp.labels, true)?;
    check_pairs(&pool.name, "annotations", &pp.annotations, false)?;
    Ok(pod::Group {
        pool,
        placement: pp,
        series,
        machine: machine_resources(pool, series, cfg)?,
    })
}

/// The worker groups: the primary pool's machines but the head's, and every other
/// pool's (a group of no machine is left out).
fn worker_groups(
    groups: &[pod::Group<'_>],
    job: &JobRef<'_>,
    capsule: &CapsuleRef,
    cfg: &Config,
    image: &str,
) -> Result<Vec<WorkerGroupSpec>, BuildError> {
    let mut workers = Vec::new();
    for (i, group) in groups.iter().enumerate() {
        let n = if i == 0 {
            group.pool.nodes.saturating_sub(1)
        } else {
            group.pool.nodes
        };
        if n == 0 {
            continue;
        }
        workers.push(WorkerGroupSpec {
            group_name: group.pool.name.clone(),
            replicas: replicas(n),
            min_replicas: replicas(n),
            max_replicas: replicas(n),
            ray_start_params: pod::ray_start_params(group)?,
            template: pod::pod_template(group, false, job, capsule, cfg, image)?,
        });
    }
    Ok(workers)
}

#[cfg(test)]
mod tests;
