//! One pod group of the RayJob (the head, or a pool's workers): its `ray start`
//! parameters and pod template — labels and annotations, image, resources (requests =
//! limits: CPU, memory and, with passthrough, `nvidia.com/gpu`), node selector,
//! tolerations and node affinity, volumes, the capsule fetcher, the team's Secret
//! environment and the restricted security context ([`super::security`]).
//!
//! Volumes (*decision*: only what the job asked for):
//! - `/dev/shm`: a memory emptyDir of `FORGE_K8S_SHM_SIZE`;
//! - storage (jobs with `sharedStorage`): the claim's directory `teams/<team>`
//!   (`subPath`) read-write at the storage mount — a team never sees another team's
//!   directory — plus, when `FORGE_K8S_STORAGE_COMMON_SUBPATH` is set, that directory
//!   of the claim read-only at `<mount>/common`;
//! - the corpus claim read-only at `<mount>/corpus` for jobs with `corpus: true`;
//! - the capsule fetcher's emptyDir when there is one.
//!
//! `secretEnv` becomes `env` entries with `valueFrom.secretKeyRef` on the Ray container:
//! the kubelet reads the Secret, so the value is never in the RayJob, the store or the
//! capsule.

use std::collections::BTreeMap;

use forge_capsule::CapsuleInit;
use forge_policy_host::model::PoolPlacement;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements,
    SecretKeySelector, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::resources::{MachineResources, ray_resource_params};
use super::security;
use super::{BuildError, CapsuleRef, DASHBOARD_PORT, JobRef, scheduling};
use crate::cluster::labels::{
    ANNOTATION_CAPSULE, ANNOTATION_GPUS, ANNOTATION_TRACEPARENT, GPU_RESOURCE, job_labels,
};
use crate::config::{Config, StorageConfig};
use crate::domain::quantity;
use crate::jobspec::{JobSpec, PoolSpec};

/// Everything the builder needs to know about one pod group.
pub(super) struct Group<'a> {
    pub pool: &'a PoolSpec,
    pub placement: &'a PoolPlacement,
    pub series: &'a str,
    pub machine: MachineResources,
}

/// `ray start` parameters: GPUs, CPUs, memory and object store consistent with the
/// container's resources, and the custom resources (Ray resources go here only, never
/// in the group `resources` map, so the two never conflict).
pub(super) fn ray_start_params(group: &Group<'_>) -> Result<BTreeMap<String, String>, BuildError> {
    let mut resources: BTreeMap<String, f64> = BTreeMap::new();
    resources.insert(format!("forge.pool.{}", group.pool.name), 1.0);
    for (name, amount) in &group.placement.ray_resources {
        let valid_name = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/'));
        if !valid_name
            || !amount.is_finite()
            || *amount < 0.0
            || matches!(
                name.as_str(),
                "CPU" | "GPU" | "memory" | "object_store_memory"
            )
        {
            return Err(BuildError::InvalidPlacement {
                pool: group.pool.name.clone(),
                field: "rayResources",
                reason: format!("`{name}` = {amount} is not a valid Ray custom resource"),
            });
        }
        resources.insert(name.clone(), *amount);
    }
    let resources_json =
        serde_json::to_string(&resources).map_err(|e| BuildError::RuntimeEnv(e.to_string()))?;
    // KubeRay pastes the value into a bash command line: quote it for the shell. Names
    // are restricted above, so the JSON contains no single quote.
    let mut params = ray_resource_params(&group.machine);
    params.insert("num-gpus".to_string(), group.pool.gpus_per_node.to_string());
    params.insert("resources".to_string(), format!("'{resources_json}'"));
    Ok(params)
}

/// A mount of volume `name` at `path`.
pub(crate) fn volume_mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The storage claim's team directory (and the common one) and the corpus claim, as
/// the job asked for them.
fn storage(
    spec: &JobSpec,
    team: &str,
    cfg: &StorageConfig,
    volumes: &mut Vec<Volume>,
    mounts: &mut Vec<VolumeMount>,
) {
    if spec.shared_storage
        && let Some(pvc) = &cfg.pvc
    {
        volumes.push(claim_volume("forge-storage", pvc, false));
        mounts.push(VolumeMount {
            sub_path: Some(StorageConfig::team_subpath(team)),
            ..volume_mount("forge-storage", cfg.mount_path(), false)
        });
        if let Some(common) = &cfg.common_subpath {
            mounts.push(VolumeMount {
                sub_path: Some(common.clone()),
                ..volume_mount("forge-storage", &cfg.common_mount_path(), true)
            });
        }
    }
    if spec.corpus
        && let Some(pvc) = &cfg.corpus_pvc
    {
        volumes.push(claim_volume("forge-corpus", pvc, true));
        mounts.push(volume_mount("forge-corpus", &cfg.corpus_mount_path(), true));
    }
}

