//! The `ray.io/v1` RayJob as Forge writes and reads it: the subset of KubeRay v1.7.0's
//! spec the builder fills and the status fields the lifecycle follows
//! (`../shared/kuberay/ray.io_rayjobs.yaml`, `SEMANTICS.md`). Fields a server adds
//! that Forge does not use are ignored when reading; nothing here is ever written back
//! (Forge creates and deletes RayJobs, it never updates them).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// The RayJob spec subset Forge sets.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "ray.io",
    version = "v1",
    kind = "RayJob",
    plural = "rayjobs",
    namespaced,
    status = "RayJobStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct RayJobSpec {
    /// The driver command.
    #[serde(default)]
    pub entrypoint: String,
    /// Ray's runtime environment as YAML (`working_dir`, `env_vars`).
    #[serde(
        rename = "runtimeEnvYAML",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub runtime_env_yaml: Option<String>,
    /// `K8sJobMode`: a submitter Job runs `ray job submit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_mode: Option<String>,
    /// Delete the RayCluster when the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_after_job_finishes: Option<bool>,
    /// Retries of the whole RayJob (Forge: 0, training never retries blindly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Garbage collection fallback after the job ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Fail a job that does not start running within this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_running_deadline_seconds: Option<i64>,
    /// Fail a job that runs longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// The cluster the job runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_spec: Option<RayClusterSpec>,
    /// The submitter pod (KubeRay fills in its command and environment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_pod_template: Option<PodTemplateSpec>,
    /// The submitter Job's settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter_config: Option<SubmitterConfig>,
}

/// `spec.submitterConfig` (KubeRay v1.7.0).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubmitterConfig {
    /// The submitter Job's `backoffLimit` (KubeRay's default: 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// The RayCluster a RayJob creates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayClusterSpec {
    /// Ray version of the images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_version: Option<String>,
    /// The head pod.
    pub head_group_spec: HeadGroupSpec,
    /// One group per pool of workers.
    #[serde(default)]
    pub worker_group_specs: Vec<WorkerGroupSpec>,
}

/// The head pod group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadGroupSpec {
    /// `ray start` parameters.
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The head pod.
    pub template: PodTemplateSpec,
}

/// A worker pod group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerGroupSpec {
    /// The group's name (Forge: the pool's name).
    pub group_name: String,
    /// Pods of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Lower bound (Forge: = replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<i32>,
    /// Upper bound (Forge: = replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<i32>,
    /// `ray start` parameters.
    #[serde(default)]
    pub ray_start_params: BTreeMap<String, String>,
    /// The worker pods.
    pub template: PodTemplateSpec,
}

/// What KubeRay reports about a RayJob (the fields Forge reads).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RayJobStatus {
    /// `""`/New, Initializing, Waiting, Running, Complete, Failed, ValidationFailed, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_deployment_status: Option<String>,
    /// Ray's own job status: PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<String>,
    /// Why the RayJob failed (`AppFailed`, `DeadlineExceeded`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Detail of the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The Ray job's submission id (what `ray job stop` names).
    #[serde(rename = "jobId", default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The RayCluster the operator created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_cluster_name: Option<String>,
    /// The Ray dashboard's in-cluster address.
    #[serde(
        rename = "dashboardURL",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub dashboard_url: Option<String>,
}

impl RayJob {
    /// The status, or an empty one (a RayJob the operator has not seen yet).
    pub fn status_or_default(&self) -> RayJobStatus {
        self.status.clone().unwrap_or_default()
    }

    /// The RayCluster it runs on, once known.
    pub fn cluster_name(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.ray_cluster_name.as_deref())
            .filter(|s| !s.is_empty())
    }
}
