//! The Kubernetes objects of one playground: its server pod, the Secret holding its
//! API key and its NetworkPolicy.
//!
//! - **Pod** `forge-pg-<id>`: one container of `FORGE_IMAGE_VLLM` running `vllm serve
//!   <model> --tensor-parallel-size <gpus> --served-model-name <model> --port 8000`
//!   plus the request's extra arguments; the key comes from the Secret as
//!   `VLLM_API_KEY` (never on the command line). GPUs, series node selector,
//!   tolerations and affinity as for training pods (the policy's placement, the
//!   configured GPU tolerations), CPU and memory a GPU's share (1/8) of the series'
//!   machine per GPU; the restricted security settings of Ray pods
//!   ([`crate::manifests::security`]); a model on the team's storage mounted read-only
//!   ([`super::model_source`]); a startup probe on `/health` allowing
//!   `FORGE_PLAYGROUND_STARTUP_S` for the model to load, then a readiness probe; and
//!   `activeDeadlineSeconds` = the longest lifetime plus [`BACKSTOP_GRACE_SECS`], the
//!   Kubernetes-level backstop should the gateway not reclaim it (the field can only
//!   be lowered on a running pod, so it covers every extension).
//! - **Secret** `forge-pg-<id>-key` (`api-key`) and **NetworkPolicy** `forge-pg-<id>`
//!   (ingress to the server port from the gateway's pods only), both owned by the pod
//!   (`ownerReferences`), so deleting the pod deletes them.

use std::collections::BTreeMap;

use forge_policy_host::model::PoolPlacement;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Pod, PodSpec, Probe,
    ResourceRequirements, Secret, SecretKeySelector,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::model_source::ModelSource;
use super::request::MAX_LIFETIME_SECS;
use crate::cluster::labels::{
    ANNOTATION_GPUS, GPU_RESOURCE, LABEL_PLAYGROUND_ID, playground_labels,
};
use crate::config::Config;
use crate::manifests::network::GATEWAY_POD_LABEL;
use crate::manifests::{BuildError, scheduling, security};
use crate::store::PlaygroundRecord;

/// The server's container port.
pub const SERVER_PORT: u16 = 8000;
/// How often the server's probes run; the startup probe allows
/// `FORGE_PLAYGROUND_STARTUP_S` of them in all for the model to load.
pub const PROBE_PERIOD_SECS: u64 = 10;
/// The backstop's slack past the longest lifetime.
pub const BACKSTOP_GRACE_SECS: i64 = 600;
/// The Secret key holding the API key.
pub const KEY_ENTRY: &str = "api-key";
/// The request header carrying the key to the server: the API server's pod proxy
/// drops `Authorization` (it authenticated the gateway with it), so the key travels
/// in a header of its own.
pub const KEY_HEADER: &str = "x-forge-playground-key";
/// The server container's name.
pub const CONTAINER: &str = "vllm";
/// GPUs of the machine a series' CPU and memory settings describe.
const GPUS_PER_MACHINE: u64 = 8;

/// The pod's name.
pub fn pod_name(id: &str) -> String {
    format!("forge-pg-{id}")
}

/// The key Secret's name.
pub fn secret_name(id: &str) -> String {
    format!("forge-pg-{id}-key")
}

fn meta(name: String, pg: &PlaygroundRecord, instance: &str, cfg: &Config) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(cfg.k8s.namespace.clone()),
        labels: Some(playground_labels(&pg.id, &pg.team, instance)),
        ..ObjectMeta::default()
    }
}

/// Where and how a playground's server runs.
pub struct Target<'a> {
    /// The GPU series.
    pub series: &'a str,
    /// The policy's placement.
    pub placement: &'a PoolPlacement,
    /// The inference image.
    pub image: &'a str,
    /// Where the model is (a storage path is mounted read-only).
    pub source: &'a ModelSource,
}

