//! A process-mode job gets a pod's environment, not the host's: the head container's
//! `env` with `secretKeyRef` values read from the namespace's Secrets (a `stringData`
//! Secret is stored as `data`), the runtime env's variables, and none of the emulator
//! process's own variables; a missing Secret fails the job naming it.

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, LogParams, PostParams};
use serde_json::{Value, json};

use crate::support::{NS, rayjob, rayjobs, start_process, wait_for};

/// The sample RayJob printing its environment, the head container with `env`.
fn env_rayjob(name: &str, env: Value) -> DynamicObject {
    let mut rj = rayjob(name);
    rj["spec"]["entrypoint"] = json!("env");
    rj["spec"]["runtimeEnvYAML"] = json!("env_vars:\n  counter_name: \"test_counter\"\n");
    rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = env;
    serde_json::from_value(rj).expect("rayjob")
}

async fn finished(client: &kube::Client, name: &str) -> DynamicObject {
    wait_for(60, &format!("{name} finished"), || async {
        let rj = rayjobs(client).get_opt(name).await.expect("get")?;
        let s = rj.data.pointer("/status/jobDeploymentStatus")?.as_str()?;
        matches!(s, "Complete" | "Failed").then_some(rj)
    })
    .await
}

async fn driver_log(client: &kube::Client, rayjob: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let lp = ListParams::default().labels(&format!("batch.kubernetes.io/job-name={rayjob}"));
    let pod = pods.list(&lp).await.expect("pods").items.remove(0);
    let lp = LogParams {
        container: Some("ray-job-submitter".into()),
        ..LogParams::default()
    };
    pods.logs(pod.metadata.name.as_deref().expect("name"), &lp)
        .await
        .expect("logs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_sees_its_pod_env_and_secrets_never_the_hosts() {
    let dir = tempfile::tempdir().expect("scratch");
    let sim = start_process("h100=2x8", dir.path()).await;
    let client = sim.client().expect("client");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "team-a.api"},
        "stringData": {"key": "v4lue-from-the-secret"},
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let stored = secrets.get("team-a.api").await.expect("get secret");
    assert!(stored.string_data.is_none(), "stringData is write-only");
    assert_eq!(
        stored.data.expect("data")["key"].0,
        b"v4lue-from-the-secret".to_vec()
    );
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));

    let env = json!([
        {"name": "HEAD_ENV", "value": "from-head"},
        {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "team-a.api", "key": "key"}}},
        {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k", "optional": true}}},
    ]);
    rayjobs(&client)
        .create(&PostParams::default(), &env_rayjob("env-ok", env))
        .await
        .expect("create");
    let rj = finished(&client, "env-ok").await;
    let log = driver_log(&client, "env-ok").await;
    assert_eq!(
        rj.data.pointer("/status/jobStatus"),
        Some(&json!("SUCCEEDED")),
        "{log}"
    );
    for want in [
        "API_KEY=v4lue-from-the-secret",
        "HEAD_ENV=from-head",
        "counter_name=test_counter",
        "PATH=",
        "HOME=",
        "HOSTNAME=",
    ] {
        assert!(log.lines().any(|l| l.starts_with(want)), "{want} in {log}");
    }
    // cargo and the harness set these in the emulator's own process.
    for host_only in ["CARGO_PKG_NAME=", "CARGO_MANIFEST_DIR=", "RUST_BACKTRACE="] {
        assert!(
            !log.lines().any(|l| l.starts_with(host_only)),
            "the host's {host_only} leaked: {log}"
        );
    }
    assert!(
        !log.contains("MAYBE="),
        "an optional missing Secret is skipped"
    );

    // A missing (non-optional) Secret keeps the container in CreateContainerConfigError
    // like a real kubelet (`volumes.rs` holds that); the job then waits, it is not run
    // without the value.
    sim.shutdown().await;
}
