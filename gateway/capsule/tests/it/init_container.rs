//! HTTP-only mode: the generated init container's script really downloads and
//! verifies the capsule (run here with `sh` against a local HTTP server), and
//! the runtimeEnvYAML points Ray at the verified `file://` path.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use forge_capsule::init_container::{FALLBACK_ENV, INIT_CONTAINER_NAME, MOUNT_PATH, VOLUME_NAME};
use forge_capsule::runtime_env::RuntimeEnv;
use forge_capsule::{init_container, runtime_env_yaml};
use sha2::{Digest, Sha256};

async fn http_server(body: Vec<u8>) -> (tokio::task::JoinHandle<()>, u16) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let body = Arc::new(body);
    let app = Router::new().route("/c.zip", get(move || async move { body.as_ref().clone() }));
    (
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") }),
        port,
    )
}

/// Run the init container's command with `sh`, with `/forge/capsule`
/// replaced by `dir`. Returns (exit success, combined output).
fn run_script(spec: &serde_json::Value, dir: &std::path::Path) -> (bool, String) {
    let cmd = spec["command"].as_array().expect("command");
    assert_eq!(cmd[0], "sh");
    assert_eq!(cmd[1], "-c");
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd[2].as_str().expect("script"));
    for e in spec["env"].as_array().expect("env") {
        let v = e["value"]
            .as_str()
            .expect("value")
            .replace(MOUNT_PATH, dir.to_str().expect("utf8"));
        c.env(e["name"].as_str().expect("name"), v);
    }
    let o = c.output().expect("run sh");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

// Multi-threaded: `run_script` blocks while the HTTP server must keep serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_accepts_good_bytes_and_fails_clearly_on_corruption() {
    let good = b"PK\x03\x04 pretend capsule bytes".repeat(1000);
    let digest = hex::encode(Sha256::digest(&good));
    let (srv_good, port) = http_server(good.clone()).await;
    let url = url::Url::parse(&format!("http://127.0.0.1:{port}/c.zip")).expect("url");
    let init = init_container(&url, &digest, None).expect("init");
    assert_eq!(init.init_container["name"], INIT_CONTAINER_NAME);
    assert_eq!(init.init_container["image"], "busybox:1.36");
    assert_eq!(init.volume["name"], VOLUME_NAME);
    assert_eq!(init.volume_mount["mountPath"], MOUNT_PATH);
    assert_eq!(
        init.working_dir,
        format!("file:///forge/capsule/{digest}.zip")
    );

    let dir = tempfile::tempdir().expect("tmp");
    let (ok, log) = run_script(&init.init_container, dir.path());
    assert!(ok, "{log}");
    assert!(log.contains("verified"), "{log}");
    assert_eq!(
        std::fs::read(dir.path().join(format!("{digest}.zip"))).expect("placed"),
        good
    );
    assert!(
        !log.contains(url.as_str()),
        "the URL (a credential) is not logged"
    );

    // Corrupted download: one flipped byte.
    let mut bad = good.clone();
    bad[100] ^= 0xff;
    let bad_digest = hex::encode(Sha256::digest(&bad));
    let (srv_bad, port) = http_server(bad).await;
    let url = url::Url::parse(&format!("http://127.0.0.1:{port}/c.zip")).expect("url");
    let init = init_container(&url, &digest, Some("curlimages/curl:8.10.1")).expect("init");
    assert_eq!(init.init_container["image"], "curlimages/curl:8.10.1");
    let dir = tempfile::tempdir().expect("tmp");
    let (ok, log) = run_script(&init.init_container, dir.path());
    assert!(!ok, "corruption must fail the init container: {log}");
    assert!(
        log.contains(&format!(
            "capsule sha256 mismatch: expected {digest} got {bad_digest}"
        )),
        "{log}"
    );
    assert!(
        !dir.path().join(format!("{digest}.zip")).exists(),
        "nothing placed"
    );

    // Download failure (404) also fails, with its own line.
    let url = url::Url::parse(&format!("http://127.0.0.1:{port}/missing.zip")).expect("url");
    let init = init_container(&url, &digest, None).expect("init");
    let (ok, log) = run_script(
        &init.init_container,
        tempfile::tempdir().expect("tmp").path(),
    );
    assert!(!ok);
    assert!(log.contains("capsule download failed"), "{log}");
    srv_good.abort();
    srv_bad.abort();
}

