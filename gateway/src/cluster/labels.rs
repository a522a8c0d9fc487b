//! The labels and annotations Forge puts on the Kubernetes objects it creates, and the
//! well-known keys it reads from objects others create (KubeRay, the device plugin).
//! Every module that names a key takes it from here.

use std::collections::BTreeMap;

/// `app.kubernetes.io/managed-by` value of every object Forge creates.
pub const MANAGED_BY: &str = "forge-gateway";
/// Label: who manages the object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Label: the job id.
pub const LABEL_JOB_ID: &str = "forge.dev/job-id";
/// Label: the team.
pub const LABEL_TEAM: &str = "forge.dev/team";
/// Label: the installation that created the object (its store's identity). A gateway
/// reconciles and deletes only objects of its own installation.
pub const LABEL_INSTANCE: &str = "forge.dev/instance";
/// Label: the playground id (its pod, key Secret and NetworkPolicy).
pub const LABEL_PLAYGROUND_ID: &str = "forge.dev/playground-id";
/// Annotation: the capsule digest.
pub const ANNOTATION_CAPSULE: &str = "forge.dev/capsule-sha256";
/// Pod annotation: the GPUs a Forge pod stands for (its logical GPUs when the pod
/// requests no `nvidia.com/gpu`, on GPU-less clusters).
pub const ANNOTATION_GPUS: &str = "forge.dev/gpus";
/// Annotation (RayJob and pod templates): the W3C `traceparent` of the job's trace, so
/// that what runs in the pods can join it (the Ray processes also get `TRACEPARENT`).
pub const ANNOTATION_TRACEPARENT: &str = "forge.dev/traceparent";
/// Label prefix reserved for Forge: plugins and specs may not set it.
pub const FORGE_PREFIX: &str = "forge.dev/";

/// KubeRay: the RayCluster a pod belongs to.
pub const RAY_CLUSTER: &str = "ray.io/cluster";
/// KubeRay: `head` or `worker`.
pub const RAY_NODE_TYPE: &str = "ray.io/node-type";
/// KubeRay: the pod's group, `headgroup` or the worker group's name.
pub const RAY_GROUP: &str = "ray.io/group";
/// KubeRay's name of the head pod's group.
pub const HEAD_GROUP: &str = "headgroup";
/// Kubernetes Jobs: the Job a pod belongs to (the RayJob's submitter Job is named
/// after the RayJob).
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The group a job's submitter pod is counted under where machines are counted per
/// group (it has no `ray.io/group`; KubeRay's Kueue integration names its PodSet so).
pub const SUBMITTER_GROUP: &str = "submitter";
/// Container of the KubeRay submitter pod that holds the driver log.
pub const SUBMITTER_CONTAINER: &str = "ray-job-submitter";

/// The NVIDIA device plugin's extended resource.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// The labels on every object Forge creates for a job.
pub fn job_labels(job_id: &str, team: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_JOB_ID.to_string(), job_id.to_string()),
        (LABEL_TEAM.to_string(), team.to_string()),
        (LABEL_INSTANCE.to_string(), instance.to_string()),
    ])
}

/// The labels on every object Forge creates for a playground.
pub fn playground_labels(id: &str, team: &str, instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_PLAYGROUND_ID.to_string(), id.to_string()),
        (LABEL_TEAM.to_string(), team.to_string()),
        (LABEL_INSTANCE.to_string(), instance.to_string()),
    ])
}

/// Selector of every RayJob any Forge installation manages.
pub fn managed_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY}")
}

/// Selector of the RayJobs installation `instance` created.
pub fn instance_selector(instance: &str) -> String {
    format!("{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_INSTANCE}={instance}")
}

/// The installation label of an object, if it has one.
pub fn instance_of<K: kube::ResourceExt>(obj: &K) -> Option<&str> {
    obj.labels().get(LABEL_INSTANCE).map(String::as_str)
}
