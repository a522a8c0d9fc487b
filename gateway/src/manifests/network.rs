//! The NetworkPolicy of one RayJob: its Ray pods (head and workers) accept traffic only
//! from
//! - its own Ray pods (`forge.dev/job-id=<id>`),
//! - its own submitter pod (`batch.kubernetes.io/job-name=<rayjob>`: KubeRay's K8sJobMode
//!   submitter Job is named after the RayJob and reaches the head's dashboard),
//! - the gateway's pods (`app.kubernetes.io/name=forge-gateway`, in the namespace), and
//! - every pod of the KubeRay operator's namespace (`FORGE_K8S_OPERATOR_NAMESPACE`: the
//!   operator polls the head's dashboard).
//!
//! *Decision*: "the gateway's namespace" is not admitted as a whole — jobs run in the
//! gateway's namespace, so that would admit every other team's pods. Other teams' Ray
//! pods match none of the peers: their job id differs, their submitter Job has another
//! name, and team plugins cannot put Forge's or Kubernetes' label keys on pods (see
//! `forge_policy_host::narrowing`). Only ingress is restricted: jobs still reach object
//! storage, the gateway's capsule URLs and whatever egress the cluster allows.
//!
//! The policy is named like the job's first RayJob ([`policy_name`]) and serves every
//! attempt of the job (its selector is the job id; a preempted job's next attempt runs
//! under a RayJob of its own): created before the first RayJob (its pods are never
//! unprotected), adopted by later attempts, deleted after the last.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::rayjob_name;
use crate::cluster::labels::{JOB_NAME, LABEL_JOB_ID, job_labels};
use crate::config::Config;

/// The gateway's pods, as the Deployment labels them (`deploy/kubernetes/base`).
pub const GATEWAY_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "forge-gateway");
/// The label the API server puts on every namespace: its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        ..LabelSelector::default()
    }
}

fn pods(key: &str, value: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(selector(key, value)),
        ..NetworkPolicyPeer::default()
    }
}

/// The name of job `job_id`'s NetworkPolicy: its first RayJob's.
pub fn policy_name(job_id: &str) -> String {
    rayjob_name(job_id)
}

/// The NetworkPolicy of job `job_id` of `team`, labelled with installation `instance`
/// like the job's RayJob.
pub fn network_policy(job_id: &str, team: &str, instance: &str, cfg: &Config) -> NetworkPolicy {
    let name = policy_name(job_id);
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cfg.k8s.namespace.clone()),
            labels: Some(job_labels(job_id, team, instance)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(LABEL_JOB_ID, job_id)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![
                    pods(LABEL_JOB_ID, job_id),
                    pods(JOB_NAME, &name),
                    pods(GATEWAY_POD_LABEL.0, GATEWAY_POD_LABEL.1),
                    NetworkPolicyPeer {
                        namespace_selector: Some(selector(
                            NAMESPACE_NAME_LABEL,
                            &cfg.k8s.operator_namespace,
                        )),
                        ..NetworkPolicyPeer::default()
                    },
                ]),
                ..NetworkPolicyIngressRule::default()
            }]),
            ..NetworkPolicySpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    #[test]
    fn admits_its_own_pods_submitter_gateway_and_operator_only() {
        let cfg = Config::from_env_map(HashMap::from([
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
            (
                "FORGE_K8S_OPERATOR_NAMESPACE".to_string(),
                "ray-system".to_string(),
            ),
        ]))
        .expect("config");
        let np = serde_json::to_value(network_policy(
            "0193ab45cd67ef0123",
            "team-a",
            "forge-test",
            &cfg,
        ))
        .expect("json");
        assert_eq!(np["metadata"]["name"], "forge-0193ab45cd67ef0123");
        assert_eq!(np["metadata"]["namespace"], "starforge");
        assert_eq!(np["metadata"]["labels"]["forge.dev/team"], "team-a");
        assert_eq!(
            np["spec"],
            json!({
                "podSelector": {"matchLabels": {"forge.dev/job-id": "0193ab45cd67ef0123"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"from": [
                    {"podSelector": {"matchLabels": {"forge.dev/job-id": "0193ab45cd67ef0123"}}},
                    {"podSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "forge-0193ab45cd67ef0123"}}},
                    {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-gateway"}}},
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ray-system"}}}
                ]}]
            })
        );
    }
}