/// The `secretEnv` entries as `env` with `valueFrom.secretKeyRef` (none: `None`).
fn secret_env(spec: &JobSpec) -> Option<Vec<EnvVar>> {
    (!spec.secret_env.is_empty()).then(|| {
        spec.secret_env
            .iter()
            .map(|(name, r)| EnvVar {
                name: name.clone(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: r.secret.clone(),
                        key: r.key.clone(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            })
            .collect()
    })
}

/// Volume `name` of the persistent volume claim `claim`.
pub(crate) fn claim_volume(name: &str, claim: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: read_only.then_some(true),
        }),
        ..Volume::default()
    }
}

/// CPU and memory of the capsule fetcher (requests = limits): every container of a pod
/// needs them where a ResourceQuota covers CPU or memory.
const FETCH_CPU: &str = "100m";
const FETCH_MEMORY: &str = "128Mi";

/// The capsule fetcher's init container, volume and mount as Kubernetes objects.
fn capsule_objects(init: &CapsuleInit) -> Result<(Container, Volume, VolumeMount), BuildError> {
    let bad = |e: serde_json::Error| BuildError::CapsuleInit(e.to_string());
    let mut container: Container =
        serde_json::from_value(init.init_container.clone()).map_err(bad)?;
    if container.resources.is_none() {
        let amounts = BTreeMap::from([
            ("cpu".to_string(), Quantity(FETCH_CPU.into())),
            ("memory".to_string(), Quantity(FETCH_MEMORY.into())),
        ]);
        container.resources = Some(ResourceRequirements {
            limits: Some(amounts.clone()),
            requests: Some(amounts),
            ..ResourceRequirements::default()
        });
    }
    Ok((
        container,
        serde_json::from_value(init.volume.clone()).map_err(bad)?,
        serde_json::from_value(init.volume_mount.clone()).map_err(bad)?,
    ))
}

/// The container's resources: requests = limits for CPU and memory, and the GPUs
/// unless `FORGE_K8S_GPU_PASSTHROUGH=0`.
fn container_resources(group: &Group<'_>, cfg: &Config) -> ResourceRequirements {
    let mut amounts = BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(quantity::cpu_quantity(group.machine.cpu_millis)),
        ),
        (
            "memory".to_string(),
            Quantity(quantity::bytes_quantity(group.machine.memory_bytes)),
        ),
    ]);
    if cfg.k8s.gpu_passthrough && group.pool.gpus_per_node > 0 {
        amounts.insert(
            GPU_RESOURCE.to_string(),
            Quantity(group.pool.gpus_per_node.to_string()),
        );
    }
    ResourceRequirements {
        limits: Some(amounts.clone()),
        requests: Some(amounts),
        ..ResourceRequirements::default()
    }
}

pub(super) fn pod_template(
    group: &Group<'_>,
    is_head: bool,
    job: &JobRef<'_>,
    capsule: &CapsuleRef,
    cfg: &Config,
    image: &str,
) -> Result<PodTemplateSpec, BuildError> {
    let spec = job.spec;
    let mut labels = group.placement.labels.clone();
    labels.extend(job_labels(job.id, job.team, job.instance));
    let mut annotations = group.placement.annotations.clone();
    annotations.insert(ANNOTATION_CAPSULE.into(), capsule.digest.to_string());
    annotations.insert(ANNOTATION_GPUS.into(), group.pool.gpus_per_node.to_string());
    if let Some(tp) = job.trace_parent {
        annotations.insert(ANNOTATION_TRACEPARENT.into(), tp.to_string());
    }
    let mut node_selector = group.placement.node_selector.clone();
    node_selector.insert(cfg.k8s.gpu_node_label.clone(), group.series.into());

    let mut volumes = vec![Volume {
        name: "dshm".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(Quantity(cfg.k8s.shm_size.clone())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut mounts = vec![volume_mount("dshm", "/dev/shm", false)];
    storage(spec, job.team, &cfg.storage, &mut volumes, &mut mounts);
    let mut init_containers = None;
    if let Some(init) = &capsule.init {
        let (mut container, volume, mount) = capsule_objects(init)?;
        container.security_context = Some(security::container(cfg));
        init_containers = Some(vec![container]);
        volumes.push(volume);
        mounts.push(mount);
    }
    let port = |port: u16, name: &str| ContainerPort {
        container_port: i32::from(port),
        name: Some(name.into()),
        ..ContainerPort::default()
    };
    let resources = Some(container_resources(group, cfg));
    let pool = &group.pool.name;
    let tolerations =
        scheduling::tolerations(pool, &cfg.pods.tolerations, &group.placement.tolerations)?;
    let affinity = scheduling::affinity(pool, &group.placement.affinity)?;
    let container = Container {
        name: if is_head { "ray-head" } else { "ray-worker" }.into(),
        image: Some(image.into()),
        volume_mounts: Some(mounts),
        ports: is_head.then(|| {
            vec![
                port(6379, "gcs-server"),
                port(DASHBOARD_PORT, "dashboard"),
                port(10001, "client"),
            ]
        }),
        resources,
        env: secret_env(spec),
        security_context: Some(security::container(cfg)),
        ..Container::default()
    };
    Ok(PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(security::pod(
            cfg,
            PodSpec {
                node_selector: Some(node_selector),
                tolerations,
                affinity,
                init_containers,
                containers: vec![container],
                volumes: Some(volumes),
                ..PodSpec::default()
            },
        )),
    })
}
