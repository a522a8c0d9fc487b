//! ConfigMaps, Secrets and PersistentVolumeClaims: served like the real server
//! (Secret `stringData` folded into base64 `data`, decode errors, immutability,
//! claim defaults and provisioning); in process mode a container's environment from
//! `configMapKeyRef` / `secretKeyRef` / `envFrom` / `fieldRef` (a missing object: the
//! kubelet's `CreateContainerConfigError` until it appears), ConfigMap/Secret volumes
//! mounted as files at their `mountPath`, claims shared between pods, a
//! `ReadWriteOnce` claim used on two nodes giving the real Multi-Attach error, a
//! `ReadWriteOncePod` claim keeping a second pod unschedulable, subPath mounts, and a
//! RayJob whose head takes a Secret env value and runs code from a ConfigMap volume.

use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, PersistentVolumeClaim, Pod, Secret,
};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{NS, api_err, raw, rayjobs, start_bare, start_process, wait_for};

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

#[tokio::test]
async fn config_maps_secrets_and_claims_through_the_api() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let s = secrets
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "creds"},
                        "data": {"user": "YWRtaW4="},
                        "stringData": {"password": "s3cr3t", "user": "root"}})),
        )
        .await
        .expect("create secret");
    let raw_secret = raw(
        &client,
        "GET",
        &format!("/api/v1/namespaces/{NS}/secrets/creds"),
        None,
        None,
    )
    .await
    .2;
    assert_eq!(
        raw_secret["data"],
        json!({"user": "cm9vdA==", "password": "czNjcjN0"}),
        "stringData folded into data, winning over data"
    );
    assert!(raw_secret.get("stringData").is_none());
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert!(s.metadata.generation.is_none());
    // A merge patch with stringData updates data the same way.
    let patched = secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "n3w"}})),
        )
        .await
        .expect("patch");
    assert_eq!(patched.data.expect("data")["password"].0, b"n3w".to_vec());
    let (code, _, body) = raw(
        &client,
        "POST",
        &format!("/api/v1/namespaces/{NS}/secrets"),
        Some("application/json"),
        Some(json!({"metadata": {"name": "bad"}, "data": {"k": "not base64!"}})),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
    );
    let opaque = secrets
        .list(&ListParams::default().fields("type=Opaque"))
        .await
        .expect("field selector on type");
    assert_eq!(opaque.items.len(), 1);

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    cms.create(
        &PostParams::default(),
        &obj(json!({"metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "1"}})),
    )
    .await
    .expect("create cm");
    let e = api_err(
        cms.patch(
            "frozen",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .expect_err("immutable"),
    );
    assert_eq!(
        e.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let c = claims
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})),
        )
        .await
        .expect("create claim");
    let spec = c.spec.expect("spec");
    assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    assert_eq!(
        c.status.and_then(|s| s.phase).as_deref(),
        Some("Pending"),
        "no provisioner without controllers"
    );
    let e = api_err(
        claims
            .create(
                &PostParams::default(),
                &obj(json!({"metadata": {"name": "nomode"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}})),
            )
            .await
            .expect_err("invalid"),
    );
    assert_eq!(
        e.message,
        "PersistentVolumeClaim \"nomode\" is invalid: spec.accessModes: Required value: at least 1 access mode is required"
    );
    let (_, _, doc) = raw(&client, "GET", "/api/v1", None, None).await;
    let short = |name: &str| {
        doc["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| r["shortNames"].clone())
    };
    assert_eq!(short("configmaps"), Some(json!(["cm"])));
    assert_eq!(short("persistentvolumeclaims"), Some(json!(["pvc"])));
    assert_eq!(short("secrets"), Some(Value::Null));
    sim.shutdown().await;
}

/// The log of container `c` of pod `name`, once it has one.
async fn log_of(pods: &Api<Pod>, name: &str, c: &str) -> String {
    let lp = LogParams {
        container: Some(c.into()),
        ..LogParams::default()
    };
    pods.logs(name, &lp).await.unwrap_or_default()
}

/// The state of container `c` (init or main) of pod `name`.
async fn container_state(pods: &Api<Pod>, name: &str, c: &str) -> Value {
    let Ok(p) = pods.get(name).await else {
        return Value::Null;
    };
    let st = serde_json::to_value(p.status.unwrap_or_default()).expect("status");
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|k| st[*k].as_array().cloned())
        .flatten()
        .find(|s| s["name"] == c)
        .map(|s| s["state"].clone())
        .unwrap_or(Value::Null)
}

