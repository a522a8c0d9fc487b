//! Tests of the RayJob builder: exact shape on hand-written jobs, failure paths, and
//! property tests validating every generated manifest against the real KubeRay v1.7.0
//! RayJob CRD (made strict: unknown fields, which the API server would silently prune,
//! are rejected) plus the operator-side rules the CRD cannot express.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Value, json};

use forge_capsule::init_container::{INIT_CONTAINER_NAME, MOUNT_PATH, VOLUME_NAME};

use forge_policy_host::model::{
    NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PoolPlacement, PreferredTerm,
    SelectorOperator, TaintEffect, Toleration, TolerationOperator,
};

use super::*;
use crate::cluster::labels::{LABEL_INSTANCE, LABEL_JOB_ID, LABEL_MANAGED_BY, LABEL_TEAM};
use crate::jobspec::{Deadlines, PoolSpec};

/// The chain's initial placement of a spec: each pool with its requested series.
fn initial(s: &JobSpec) -> Placement {
    Placement {
        pools: s
            .pools
            .iter()
            .map(|p| PoolPlacement {
                pool: p.name.clone(),
                series: p.series.clone(),
                ..PoolPlacement::default()
            })
            .collect(),
    }
}

/// The built RayJob as the API server receives it.
fn json_of(r: RayJob) -> Value {
    serde_json::to_value(r).expect("RayJob serializes")
}

const CRD: &str = include_str!("../../kube-emulator/crds/ray.io_rayjobs.yaml");

/// Adds `additionalProperties: false` to every object schema that lists properties
/// and does not preserve unknown fields.
fn strictify(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let preserve =
                map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if map.contains_key("properties")
                && !map.contains_key("additionalProperties")
                && !preserve
            {
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            for v in map.values_mut() {
                strictify(v);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strictify),
        _ => {}
    }
}

fn crd_validator() -> &'static jsonschema::Validator {
    static V: OnceLock<jsonschema::Validator> = OnceLock::new();
    V.get_or_init(|| {
        let crd: Value = serde_saphyr::from_str(CRD).expect("CRD parses");
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        let v1 = versions.iter().find(|v| v["name"] == "v1").expect("v1");
        let mut schema = v1["schema"]["openAPIV3Schema"].clone();
        strictify(&mut schema);
        jsonschema::validator_for(&schema).expect("CRD schema compiles")
    })
}

fn crd_errors(manifest: &Value) -> Vec<String> {
    crd_validator()
        .iter_errors(manifest)
        .map(|e| format!("{}: {e}", e.instance_path().as_str()))
        .collect()
}

/// KubeRay's operator-side validation (SEMANTICS §1) and Forge's own invariants.
fn operator_violations(m: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let name = m["metadata"]["name"].as_str().unwrap_or_default();
    if name.len() > MAX_RAYJOB_NAME || !names::is_dns1035_label(name) {
        out.push(format!("bad name {name}"));
    }
    let cluster = &m["spec"]["rayClusterSpec"];
    let mut groups = vec![&cluster["headGroupSpec"]];
    groups.extend(cluster["workerGroupSpecs"].as_array().into_iter().flatten());
    for (i, g) in groups.iter().enumerate() {
        let params = g["rayStartParams"].as_object().cloned().unwrap_or_default();
        if g.get("resources").is_some()
            && ["num-cpus", "num-gpus", "memory", "resources"]
                .iter()
                .any(|k| params.contains_key(*k))
        {
            out.push(format!(
                "group {i}: rayStartParams resources with group resources"
            ));
        }
        if params.contains_key("labels") {
            out.push(format!("group {i}: rayStartParams.labels"));
        }
        if i > 0 {
            let (min, max, rep) = (&g["minReplicas"], &g["maxReplicas"], &g["replicas"]);
            if !min.is_u64() || min != max || min != rep {
                out.push(format!("group {i}: min/max/replicas {min} {max} {rep}"));
            }
        }
    }
    let ports = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"].as_array();
    if !ports
        .into_iter()
        .flatten()
        .any(|p| p["name"] == "dashboard" && p["containerPort"] == 8265)
    {
        out.push("no dashboard port".into());
    }
    if m["spec"]["shutdownAfterJobFinishes"] != true
        || m["spec"]["backoffLimit"] != 0
        || m["spec"]["submitterConfig"]["backoffLimit"] != 0
    {
        out.push("shutdown/backoff".into());
    }
    let submitter = &m["spec"]["submitterPodTemplate"]["spec"];
    if submitter["restartPolicy"] != "Never"
        || submitter["containers"][0]["name"] != "ray-job-submitter"
        || submitter["containers"][0].get("command").is_some()
    {
        out.push("submitter template (KubeRay fills the command)".into());
    }
    if serde_saphyr::from_str::<Value>(m["spec"]["runtimeEnvYAML"].as_str().unwrap_or("")).is_err()
    {
        out.push("runtimeEnvYAML does not parse".into());
    }
    out
}

fn cfg_with(extra: &[(&str, &str)]) -> Config {
    let mut env = HashMap::from([
        (
            "FORGE_IMAGE_NEMO_RL".to_string(),
            "registry.internal/nemo-rl:v0.7.0".to_string(),
        ),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ]);
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    Config::from_env_map(env).expect("valid config")
}