/// The server pod of `pg` at `target`.
pub fn pod(
    pg: &PlaygroundRecord,
    target: &Target<'_>,
    instance: &str,
    cfg: &Config,
) -> Result<Pod, BuildError> {
    let Target {
        series,
        placement,
        image,
        source,
    } = *target;
    let mut metadata = meta(pod_name(&pg.id), pg, instance, cfg);
    let mut labels = placement.labels.clone();
    labels.extend(metadata.labels.take().unwrap_or_default());
    metadata.labels = Some(labels);
    let mut annotations = placement.annotations.clone();
    annotations.insert(ANNOTATION_GPUS.into(), pg.gpus.to_string());
    metadata.annotations = Some(annotations);

    let mut node_selector = placement.node_selector.clone();
    node_selector.insert(cfg.k8s.gpu_node_label.clone(), series.to_string());
    let tolerations =
        scheduling::tolerations("server", &cfg.pods.tolerations, &placement.tolerations)?;
    let affinity = scheduling::affinity("server", &placement.affinity)?;

    let gpus = u64::from(pg.gpus);
    let mut amounts = BTreeMap::from([
        (
            "cpu".to_string(),
            Quantity(format!(
                "{}m",
                cfg.pods.cpu_millis(series) * gpus / GPUS_PER_MACHINE
            )),
        ),
        (
            "memory".to_string(),
            Quantity((cfg.pods.memory_bytes(series) * gpus / GPUS_PER_MACHINE).to_string()),
        ),
    ]);
    if cfg.k8s.gpu_passthrough {
        amounts.insert(GPU_RESOURCE.to_string(), Quantity(pg.gpus.to_string()));
    }
    let (volumes, mounts) = source.volumes(&pg.team, &cfg.storage);
    let mut args = vec![
        pg.model.clone(),
        "--tensor-parallel-size".into(),
        pg.gpus.to_string(),
        "--served-model-name".into(),
        pg.model.clone(),
        "--port".into(),
        SERVER_PORT.to_string(),
    ];
    args.extend(pg.args.iter().cloned());
    let probe = |failure_threshold: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/health".into()),
            port: IntOrString::Int(i32::from(SERVER_PORT)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(i32::try_from(PROBE_PERIOD_SECS).unwrap_or(10)),
        failure_threshold: Some(failure_threshold),
        ..Probe::default()
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image.into()),
        command: Some(vec!["vllm".into(), "serve".into()]),
        args: Some(args),
        ports: Some(vec![ContainerPort {
            container_port: i32::from(SERVER_PORT),
            name: Some("http".into()),
            ..ContainerPort::default()
        }]),
        env: Some(vec![EnvVar {
            name: "VLLM_API_KEY".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret_name(&pg.id),
                    key: KEY_ENTRY.into(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        resources: Some(ResourceRequirements {
            limits: Some(amounts.clone()),
            requests: Some(amounts),
            ..ResourceRequirements::default()
        }),
        startup_probe: Some(probe(
            i32::try_from(cfg.gateway.playground_startup_s / PROBE_PERIOD_SECS).unwrap_or(i32::MAX),
        )),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        readiness_probe: Some(probe(3)),
        security_context: Some(security::container(cfg)),
        ..Container::default()
    };
    let lifetime = i64::try_from(MAX_LIFETIME_SECS).unwrap_or(i64::MAX);
    Ok(Pod {
        metadata,
        spec: Some(security::pod(
            cfg,
            PodSpec {
                containers: vec![container],
                node_selector: Some(node_selector),
                tolerations,
                affinity,
                restart_policy: Some("Always".into()),
                volumes: (!volumes.is_empty()).then_some(volumes),
                active_deadline_seconds: Some(lifetime + BACKSTOP_GRACE_SECS),
                ..PodSpec::default()
            },
        )),
        status: None,
    })
}

/// An owner reference to the pod `name` with `uid` (its dependents go with it).
pub fn owned_by_pod(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The Secret with `pg`'s API key, owned by its pod.
pub fn key_secret(
    pg: &PlaygroundRecord,
    key: &str,
    owner: OwnerReference,
    instance: &str,
    cfg: &Config,
) -> Secret {
    let mut metadata = meta(secret_name(&pg.id), pg, instance, cfg);
    metadata.owner_references = Some(vec![owner]);
    Secret {
        metadata,
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            KEY_ENTRY.to_string(),
            ByteString(key.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The NetworkPolicy of `pg`'s pod: ingress to the server port from the gateway's
/// pods only, owned by the pod.
pub fn network_policy(
    pg: &PlaygroundRecord,
    owner: OwnerReference,
    instance: &str,
    cfg: &Config,
) -> NetworkPolicy {
    let mut metadata = meta(pod_name(&pg.id), pg, instance, cfg);
    metadata.owner_references = Some(vec![owner]);
    let select = |k: &str, v: &str| LabelSelector {
        match_labels: Some(BTreeMap::from([(k.to_string(), v.to_string())])),
        ..LabelSelector::default()
    };
    NetworkPolicy {
        metadata,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(select(LABEL_PLAYGROUND_ID, &pg.id)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(select(GATEWAY_POD_LABEL.0, GATEWAY_POD_LABEL.1)),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(SERVER_PORT))),
                    protocol: Some("TCP".into()),
                    ..NetworkPolicyPort::default()
                }]),
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
    use crate::domain::PlaygroundState;

    fn record() -> PlaygroundRecord {
        PlaygroundRecord {
            id: "0193ab45cd67ef0123456789".into(),
            team: "team-a".into(),
            created_by: "alice".into(),
            model: "meta/llama-3-8b".into(),
            series: Some("h100".into()),
            gpus: 2,
            args: vec!["--max-model-len".into(), "4096".into()],
            state: PlaygroundState::Pending,
            reason: None,
            created_at_ms: 0,
            expires_at_ms: 3_600_000,
            idle_seconds: None,
            last_request_at_ms: 0,
            warned_at_ms: None,
            ended_at_ms: None,
        }
    }

    fn target(source: &ModelSource) -> Target<'_> {
        static PLACEMENT: std::sync::LazyLock<PoolPlacement> =
            std::sync::LazyLock::new(PoolPlacement::default);
        Target {
            series: "h100",
            placement: &PLACEMENT,
            image: "vllm/vllm-openai:v0.11.0",
            source,
        }
    }

    fn cfg() -> Config {
        Config::from_env_map(HashMap::from([(
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        )]))
        .expect("config")
    }

    #[test]
    fn the_pod_runs_vllm_restricted_with_its_key_from_the_secret() {
        let cfg = cfg();
        let pod = pod(&record(), &target(&ModelSource::Id), "inst", &cfg).expect("pod");
        let v = serde_json::to_value(&pod).expect("json");
        assert_eq!(v["metadata"]["name"], "forge-pg-0193ab45cd67ef0123456789");
        assert_eq!(
            v["metadata"]["labels"]["forge.dev/playground-id"],
            "0193ab45cd67ef0123456789"
        );
        assert_eq!(v["metadata"]["labels"]["forge.dev/team"], "team-a");
        assert_eq!(v["metadata"]["annotations"]["forge.dev/gpus"], "2");
        let spec = &v["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert_eq!(spec["nodeSelector"][&cfg.k8s.gpu_node_label], "h100");
        assert_eq!(spec["activeDeadlineSeconds"], 86_400 + 600);
        let c = &spec["containers"][0];
        assert_eq!(c["command"], json!(["vllm", "serve"]));
        assert_eq!(
            c["args"],
            json!([
                "meta/llama-3-8b",
                "--tensor-parallel-size",
                "2",
                "--served-model-name",
                "meta/llama-3-8b",
                "--port",
                "8000",
                "--max-model-len",
                "4096"
            ])
        );
        assert_eq!(
            c["env"][0]["valueFrom"]["secretKeyRef"]["name"],
            "forge-pg-0193ab45cd67ef0123456789-key"
        );
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["startupProbe"]["failureThreshold"], 180);
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/health");
        assert!(!v.to_string().contains("api-key\":"), "no key in the pod");
        assert!(spec["volumes"].is_null(), "a model id mounts nothing");
    }

    #[test]
    fn a_checkpoint_on_the_teams_storage_is_mounted_read_only() {
        let cfg = Config::from_env_map(HashMap::from([
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
            (
                "FORGE_K8S_STORAGE_PVC".to_string(),
                "forge-storage".to_string(),
            ),
            (
                "FORGE_K8S_STORAGE_MOUNT".to_string(),
                "/starforge".to_string(),
            ),
            ("FORGE_PLAYGROUND_STARTUP_S".to_string(), "600".to_string()),
        ]))
        .expect("config");
        let mut pg = record();
        pg.model = "/starforge/ckpt/run-7".into();
        let pod = pod(&pg, &target(&ModelSource::TeamStorage), "inst", &cfg).expect("pod");
        let v = serde_json::to_value(&pod).expect("json");
        let spec = &v["spec"];
        assert_eq!(
            spec["volumes"],
            json!([{"name": "forge-storage",
                "persistentVolumeClaim": {"claimName": "forge-storage", "readOnly": true}}])
        );
        let c = &spec["containers"][0];
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "forge-storage", "mountPath": "/starforge",
                "subPath": "teams/team-a", "readOnly": true}])
        );
        assert_eq!(c["args"][0], "/starforge/ckpt/run-7");
        assert_eq!(c["startupProbe"]["failureThreshold"], 60);
    }

    #[test]
    fn secret_and_network_policy_go_with_the_pod() {
        let cfg = cfg();
        let owner = owned_by_pod("forge-pg-x", "uid-1");
        let s = serde_json::to_value(key_secret(&record(), "k3y", owner.clone(), "inst", &cfg))
            .expect("json");
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(s["data"]["api-key"], "azN5");
        let np =
            serde_json::to_value(network_policy(&record(), owner, "inst", &cfg)).expect("json");
        assert_eq!(np["metadata"]["ownerReferences"][0]["kind"], "Pod");
        assert_eq!(
            np["spec"]["ingress"],
            json!([{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "forge-gateway"}}}],
                "ports": [{"port": 8000, "protocol": "TCP"}]}])
        );
    }
}