/// The core/v1 events about `pod` with `reason`: (source component, message).
async fn core_events(client: &kube::Client, pod: &str, reason: &str) -> Vec<(String, String)> {
    Api::<CoreEvent>::namespaced(client.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod},reason={reason}")))
        .await
        .expect("events")
        .items
        .into_iter()
        .map(|e| {
            (
                e.source.and_then(|s| s.component).unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_and_volumes_from_config_maps_and_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = start_process("h100=1x8", dir.path()).await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "settings"},
                        "data": {"greeting": "hello", "mode": "fast", "file.txt": "from a configmap\n"}})),
        )
        .await
        .expect("configmap");
    // Reads env and mounted files; the Secret does not exist yet.
    let reader = |name: &str, with_env: bool, with_volume: bool| {
        let mut env = vec![
            json!({"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
            json!({"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}}),
            json!({"name": "LINE", "value": "$(GREETING) from $(POD)"}),
        ];
        if with_env {
            env.push(json!({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}));
        }
        let mut volumes = vec![
            json!({"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "file.txt", "path": "sub/f.txt"}]}}),
        ];
        let mut mounts = vec![json!({"name": "cfg", "mountPath": "/etc/cfg"})];
        if with_volume {
            volumes.push(
                json!({"name": "sec", "secret": {"secretName": "creds", "defaultMode": 0o400}}),
            );
            mounts.push(json!({"name": "sec", "mountPath": "/etc/sec"}));
        }
        obj::<Pod>(json!({"metadata": {"name": name}, "spec": {
            "restartPolicy": "Never",
            "initContainers": [{"name": "read", "image": "busybox:1.36",
                "command": ["sh", "-c", "echo \"$LINE token=${TOKEN:-none} cfg_mode=$CFG_mode\"; cat /etc/cfg/sub/f.txt; cat /etc/sec/token 2>/dev/null; echo; ls /etc/cfg"],
                "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
                "env": env, "volumeMounts": mounts}],
            "containers": [{"name": "main", "image": "busybox:1.36"}],
            "volumes": volumes}}))
    };
    pods.create(&PostParams::default(), &reader("by-env", true, false))
        .await
        .expect("pod");
    pods.create(&PostParams::default(), &reader("by-volume", false, true))
        .await
        .expect("pod");
    // Missing Secret: the env reader waits in CreateContainerConfigError, the volume
    // reader in FailedMount.
    let state = wait_for(20, "CreateContainerConfigError", || async {
        let s = container_state(&pods, "by-env", "read").await;
        (s["waiting"]["reason"] == "CreateContainerConfigError").then_some(s)
    })
    .await;
    assert_eq!(state["waiting"]["message"], "secret \"creds\" not found");
    let failed = wait_for(10, "the kubelet's Failed event", || async {
        let e = core_events(&client, "by-env", "Failed").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        failed[0],
        (
            "kubelet".to_owned(),
            "Error: secret \"creds\" not found".to_owned()
        )
    );
    let mount = wait_for(10, "FailedMount", || async {
        let e = core_events(&client, "by-volume", "FailedMount").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        mount[0],
        (
            "kubelet".to_owned(),
            "MountVolume.SetUp failed for volume \"sec\" : secret \"creds\" not found".to_owned()
        )
    );
    assert_eq!(
        container_state(&pods, "by-volume", "read").await["waiting"]["reason"],
        "PodInitializing",
        "nothing starts before the volumes are mounted"
    );

    // The Secret appears: both proceed.
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "creds"}, "stringData": {"token": "t0k3n"}})),
        )
        .await
        .expect("secret");
    // A key the Secret does not have: CreateContainerConfigError until it is added.
    let mut by_key = reader("by-key", false, false);
    if let Some(env) = by_key
        .spec
        .as_mut()
        .and_then(|s| s.init_containers.as_mut())
        .and_then(|c| c[0].env.as_mut())
    {
        env.push(obj(
            json!({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}),
        ));
    }
    pods.create(&PostParams::default(), &by_key)
        .await
        .expect("pod");
    let state = wait_for(20, "CreateContainerConfigError", || async {
        let s = container_state(&pods, "by-key", "read").await;
        (s["waiting"]["reason"] == "CreateContainerConfigError").then_some(s)
    })
    .await;
    assert_eq!(
        state["waiting"]["message"],
        format!("couldn't find key password in Secret {NS}/creds")
    );
    assert_eq!(
        pods.get("by-key")
            .await
            .expect("pod")
            .status
            .and_then(|s| s.phase)
            .as_deref(),
        Some("Pending")
    );
    Api::<Secret>::namespaced(client.clone(), NS)
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "pw"}})),
        )
        .await
        .expect("add the key");
    for pod in ["by-env", "by-volume", "by-key"] {
        wait_for(30, "the init container to finish", || async {
            (container_state(&pods, pod, "read").await["terminated"]["exitCode"] == 0).then_some(())
        })
        .await;
    }
    let env_log = log_of(&pods, "by-env", "read").await;
    assert_eq!(
        env_log.lines().collect::<Vec<_>>(),
        vec![
            "hello from by-env token=t0k3n cfg_mode=fast",
            "from a configmap",
            "",
            "sub"
        ],
        "{env_log}"
    );
    let key_log = log_of(&pods, "by-key", "read").await;
    assert!(
        key_log.starts_with("hello from by-key token=pw "),
        "{key_log}"
    );
    let vol_log = log_of(&pods, "by-volume", "read").await;
    assert_eq!(
        vol_log.lines().collect::<Vec<_>>(),
        vec![
            "hello from by-volume token=none cfg_mode=fast",
            "from a configmap",
            "t0k3n",
            "sub"
        ],
        "{vol_log}"
    );
    sim.shutdown().await;
}