// A long job's pod recreated after its presigned URL expired: the first URL answers
// 403, the fallback (the gateway's capsule link) serves the bytes. A corrupt first
// download is a mismatch and never falls back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_falls_back_when_the_first_url_fails_but_not_on_a_mismatch() {
    let good = b"PK\x03\x04 capsule for the fallback".repeat(500);
    let digest = hex::encode(Sha256::digest(&good));
    let (srv_good, good_port) = http_server(good.clone()).await;
    let link = url::Url::parse(&format!("http://127.0.0.1:{good_port}/c.zip")).expect("url");
    let expired =
        url::Url::parse(&format!("http://127.0.0.1:{good_port}/expired.zip")).expect("url");
    let init = init_container(&expired, &digest, None)
        .expect("init")
        .with_fallback(&link);
    let names: Vec<_> = init.init_container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        names.iter().filter(|n| *n == FALLBACK_ENV).count(),
        1,
        "{names:?}"
    );
    let dir = tempfile::tempdir().expect("tmp");
    let (ok, log) = run_script(&init.init_container, dir.path());
    assert!(ok, "{log}");
    assert!(log.contains("trying the capsule link instead"), "{log}");
    assert!(log.contains("verified"), "{log}");
    assert_eq!(
        std::fs::read(dir.path().join(format!("{digest}.zip"))).expect("placed"),
        good
    );
    assert!(!log.contains(link.as_str()), "no URL is logged: {log}");

    // Both failing: one failure line each, then the container fails.
    let gone = url::Url::parse(&format!("http://127.0.0.1:{good_port}/gone.zip")).expect("url");
    let init = init_container(&expired, &digest, None)
        .expect("init")
        .with_fallback(&gone);
    let (ok, log) = run_script(
        &init.init_container,
        tempfile::tempdir().expect("tmp").path(),
    );
    assert!(!ok, "{log}");
    assert_eq!(log.matches("capsule download failed").count(), 2, "{log}");

    // A corrupt first download is refused; the fallback is not tried.
    let mut bad = good.clone();
    bad[7] ^= 0x01;
    let (srv_bad, bad_port) = http_server(bad).await;
    let corrupt = url::Url::parse(&format!("http://127.0.0.1:{bad_port}/c.zip")).expect("url");
    let init = init_container(&corrupt, &digest, None)
        .expect("init")
        .with_fallback(&link);
    let (ok, log) = run_script(
        &init.init_container,
        tempfile::tempdir().expect("tmp").path(),
    );
    assert!(!ok, "{log}");
    assert!(log.contains("capsule sha256 mismatch"), "{log}");
    assert!(!log.contains("trying the capsule link"), "{log}");
    srv_good.abort();
    srv_bad.abort();
}

#[test]
fn pod_spec_gets_init_container_volume_and_mounts_once() {
    let url =
        url::Url::parse("http://s3:9000/forge/capsules/x.zip?X-Amz-Signature=abc").expect("url");
    let digest = "ab".repeat(32);
    let init = init_container(&url, &digest, None).expect("init");
    let mut spec = serde_json::json!({ "containers": [ { "name": "ray-head", "image": "rayproject/ray:2.41.0" } ] });
    init.apply_to_pod_spec(&mut spec);
    init.apply_to_pod_spec(&mut spec);
    assert_eq!(spec["initContainers"].as_array().expect("inits").len(), 1);
    assert_eq!(spec["volumes"].as_array().expect("volumes").len(), 1);
    assert_eq!(
        spec["containers"][0]["volumeMounts"][0]["mountPath"],
        MOUNT_PATH
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .len(),
        1
    );
    assert!(init_container(&url, "not-a-digest", None).is_err());
}

#[test]
fn runtime_env_yaml_carries_working_dir_and_env_vars() {
    let mut env = BTreeMap::new();
    env.insert("FORGE_JOB_ID".to_owned(), "job-1".to_owned());
    env.insert("FLAG".to_owned(), "on".to_owned());
    let presigned = "http://127.0.0.1:9000/forge/capsules/ab.zip?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0f%2F";
    for wd in [presigned, "file:///forge/capsule/ab.zip"] {
        let y = runtime_env_yaml(wd, &env).expect("yaml");
        let back: RuntimeEnv = forge_capsule::runtime_env::parse(&y).expect("parses");
        assert_eq!(back.working_dir, wd);
        assert_eq!(back.env_vars, env);
    }
}