fn pool(name: &str, nodes: u32, gpus: u32, series: Option<&str>) -> PoolSpec {
    PoolSpec {
        name: name.into(),
        nodes,
        gpus_per_node: gpus,
        series: series.map(Into::into),
        ..PoolSpec::default()
    }
}

fn spec(pools: Vec<PoolSpec>) -> JobSpec {
    JobSpec {
        name: "grpo".into(),
        framework: "nemo-rl".into(),
        entrypoint: "python train.py --steps 10".into(),
        pools,
        env: BTreeMap::from([("WANDB_MODE".into(), "offline".into())]),
        secret_env: BTreeMap::new(),
        shared_storage: false,
        corpus: false,
        deadlines: Deadlines::default(),
        priority: 0,
        labels: BTreeMap::new(),
        pip: Vec::new(),
    }
}

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn capsule(init: bool) -> CapsuleRef {
    let url = format!("https://objects.example/capsules/{SHA}.zip");
    CapsuleRef {
        digest: Digest::parse(SHA).expect("digest"),
        init: init.then(|| {
            let parsed = url::Url::parse(&url).expect("url");
            forge_capsule::init_container(&parsed, SHA, Some("busybox:1.36")).expect("init")
        }),
        working_dir_url: url,
    }
}

fn build(s: &JobSpec, cfg: &Config, init: bool) -> Value {
    let job = JobRef {
        id: "0193ab45cd67ef0123",
        team: "team-a",
        spec: s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    json_of(build_rayjob(&job, &initial(s), &capsule(init), cfg).expect("builds"))
}

#[test]
fn exact_shape_of_a_two_pool_job() {
    let cfg = cfg_with(&[
        ("FORGE_K8S_STORAGE_PVC", "starforge-storage"),
        ("FORGE_K8S_CORPUS_PVC", "starforge-corpus"),
        ("FORGE_K8S_SHM_SIZE", "32Gi"),
    ]);
    let mut s = spec(vec![
        pool("trainer", 2, 8, Some("h200")),
        pool("rollout", 3, 4, Some("h100")),
    ]);
    s.shared_storage = true;
    s.corpus = true;
    s.deadlines.active_seconds = Some(7200);
    s.labels.insert("project".into(), "rl".into());
    let m = build(&s, &cfg, false);
    assert!(crd_errors(&m).is_empty(), "{:#?}", crd_errors(&m));
    assert!(
        operator_violations(&m).is_empty(),
        "{:?}",
        operator_violations(&m)
    );

    assert_eq!(m["metadata"]["name"], "forge-0193ab45cd67ef0123");
    assert_eq!(m["metadata"]["namespace"], "starforge");
    assert_eq!(m["metadata"]["labels"][LABEL_MANAGED_BY], "forge-gateway");
    assert_eq!(m["metadata"]["labels"][LABEL_JOB_ID], "0193ab45cd67ef0123");
    assert_eq!(m["metadata"]["labels"][LABEL_TEAM], "team-a");
    assert_eq!(m["metadata"]["labels"][LABEL_INSTANCE], "inst-1");
    assert_eq!(m["metadata"]["labels"]["project"], "rl");
    assert_eq!(m["metadata"]["annotations"][ANNOTATION_CAPSULE], SHA);
    let sp = &m["spec"];
    assert_eq!(sp["shutdownAfterJobFinishes"], true);
    assert_eq!(sp["backoffLimit"], 0);
    assert_eq!(sp["submitterConfig"], json!({"backoffLimit": 0}));
    let sub = &sp["submitterPodTemplate"];
    assert_eq!(
        sub["metadata"]["labels"][LABEL_JOB_ID],
        "0193ab45cd67ef0123"
    );
    let sc = &sub["spec"]["containers"][0];
    assert_eq!(sc["image"], "registry.internal/nemo-rl:v0.7.0");
    assert_eq!(
        sc["resources"]["requests"],
        json!({"cpu": "1", "memory": "1Gi"})
    );
    assert_eq!(sc["resources"]["limits"], sc["resources"]["requests"]);
    assert_eq!(sp["ttlSecondsAfterFinished"], 600);
    assert_eq!(sp["preRunningDeadlineSeconds"], 1800);
    assert_eq!(sp["activeDeadlineSeconds"], 7200);
    assert_eq!(sp["submissionMode"], "K8sJobMode");
    assert_eq!(sp["entrypoint"], "python train.py --steps 10");
    assert_eq!(sp["rayClusterSpec"]["rayVersion"], "2.55.1");

    let env: Value =
        serde_saphyr::from_str(sp["runtimeEnvYAML"].as_str().expect("yaml")).expect("parses");
    assert_eq!(
        env["working_dir"],
        format!("https://objects.example/capsules/{SHA}.zip")
    );
    assert_eq!(env["env_vars"]["WANDB_MODE"], "offline");
    assert_eq!(env["env_vars"]["FORGE_JOB_ID"], "0193ab45cd67ef0123");
    assert_eq!(env["env_vars"]["FORGE_STORAGE_ROOT"], "/starforge");
    assert_eq!(
        env["env_vars"]["FORGE_CHECKPOINT_DIR"],
        "/starforge/checkpoints/0193ab45cd67ef0123"
    );
    // No job access without a URL pods reach the gateway at; no resume on a first run.
    for absent in ["FORGE_JOB_URL", "FORGE_JOB_TOKEN", "FORGE_RESUME_STEP"] {
        assert!(env["env_vars"].get(absent).is_none(), "{absent}");
    }

    let head = &sp["rayClusterSpec"]["headGroupSpec"];
    let hc = &head["template"]["spec"]["containers"][0];
    assert_eq!(hc["image"], "registry.internal/nemo-rl:v0.7.0");
    assert_eq!(hc["resources"]["limits"]["nvidia.com/gpu"], "8");
    assert_eq!(head["rayStartParams"]["num-gpus"], "8");
    assert_eq!(
        head["rayStartParams"]["resources"],
        "'{\"forge.pool.trainer\":1.0}'"
    );
    assert_eq!(
        head["template"]["spec"]["nodeSelector"]["starforge/gpu-series"],
        "h200"
    );
    assert_eq!(
        head["template"]["metadata"]["labels"][LABEL_JOB_ID],
        "0193ab45cd67ef0123"
    );
    let mounts = hc["volumeMounts"].as_array().expect("mounts");
    assert!(mounts.contains(&json!({"name": "dshm", "mountPath": "/dev/shm"})));
    assert!(mounts.contains(
        &json!({"name": "forge-storage", "mountPath": "/starforge", "subPath": "teams/team-a"})
    ));
    assert!(mounts.contains(
        &json!({"name": "forge-corpus", "mountPath": "/starforge/corpus", "readOnly": true})
    ));
    let vols = head["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    assert!(
        vols.contains(
            &json!({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}})
        )
    );
    assert!(vols.contains(&json!({"name": "forge-corpus", "persistentVolumeClaim": {"claimName": "starforge-corpus", "readOnly": true}})));

    let workers = sp["rayClusterSpec"]["workerGroupSpecs"]
        .as_array()
        .expect("workers");
    assert_eq!(workers.len(), 2);
    assert_eq!(workers[0]["groupName"], "trainer");
    assert_eq!(workers[0]["replicas"], 1, "primary pool: nodes - 1");
    assert_eq!(workers[1]["groupName"], "rollout");
    assert_eq!(workers[1]["replicas"], 3);
    assert_eq!(workers[1]["minReplicas"], 3);
    assert_eq!(workers[1]["maxReplicas"], 3);
    assert_eq!(
        workers[1]["template"]["spec"]["nodeSelector"]["starforge/gpu-series"],
        "h100"
    );
    assert_eq!(
        workers[1]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "4"
    );
    assert!(
        workers[1]["template"]["spec"]["containers"][0]
            .get("ports")
            .is_none()
    );
}

