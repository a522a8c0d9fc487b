//! The submitter pod (KubeRay's `ray job submit` Job, whose log is the driver log),
//! written out instead of KubeRay's default so that it can run where a real GPU
//! cluster puts Forge's pods: it carries the head's tolerations (a cluster whose only
//! nodes are tainted GPU nodes still runs it), Forge's job labels, and CPU and memory
//! requests equal to its limits (a namespace ResourceQuota admits it). KubeRay fills
//! in its command and environment (`submitterPodTemplate` with no command). The Job
//! itself gets `submitterConfig.backoffLimit: 0`: a failed driver is not re-run.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodTemplateSpec, ResourceRequirements, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::cluster::labels::{SUBMITTER_CONTAINER, job_labels};
use crate::cluster::rayjob_crd::SubmitterConfig;
use crate::domain::quantity;

/// CPU of the submitter, millicores (requests = limits; KubeRay's default limit). The
/// gang fit counts it: a job is dispatched only where its submitter fits too.
pub const CPU_MILLIS: u64 = 1000;
/// Memory of the submitter, bytes (requests = limits; KubeRay's default limit).
pub const MEMORY_BYTES: u64 = 1 << 30;

/// The submitter pod template for a job.
pub fn pod_template(
    job_id: &str,
    team: &str,
    instance: &str,
    image: &str,
    tolerations: Option<Vec<Toleration>>,
) -> PodTemplateSpec {
    let amounts = BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(quantity::cpu_quantity(CPU_MILLIS)),
        ),
        (
            "memory".to_string(),
            Quantity(quantity::bytes_quantity(MEMORY_BYTES)),
        ),
    ]);
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(job_labels(job_id, team, instance)),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            tolerations,
            containers: vec![Container {
                name: SUBMITTER_CONTAINER.into(),
                image: Some(image.into()),
                resources: Some(ResourceRequirements {
                    limits: Some(amounts.clone()),
                    requests: Some(amounts),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// The submitter Job's settings: no retries.
pub fn config() -> SubmitterConfig {
    SubmitterConfig {
        backoff_limit: Some(0),
    }
}