/// The note of the scheduler's first `FailedScheduling` event about `pod`.
async fn failed_scheduling(client: &kube::Client, pod: &str) -> String {
    wait_for(20, "FailedScheduling", || async {
        let evs = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
            .list(&ListParams::default())
            .await
            .ok()?;
        evs.items.into_iter().find_map(|e| {
            (e.reason.as_deref() == Some("FailedScheduling")
                && e.regarding.as_ref()?.name.as_deref() == Some(pod))
            .then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_are_provisioned_shared_and_read_write_once_is_exclusive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = start_process("h100=2x8", dir.path()).await;
    let client = sim.client().expect("client");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claim = |name: &str, mode: &str, class: Option<&str>| {
        let mut spec =
            json!({"accessModes": [mode], "resources": {"requests": {"storage": "1Gi"}}});
        if let Some(c) = class {
            spec["storageClassName"] = json!(c);
        }
        obj::<PersistentVolumeClaim>(json!({"metadata": {"name": name}, "spec": spec}))
    };
    for (name, mode) in [("ckpt", "ReadWriteOnce"), ("shared", "ReadWriteMany")] {
        claims
            .create(&PostParams::default(), &claim(name, mode, None))
            .await
            .expect("claim");
    }
    claims
        .create(
            &PostParams::default(),
            &claim("fast", "ReadWriteOnce", Some("fast-ssd")),
        )
        .await
        .expect("claim");
    let bound = wait_for(10, "ckpt bound", || async {
        let c = claims.get("ckpt").await.ok()?;
        (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
    })
    .await;
    let volume = bound
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .expect("volumeName");
    assert_eq!(
        volume,
        format!("pvc-{}", bound.metadata.uid.clone().expect("uid"))
    );
    let status = bound.status.clone().expect("status");
    assert_eq!(status.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
    assert_eq!(status.capacity.expect("capacity")["storage"].0, "1Gi");
    // The provisioner binds the claim, then records its event: await it, not race it.
    wait_for(10, "ProvisioningSucceeded", || async {
        let e = core_events(&client, "ckpt", "ProvisioningSucceeded").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let failed = wait_for(10, "ProvisioningFailed", || async {
        let e = core_events(&client, "fast", "ProvisioningFailed").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        failed[0].1,
        "storageclass.storage.k8s.io \"fast-ssd\" not found"
    );

    // A writer on h100-0 and a reader on h100-1 of the same RWO claim.
    let user = |name: &str, node: Option<&str>, claim: &str, script: &str| {
        let mut spec = json!({
            "restartPolicy": "Never",
            "initContainers": [{"name": "io", "image": "busybox:1.36", "command": ["sh", "-c", script],
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "containers": [{"name": "main", "image": "busybox:1.36"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]});
        if let Some(n) = node {
            spec["nodeName"] = json!(n);
        }
        obj::<Pod>(json!({"metadata": {"name": name}, "spec": spec}))
    };
    let running = |name: &'static str| {
        let pods = pods.clone();
        async move {
            wait_for(30, name, || async {
                let p = pods.get(name).await.ok()?;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            })
            .await;
        }
    };
    pods.create(
        &PostParams::default(),
        &user(
            "writer",
            Some("h100-0"),
            "ckpt",
            "echo step-42 > /data/latest",
        ),
    )
    .await
    .expect("writer");
    running("writer").await;
    pods.create(
        &PostParams::default(),
        &user("reader", Some("h100-1"), "ckpt", "cat /data/latest"),
    )
    .await
    .expect("reader");
    let attach = wait_for(20, "FailedAttachVolume", || async {
        let e = core_events(&client, "reader", "FailedAttachVolume").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    assert_eq!(
        attach[0],
        (
            "attachdetach-controller".to_owned(),
            format!(
                "Multi-Attach error for volume \"{volume}\" Volume is already used by pod(s) writer"
            )
        )
    );
    let p = pods.get("reader").await.expect("reader");
    assert_eq!(p.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    // The writer goes: the volume detaches and the reader sees what it wrote.
    pods.delete("writer", &DeleteParams::default())
        .await
        .expect("delete");
    running("reader").await;
    assert_eq!(log_of(&pods, "reader", "io").await, "step-42\n");

    // ReadWriteMany: both nodes at once.
    pods.create(
        &PostParams::default(),
        &user("rwx-a", Some("h100-0"), "shared", "true"),
    )
    .await
    .expect("pod");
    pods.create(
        &PostParams::default(),
        &user("rwx-b", Some("h100-1"), "shared", "true"),
    )
    .await
    .expect("pod");
    running("rwx-a").await;
    running("rwx-b").await;

    // subPath: a pod sees only its subdirectory of the claim (created for it); a pod
    // mounting the whole claim sees that directory and what was written there.
    let mut confined = user(
        "confined",
        Some("h100-0"),
        "shared",
        "echo a > /data/f && ls -A /data",
    );
    if let Some(m) = confined
        .spec
        .as_mut()
        .and_then(|s| s.init_containers.as_mut())
        .and_then(|c| c[0].volume_mounts.as_mut())
    {
        m[0].sub_path = Some("team-a".into());
    }
    pods.create(&PostParams::default(), &confined)
        .await
        .expect("pod");
    running("confined").await;
    assert_eq!(log_of(&pods, "confined", "io").await, "f\n");
    pods.create(
        &PostParams::default(),
        &user(
            "whole",
            Some("h100-1"),
            "shared",
            "ls -A /data; cat /data/team-a/f",
        ),
    )
    .await
    .expect("pod");
    running("whole").await;
    assert_eq!(log_of(&pods, "whole", "io").await, "team-a\na\n");

    // ReadWriteOncePod: a second pod using the claim is unschedulable until the first
    // one goes (the scheduler's VolumeRestrictions), whatever its node.
    claims
        .create(
            &PostParams::default(),
            &claim("solo", "ReadWriteOncePod", None),
        )
        .await
        .expect("claim");
    pods.create(
        &PostParams::default(),
        &user("solo-1", None, "solo", "true"),
    )
    .await
    .expect("pod");
    running("solo-1").await;
    pods.create(
        &PostParams::default(),
        &user("solo-2", None, "solo", "true"),
    )
    .await
    .expect("pod");
    let note = failed_scheduling(&client, "solo-2").await;
    assert_eq!(
        note,
        "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    pods.delete("solo-1", &DeleteParams::default())
        .await
        .expect("delete");
    running("solo-2").await;

    // A claim that does not exist keeps the pod off every node.
    pods.create(
        &PostParams::default(),
        &user("orphan", None, "nope", "true"),
    )
    .await
    .expect("pod");
    let note = failed_scheduling(&client, "orphan").await;
    assert_eq!(
        note,
        "0/2 nodes are available: persistentvolumeclaim \"nope\" not found. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    sim.shutdown().await;
}

/// A RayJob whose head takes a value from a Secret and whose entrypoint runs a script
/// from a ConfigMap volume (the driver runs with the head's environment and mounts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rayjob_driver_sees_head_secret_env_and_config_map_volume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = start_process("h100=1x8", dir.path()).await;
    let client = sim.client().expect("client");
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "job-code"},
                        "data": {"run.sh": "echo \"driver has API_KEY=$API_KEY\"\necho \"script at $(dirname $0)\"\n"}})),
        )
        .await
        .expect("configmap");
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &obj(json!({"metadata": {"name": "team-a-keys"}, "stringData": {"api-key": "k-123"}})),
        )
        .await
        .expect("secret");
    let rj = json!({
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "secret-env"},
        "spec": {
            "entrypoint": "sh /home/ray/code/run.sh",
            "shutdownAfterJobFinishes": false,
            "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                "containers": [{"name": "ray-head", "image": "rayproject/ray:2.46.0",
                    "env": [{"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "team-a-keys", "key": "api-key"}}}],
                    "volumeMounts": [{"name": "code", "mountPath": "/home/ray/code"}]}],
                "volumes": [{"name": "code", "configMap": {"name": "job-code"}}]}}}},
        },
    });
    rayjobs(&client)
        .create(&PostParams::default(), &obj(rj))
        .await
        .expect("rayjob");
    let done = wait_for(60, "the RayJob to end", || async {
        let r = rayjobs(&client).get("secret-env").await.ok()?;
        let st = r.data.get("status")?;
        let d = st["jobDeploymentStatus"].as_str()?.to_owned();
        matches!(d.as_str(), "Complete" | "Failed")
            .then(|| format!("{d}/{}", st["jobStatus"].as_str().unwrap_or("")))
    })
    .await;
    assert_eq!(done, "Complete/SUCCEEDED");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let submitter = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=secret-env"))
        .await
        .expect("pods")
        .items
        .remove(0);
    let log = pods
        .logs(
            &submitter.metadata.name.expect("name"),
            &LogParams::default(),
        )
        .await
        .expect("log");
    assert!(log.contains("driver has API_KEY=k-123"), "{log}");
    let host = dir.path().to_string_lossy().into_owned();
    assert!(
        log.lines()
            .any(|l| l.starts_with("script at ") && l.contains(&host)),
        "the entrypoint's mount path was rewritten to the volume's host directory: {log}"
    );
    sim.shutdown().await;
}