#[test]
fn single_node_job_has_no_worker_groups() {
    let m = build(
        &spec(vec![pool("main", 1, 8, Some("h200"))]),
        &cfg_with(&[]),
        false,
    );
    assert_eq!(m["spec"]["rayClusterSpec"]["workerGroupSpecs"], json!([]));
    assert!(crd_errors(&m).is_empty());
}

#[test]
fn storage_is_mounted_only_when_asked_and_at_the_mount_override() {
    let cfg = cfg_with(&[
        ("FORGE_K8S_STORAGE_PVC", "claim"),
        ("FORGE_K8S_STORAGE_MOUNT", "/storage"),
    ]);
    let mut s = spec(vec![pool("main", 1, 1, Some("h200"))]);
    let m = build(&s, &cfg, false);
    let text = m.to_string();
    assert!(!text.contains("forge-storage"), "not asked: {text}");
    s.shared_storage = true;
    let m = build(&s, &cfg, false);
    let mounts = &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        ["volumeMounts"];
    assert!(mounts.as_array().expect("mounts").contains(
        &json!({"name": "forge-storage", "mountPath": "/storage", "subPath": "teams/team-a"})
    ));
}

#[test]
fn each_team_mounts_its_own_directory_and_the_common_one_read_only() {
    let cfg = cfg_with(&[
        ("FORGE_K8S_STORAGE_PVC", "claim"),
        ("FORGE_K8S_STORAGE_COMMON_SUBPATH", "datasets/shared"),
    ]);
    let mut s = spec(vec![pool("main", 2, 1, Some("h200"))]);
    s.shared_storage = true;
    let view = |team| JobRef {
        id: "0193ab45cd67ef0123",
        team,
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    for team in ["team-a", "team-b"] {
        let m = json_of(
            build_rayjob(&view(team), &initial(&s), &capsule(false), &cfg).expect("builds"),
        );
        assert!(crd_errors(&m).is_empty());
        for template in [
            &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
            &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
        ] {
            let mounts = template["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .expect("mounts");
            let storage: Vec<&Value> = mounts
                .iter()
                .filter(|m| m["name"] == "forge-storage")
                .collect();
            assert_eq!(
                storage,
                vec![
                    &json!({"name": "forge-storage", "mountPath": "/starforge", "subPath": format!("teams/{team}")}),
                    &json!({"name": "forge-storage", "mountPath": "/starforge/common", "subPath": "datasets/shared", "readOnly": true}),
                ],
                "{team}"
            );
        }
    }
}

#[test]
fn secret_env_is_a_secret_key_ref_and_no_value() {
    let mut s = spec(vec![pool("main", 2, 1, Some("h200"))]);
    s.secret_env.insert(
        "WANDB_API_KEY".into(),
        crate::jobspec::SecretRef {
            secret: "team-a.wandb".into(),
            key: "api-key".into(),
        },
    );
    let m = build(&s, &cfg_with(&[]), true);
    assert!(crd_errors(&m).is_empty(), "{:?}", crd_errors(&m));
    let want = json!([{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": "team-a.wandb", "key": "api-key", "optional": false}}}]);
    for template in [
        &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
    ] {
        assert_eq!(template["spec"]["containers"][0]["env"], want);
        // Not in the capsule fetcher, which runs no team code that needs it.
        let init = template["spec"]["initContainers"][0].to_string();
        assert!(!init.contains("WANDB_API_KEY"), "{init}");
    }
    let runtime_env = m["spec"]["runtimeEnvYAML"].as_str().expect("runtime env");
    assert!(!runtime_env.contains("WANDB_API_KEY"), "{runtime_env}");
}

#[test]
fn ray_pods_run_restricted_without_credentials() {
    let m = build(
        &spec(vec![pool("main", 2, 1, Some("h200"))]),
        &cfg_with(&[]),
        true,
    );
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "privileged": false,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": true,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"}
    });
    for template in [
        &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
    ] {
        let pod = &template["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["enableServiceLinks"], false);
        assert_eq!(
            pod["securityContext"],
            json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        assert_eq!(pod["containers"][0]["securityContext"], restricted);
        assert_eq!(pod["initContainers"][0]["securityContext"], restricted);
    }
    // An image that must keep its own user: no uid, no runAsNonRoot, still restricted.
    let own = build(
        &spec(vec![pool("main", 1, 1, Some("h200"))]),
        &cfg_with(&[("FORGE_K8S_RUN_AS_USER", "image")]),
        false,
    );
    let head = &own["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"];
    assert!(
        head["containers"][0]["securityContext"]
            .get("runAsUser")
            .is_none()
    );
    assert!(head["securityContext"].get("runAsNonRoot").is_none());
    assert_eq!(
        head["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
}

#[test]
fn pip_packages_become_the_runtime_env_pip_list() {
    let mut s = spec(vec![pool("main", 1, 8, Some("h100"))]);
    s.pip = vec![
        "numpy==2.1.0".into(),
        "--extra-index-url https://download.pytorch.org/whl/cu121".into(),
    ];
    let m = build(&s, &cfg_with(&[]), false);
    let env: Value =
        serde_saphyr::from_str(m["spec"]["runtimeEnvYAML"].as_str().expect("yaml")).expect("yaml");
    assert_eq!(
        env["pip"],
        json!([
            "numpy==2.1.0",
            "--extra-index-url https://download.pytorch.org/whl/cu121"
        ])
    );
    assert!(crd_errors(&m).is_empty(), "{:#?}", crd_errors(&m));
    let none = build(
        &spec(vec![pool("main", 1, 8, Some("h100"))]),
        &cfg_with(&[]),
        false,
    );
    let env: Value = serde_saphyr::from_str(none["spec"]["runtimeEnvYAML"].as_str().expect("yaml"))
        .expect("yaml");
    assert!(env.get("pip").is_none(), "no empty pip list: {env}");
}

#[test]
fn no_gpu_passthrough_means_ray_logical_gpus_only() {
    let cfg = cfg_with(&[("FORGE_K8S_GPU_PASSTHROUGH", "0")]);
    let m = build(&spec(vec![pool("main", 2, 8, Some("h200"))]), &cfg, false);
    assert!(!m.to_string().contains("nvidia.com/gpu"));
    assert_eq!(
        m["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-gpus"],
        "8"
    );
    assert_eq!(
        m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"],
        "8"
    );
    assert!(crd_errors(&m).is_empty());
}

#[test]
fn init_container_mode_uses_file_working_dir_and_capsule_volume() {
    let m = build(
        &spec(vec![pool("main", 2, 1, Some("h200"))]),
        &cfg_with(&[]),
        true,
    );
    assert!(crd_errors(&m).is_empty(), "{:#?}", crd_errors(&m));
    let env: Value = serde_saphyr::from_str(m["spec"]["runtimeEnvYAML"].as_str().expect("yaml"))
        .expect("parses");
    assert_eq!(
        env["working_dir"],
        format!("file:///forge/capsule/{SHA}.zip")
    );
    for tpl in [
        &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
    ] {
        let init = &tpl["spec"]["initContainers"][0];
        assert_eq!(init["name"], INIT_CONTAINER_NAME);
        assert_eq!(init["volumeMounts"][0]["mountPath"], MOUNT_PATH);
        let script = init["command"][2].as_str().expect("script");
        assert!(script.contains("capsule sha256 mismatch: expected"));
        assert!(script.contains("sha256sum") && script.contains("mv "));
        let mounts = tpl["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts");
        assert!(mounts.contains(&json!({"name": VOLUME_NAME, "mountPath": MOUNT_PATH})));
        let vols = tpl["spec"]["volumes"].as_array().expect("volumes");
        assert!(vols.contains(&json!({"name": VOLUME_NAME, "emptyDir": {}})));
    }
}

#[test]
fn placement_overrides_series_and_adds_selector_resources_labels() {
    let s = spec(vec![pool("main", 1, 8, None)]);
    let placement = Placement {
        pools: vec![PoolPlacement {
            pool: "main".into(),
            series: Some("b200".into()),
            node_selector: [("topology.kubernetes.io/zone".into(), "z1".into())].into(),
            ray_resources: [("series.b200".into(), 8.0)].into(),
            labels: [("queue".into(), "gold".into())].into(),
            annotations: [
                ("note".into(), "any text at all".into()),
                (
                    forge_policy_host::model::BORROWED_GPUS_ANNOTATION.into(),
                    "8".into(),
                ),
            ]
            .into(),
            ..PoolPlacement::default()
        }],
    };
    let job = JobRef {
        id: "abc",
        team: "t",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    let m =
        json_of(build_rayjob(&job, &placement, &capsule(false), &cfg_with(&[])).expect("builds"));
    let head = &m["spec"]["rayClusterSpec"]["headGroupSpec"];
    assert_eq!(
        head["template"]["spec"]["nodeSelector"]["starforge/gpu-series"],
        "b200"
    );
    assert_eq!(
        head["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"],
        "z1"
    );
    assert_eq!(
        head["rayStartParams"]["resources"],
        "'{\"forge.pool.main\":1.0,\"series.b200\":8.0}'"
    );
    assert_eq!(head["template"]["metadata"]["labels"]["queue"], "gold");
    assert_eq!(
        head["template"]["metadata"]["annotations"]["note"],
        "any text at all"
    );
    assert_eq!(
        head["template"]["metadata"]["annotations"]["forge.dev/borrowed-gpus"], "8",
        "the one Forge key a policy sets: a borrowing admission's mark"
    );
}

#[test]
fn failure_paths() {
    let cfg = cfg_with(&[]);
    let s = spec(vec![pool("main", 1, 8, None)]);
    let job = JobRef {
        id: "abc",
        team: "t",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    let err = build_rayjob(&job, &initial(&s), &capsule(false), &cfg).expect_err("no series");
    assert_eq!(
        err,
        BuildError::NoSeries {
            pool: "main".into()
        }
    );

    let s = spec(vec![pool("main", 1, 8, Some("h200"))]);
    let job = JobRef {
        id: "abc",
        team: "t",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    let wrong = Placement { pools: vec![] };
    assert!(matches!(
        build_rayjob(&job, &wrong, &capsule(false), &cfg),
        Err(BuildError::PlacementMismatch { .. })
    ));

    let mut bad = initial(&s);
    bad.pools[0]
        .ray_resources
        .insert("x'; rm -rf /".into(), 1.0);
    assert!(matches!(
        build_rayjob(&job, &bad, &capsule(false), &cfg),
        Err(BuildError::InvalidPlacement {
            field: "rayResources",
            ..
        })
    ));
    let mut bad = initial(&s);
    bad.pools[0].ray_resources.insert("ok".into(), f64::NAN);
    assert!(build_rayjob(&job, &bad, &capsule(false), &cfg).is_err());
    let mut bad = initial(&s);
    bad.pools[0]
        .labels
        .insert("forge.dev/team".into(), "other".into());
    assert!(matches!(
        build_rayjob(&job, &bad, &capsule(false), &cfg),
        Err(BuildError::InvalidPlacement {
            field: "labels",
            ..
        })
    ));
    let mut bad = initial(&s);
    bad.pools[0]
        .annotations
        .insert("forge.dev/capsule".into(), "forged".into());
    assert!(matches!(
        build_rayjob(&job, &bad, &capsule(false), &cfg),
        Err(BuildError::InvalidPlacement {
            field: "annotations",
            ..
        })
    ));
    let mut bad = initial(&s);
    bad.pools[0]
        .node_selector
        .insert("bad key".into(), "v".into());
    assert!(build_rayjob(&job, &bad, &capsule(false), &cfg).is_err());

    let mut other = s.clone();
    other.framework = "verl".into();
    let job2 = JobRef {
        id: "abc",
        team: "t",
        spec: &other,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    assert_eq!(
        build_rayjob(&job2, &initial(&other), &capsule(false), &cfg),
        Err(BuildError::NoImage("verl".into()))
    );
    let job3 = JobRef {
        id: "abc",
        team: "Team A",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    assert!(matches!(
        build_rayjob(&job3, &initial(&s), &capsule(false), &cfg),
        Err(BuildError::BadIdentity { what: "team", .. })
    ));

    let local = Config {
        kuberay: crate::config::KubeRayConfig {
            ray_version: None,
            ..cfg.kuberay.clone()
        },
        ..cfg.clone()
    };
    assert_eq!(
        build_rayjob(&job, &initial(&s), &capsule(false), &local),
        Err(BuildError::NoRayVersion)
    );
}

#[test]
fn resources_are_requests_equal_to_limits_and_ray_params_agree() {
    let cfg = cfg_with(&[
        ("FORGE_K8S_CPUS_PER_NODE", "h200=96,*=16"),
        ("FORGE_K8S_MEMORY_PER_NODE", "h200=900Gi,*=64Gi"),
    ]);
    let mut explicit = pool("rollout", 2, 4, Some("h100"));
    explicit.cpus_per_node = Some(12);
    explicit.memory_per_node = Some("48Gi".into());
    explicit.object_store_memory = Some("8Gi".into());
    let s = spec(vec![pool("trainer", 1, 8, Some("h200")), explicit]);
    let m = build(&s, &cfg, true);
    assert!(crd_errors(&m).is_empty(), "{:#?}", crd_errors(&m));
    assert!(
        operator_violations(&m).is_empty(),
        "{:?}",
        operator_violations(&m)
    );

    let head = &m["spec"]["rayClusterSpec"]["headGroupSpec"];
    let res = &head["template"]["spec"]["containers"][0]["resources"];
    assert_eq!(
        res["requests"], res["limits"],
        "Guaranteed: requests = limits"
    );
    assert_eq!(
        res["limits"],
        json!({"cpu": "96", "memory": "900Gi", "nvidia.com/gpu": "8"}),
        "the series defaults"
    );
    let params = &head["rayStartParams"];
    assert_eq!(params["num-cpus"], "96");
    // Object store: 30% of the memory, at most /dev/shm (64Gi by default).
    assert_eq!(params["object-store-memory"], (64u64 << 30).to_string());
    assert_eq!(params["memory"], ((900u64 - 64) << 30).to_string());
    assert_eq!(
        head["template"]["metadata"]["annotations"]["forge.dev/gpus"],
        "8"
    );

    let worker = &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0];
    let res = &worker["template"]["spec"]["containers"][0]["resources"];
    assert_eq!(
        res["requests"],
        json!({"cpu": "12", "memory": "48Gi", "nvidia.com/gpu": "4"})
    );
    assert_eq!(
        worker["rayStartParams"]["object-store-memory"],
        (8u64 << 30).to_string()
    );
    assert_eq!(
        worker["rayStartParams"]["memory"],
        (40u64 << 30).to_string()
    );
    // The capsule fetcher is sized too, so a namespace ResourceQuota admits the pod.
    let init = &worker["template"]["spec"]["initContainers"][0]["resources"];
    assert_eq!(init["requests"], json!({"cpu": "100m", "memory": "128Mi"}));
    assert_eq!(init["limits"], init["requests"]);

    // An object store that does not leave room for anything else is refused.
    let mut bad = pool("main", 1, 1, Some("h100"));
    bad.memory_per_node = Some("1Gi".into());
    let cfg = cfg_with(&[("FORGE_K8S_OBJECT_STORE_MEMORY", "2Gi")]);
    let s = spec(vec![bad]);
    let job = JobRef {
        id: "abc",
        team: "t",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    assert!(matches!(
        build_rayjob(&job, &initial(&s), &capsule(false), &cfg),
        Err(BuildError::InvalidResources { .. })
    ));
}

#[test]
fn tolerations_and_node_affinity_come_from_config_and_placement() {
    let cfg = cfg_with(&[(
        "FORGE_K8S_GPU_TOLERATIONS",
        "nvidia.com/gpu=present:NoSchedule",
    )]);
    let s = spec(vec![pool("main", 2, 8, Some("h100"))]);
    let zone = NodeSelectorTerm {
        match_expressions: vec![NodeSelectorRequirement {
            key: "topology.kubernetes.io/zone".into(),
            operator: SelectorOperator::In,
            values: vec!["z1".into(), "z2".into()],
        }],
    };
    let mut placement = initial(&s);
    placement.pools[0].tolerations = vec![
        Toleration {
            key: Some("dedicated".into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: Some(TaintEffect::NoExecute),
        },
        // The same as the configured one: not repeated.
        Toleration {
            key: Some("nvidia.com/gpu".into()),
            operator: TolerationOperator::Equal,
            value: Some("present".into()),
            effect: Some(TaintEffect::NoSchedule),
        },
    ];
    placement.pools[0].affinity = NodeAffinity {
        required: vec![zone.clone()],
        preferred: vec![PreferredTerm {
            weight: 50,
            term: zone,
        }],
    };
    let job = JobRef {
        id: "abc",
        team: "t",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: None,
        resume_step: None,
        attempt: 0,
    };
    let m = json_of(build_rayjob(&job, &placement, &capsule(false), &cfg).expect("builds"));
    assert!(crd_errors(&m).is_empty(), "{:#?}", crd_errors(&m));
    for tpl in [
        &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"],
        &m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"],
        &m["spec"]["submitterPodTemplate"],
    ] {
        assert_eq!(
            tpl["spec"]["tolerations"],
            json!([
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
                {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}
            ])
        );
        if tpl == &m["spec"]["submitterPodTemplate"] {
            assert!(
                tpl["spec"].get("affinity").is_none(),
                "the submitter may run anywhere"
            );
            continue;
        }
        let na = &tpl["spec"]["affinity"]["nodeAffinity"];
        let req = &na["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
        assert_eq!(
            req["matchExpressions"][0],
            json!({"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1", "z2"]})
        );
        assert_eq!(
            na["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"],
            50
        );
    }

    let mut bad = initial(&s);
    bad.pools[0].affinity.required.push(NodeSelectorTerm {
        match_expressions: vec![NodeSelectorRequirement {
            key: "bad key".into(),
            operator: SelectorOperator::Exists,
            values: Vec::new(),
        }],
    });
    assert!(matches!(
        build_rayjob(&job, &bad, &capsule(false), &cfg),
        Err(BuildError::InvalidPlacement {
            field: "affinity",
            ..
        })
    ));
}

#[test]
fn names_are_deterministic_short_and_dns1035() {
    assert_eq!(rayjob_name("abc"), "forge-abc");
    assert_eq!(rayjob_name("abc"), rayjob_name("abc"));
    let long = "A".repeat(80);
    let n = rayjob_name(&long);
    assert!(
        n.len() <= MAX_RAYJOB_NAME && names::is_dns1035_label(&n),
        "{n}"
    );
    assert_ne!(
        rayjob_name("Job_1"),
        rayjob_name("job-1"),
        "hash keeps distinct ids distinct"
    );
    assert!(names::is_dns1035_label(&rayjob_name("___")));
}

#[test]
fn the_crd_check_itself_rejects_bad_manifests() {
    let mut m = build(
        &spec(vec![pool("main", 2, 1, Some("h200"))]),
        &cfg_with(&[]),
        false,
    );
    m["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["minReplicas"] = json!("one");
    m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] =
        json!("x");
    assert!(crd_errors(&m).len() >= 2, "{:?}", crd_errors(&m));
    m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] =
        json!([]);
    m["metadata"]["name"] = json!("x".repeat(48));
    // Bad name, no dashboard port, and the non-numeric minReplicas from above.
    assert_eq!(
        operator_violations(&m).len(),
        3,
        "{:?}",
        operator_violations(&m)
    );
}

// ---------------------------------------------------------------- property tests

fn label_value() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9._-]{0,20}[a-z0-9])?"
}

fn arb_pools() -> impl Strategy<Value = Vec<PoolSpec>> {
    prop::collection::vec(
        (
            1u32..=6,
            0u32..=16,
            prop::option::of(prop::sample::select(vec![
                "h200", "h100", "a100-80g", "l40s",
            ])),
        ),
        1..=7,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (nodes, gpus, series))| pool(&format!("p{i}"), nodes, gpus, series))
            .collect()
    })
}

fn arb_pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::vec(("[a-z]{1,8}(\\.example/[a-z]{1,6})?", label_value()), 0..3)
}

fn arb_pool_placement(p: &PoolSpec) -> impl Strategy<Value = PoolPlacement> + use<> {
    let name = p.name.clone();
    let requested = p.series.clone();
    (
        prop::option::of(label_value()),
        arb_pairs(),
        prop::collection::vec(("[a-z][a-z0-9_.:/-]{0,15}", 0.0f64..1.0e6), 0..3),
        arb_pairs(),
        prop::collection::vec(("[a-z]{1,8}", ".{0,40}"), 0..3),
    )
        .prop_map(
            move |(series, node_selector, ray_resources, labels, annotations)| PoolPlacement {
                pool: name.clone(),
                series: series
                    .or_else(|| requested.clone())
                    .or_else(|| Some("h200".into())),
                node_selector: node_selector.into_iter().collect(),
                ray_resources: ray_resources.into_iter().collect(),
                labels: labels
                    .into_iter()
                    .filter(|(k, _)| !k.starts_with("forge.dev/"))
                    .collect(),
                annotations: annotations.into_iter().collect(),
                ..PoolPlacement::default()
            },
        )
}

#[derive(Debug, Clone)]
struct Case {
    spec: JobSpec,
    placement: Placement,
    cfg: Config,
    job_id: String,
    team: String,
    init: bool,
}

fn arb_case() -> impl Strategy<Value = Case> {
    let cfg = (
        any::<bool>(),
        prop::option::of("[a-z][a-z0-9-]{0,20}[a-z0-9]"),
        prop::option::of("[a-z]([a-z0-9-]{0,20}[a-z0-9])?"),
        prop::option::of("/[a-z]{1,10}"),
        prop::sample::select(vec!["64Gi", "1Gi", "512Mi", "1.5Gi", "1e9"]),
        0u32..100_000,
        1u32..100_000,
    )
        .prop_map(|(passthrough, pvc, corpus, mount, shm, ttl, pre)| {
            let mut extra: Vec<(&str, String)> = vec![
                (
                    "FORGE_K8S_GPU_PASSTHROUGH",
                    if passthrough { "1" } else { "0" }.into(),
                ),
                ("FORGE_K8S_SHM_SIZE", shm.into()),
                ("FORGE_KUBERAY_TTL_SECONDS", ttl.to_string()),
                ("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", pre.to_string()),
            ];
            if let Some(pvc) = pvc {
                extra.push(("FORGE_K8S_STORAGE_PVC", pvc));
                if let Some(m) = mount {
                    extra.push(("FORGE_K8S_STORAGE_MOUNT", m));
                }
            }
            if let Some(c) = corpus {
                extra.push(("FORGE_K8S_CORPUS_PVC", c));
            }
            let pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
            cfg_with(&pairs)
        });
    let spec = (
        arb_pools(),
        prop::collection::btree_map("[A-Z][A-Z0-9_]{0,10}", ".{0,30}", 0..4),
        prop::collection::btree_map("[a-z]{1,10}", label_value(), 0..3),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1i64..=2_147_483_647),
        prop::option::of(1i64..=2_147_483_647),
        // An entrypoint of spaces only is a refused spec, not a case: start with a
        // visible character.
        "[!-~][ -~]{0,79}",
    );
    (
        cfg,
        spec,
        prop::sample::select(vec![
            "0193ab45cd67ef0123456789",
            "x",
            "Job.ID_with-Mixed.Case",
        ]),
        "[a-z][a-z0-9-]{0,30}[a-z0-9]",
        any::<bool>(),
    )
        .prop_flat_map(
            |(cfg, (pools, env, labels, shared, corpus, pre, active, entry), id, team, init)| {
                let env: BTreeMap<String, String> = env
                    .into_iter()
                    .filter(|(k, _)| {
                        !k.starts_with("RAY_")
                            && !k.starts_with("FORGE_")
                            && !k.ends_with("VISIBLE_DEVICES")
                    })
                    .collect();
                let spec = JobSpec {
                    name: "job".into(),
                    framework: "nemo-rl".into(),
                    entrypoint: entry,
                    shared_storage: shared && cfg.storage.pvc.is_some(),
                    corpus: corpus && cfg.storage.corpus_pvc.is_some(),
                    deadlines: Deadlines {
                        pre_running_seconds: pre,
                        active_seconds: active,
                        checkpoint_grace_seconds: None,
                    },
                    priority: 0,
                    env,
                    secret_env: BTreeMap::new(),
                    labels,
                    pip: Vec::new(),
                    pools,
                };
                let placements: Vec<_> = spec.pools.iter().map(arb_pool_placement).collect();
                (
                    Just(spec),
                    placements,
                    Just(cfg),
                    Just(id.to_string()),
                    Just(team),
                    Just(init),
                )
            },
        )
        .prop_map(|(spec, pools, cfg, job_id, team, init)| Case {
            spec,
            placement: Placement { pools },
            cfg,
            job_id,
            team,
            init,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_generated_manifest_is_valid(case in arb_case()) {
        prop_assert!(case.spec.validate(&case.cfg).is_empty(), "generator made an invalid spec: {:?}", case.spec.validate(&case.cfg));
        let job = JobRef { id: &case.job_id, team: &case.team, spec: &case.spec, instance: "inst-1", trace_parent: None, access: None, resume_step: None, attempt: 0 };
        let m = json_of(build_rayjob(&job, &case.placement, &capsule(case.init), &case.cfg)
            .map_err(|e| TestCaseError::fail(e.to_string()))?);
        let errors = crd_errors(&m);
        prop_assert!(errors.is_empty(), "CRD violations: {errors:#?}");
        let violations = operator_violations(&m);
        prop_assert!(violations.is_empty(), "operator rules: {violations:?}");

        // Shape invariants.
        let workers = m["spec"]["rayClusterSpec"]["workerGroupSpecs"].as_array().cloned().unwrap_or_default();
        let pods: u64 = 1 + workers.iter().map(|w| w["replicas"].as_u64().unwrap_or(0)).sum::<u64>();
        let nodes: u64 = case.spec.pools.iter().map(|p| u64::from(p.nodes)).sum();
        prop_assert_eq!(pods, nodes, "one pod per machine");
        let label = case.cfg.k8s.gpu_node_label.clone();
        let head_series = &m["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["nodeSelector"][&label];
        prop_assert_eq!(head_series.as_str(), case.placement.pools[0].series.as_deref());
        let gpu_text = m.to_string().contains("nvidia.com/gpu");
        let any_gpu = case.spec.pools.iter().any(|p| p.gpus_per_node > 0);
        prop_assert_eq!(gpu_text, case.cfg.k8s.gpu_passthrough && any_gpu);
        prop_assert_eq!(&m["metadata"]["name"], &json!(rayjob_name(&case.job_id)));
        let env: Value = serde_saphyr::from_str(m["spec"]["runtimeEnvYAML"].as_str().unwrap_or("")).expect("yaml");
        for (k, v) in &case.spec.env {
            prop_assert_eq!(&env["env_vars"][k], &json!(v));
        }
    }
}

#[test]
fn the_job_gets_its_url_token_and_resume_step() {
    let cfg = cfg_with(&[]);
    let s = spec(vec![pool("trainer", 1, 8, Some("h200"))]);
    let access = crate::jobs::job_access::JobAccess::new(
        b"key",
        url::Url::parse("https://forge.example").expect("url"),
    );
    let job = JobRef {
        id: "0193ab45cd67ef0123",
        team: "team-a",
        spec: &s,
        instance: "inst-1",
        trace_parent: None,
        access: Some(&access),
        resume_step: Some(1200),
        attempt: 2,
    };
    let m = json_of(build_rayjob(&job, &initial(&s), &capsule(false), &cfg).expect("builds"));
    let env: Value = serde_saphyr::from_str(m["spec"]["runtimeEnvYAML"].as_str().expect("yaml"))
        .expect("parses");
    let vars = &env["env_vars"];
    assert_eq!(
        vars["FORGE_JOB_URL"],
        "https://forge.example/v1/jobs/0193ab45cd67ef0123"
    );
    let token = vars["FORGE_JOB_TOKEN"].as_str().expect("token");
    assert_eq!(access.job_of(token), Some("0193ab45cd67ef0123"));
    assert_eq!(vars["FORGE_RESUME_STEP"], "1200");
    // The third attempt runs under a RayJob of its own, and a preemption's SIGTERM
    // gives it the default grace before Ray's supervisor kills it.
    assert_eq!(vars["FORGE_ATTEMPT"], "2");
    assert_eq!(vars["RAY_JOB_STOP_WAIT_TIME_S"], "60");
    assert_eq!(
        m["metadata"]["name"],
        json!(rayjob_name_of("0193ab45cd67ef0123", 2))
    );
    assert_ne!(
        rayjob_name_of("0193ab45cd67ef0123", 2),
        rayjob_name("0193ab45cd67ef0123")
    );
    assert_eq!(
        rayjob_name_of("0193ab45cd67ef0123", 0),
        rayjob_name("0193ab45cd67ef0123")
    );
    // Without shared storage there is no checkpoint directory to give.
    assert!(vars.get("FORGE_CHECKPOINT_DIR").is_none());
}
