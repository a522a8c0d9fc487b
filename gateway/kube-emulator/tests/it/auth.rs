//! Bearer-token authentication: with `SimConfig::token` set, the server speaks HTTPS
//! (its own CA) and a request without the token, or with another one, is the real API
//! server's 401 `Status`; the kubeconfig the emulator writes and its `client()` carry
//! the token and the CA, so kube-rs (from the kubeconfig file, as the gateway loads
//! it, or from URL + token + CA alone) keeps working; the `forge-kubesim` binary takes
//! the token from `--token` / `KUBESIM_TOKEN`. (kubectl: `kubectl.rs`.)

use std::process::Stdio;

use forge_kubesim::{NodeSpec, SimConfig};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{api_err, raw_http, start_with};

const SECRET: &str = "tok-3f9a1c";

/// The body of the real kube-apiserver's 401.
fn unauthorized() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

/// An HTTPS client trusting `ca_pem` only (no retries, no credentials of its own).
fn https(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA"))
        .tls_built_in_root_certs(false)
        .build()
        .expect("client")
}

/// `GET url` with `headers`: (status code, content type, body).
async fn get(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    let mut req = client.get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("request");
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (code, ct, resp.text().await.expect("body"))
}

async fn start_protected() -> forge_kubesim::Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=1x8").expect("layout"),
        run_controllers: false,
        token: Some(SECRET.into()),
        ..SimConfig::default()
    })
    .await
}

#[tokio::test]
async fn requests_without_the_token_get_the_real_401() {
    let sim = start_protected().await;
    assert!(sim.url().starts_with("https://127.0.0.1:"), "{}", sim.url());
    let ca = sim.ca_pem().expect("HTTPS with a token").to_owned();
    let client = https(&ca);
    for path in [
        "/api/v1/nodes",
        "/version",
        "/api",
        "/apis",
        "/healthz",
        "/_sim/faults",
        "/no/such/path",
    ] {
        for headers in [
            vec![],
            vec![("Authorization", "Bearer wrong")],
            vec![("Authorization", "Basic a3ViZTpzaW0=")],
            vec![("Authorization", "Bearer ")],
        ] {
            let (code, ct, body) = get(&client, &format!("{}{path}", sim.url()), &headers).await;
            assert_eq!(code, 401, "{path} {headers:?}");
            let body: Value = serde_json::from_str(&body).expect("Status body");
            assert_eq!(body, unauthorized(), "{path} {headers:?}");
            assert_eq!(ct, "application/json");
        }
    }
    let node = format!("{}/api/v1/nodes/h100-0", sim.url());
    let bearer = format!("Bearer {SECRET}");
    let (code, _, body) = get(&client, &node, &[("Authorization", &bearer)]).await;
    assert_eq!(code, 200, "{body}");
    let lower = format!("bearer {SECRET}");
    let (code, _, _) = get(&client, &node, &[("authorization", &lower)]).await;
    assert_eq!(code, 200, "the scheme is case-insensitive");
    // Plain HTTP is not served on the HTTPS port.
    let plain = reqwest::get(node.replace("https://", "http://")).await;
    assert!(
        plain.is_err_and(|e| !e.is_status()),
        "plain HTTP is not answered"
    );

    // A kube client with the URL and the CA but no token gets the Status as an API
    // error; with the token too (what `FORGE_K8S_API_SERVER` + `FORGE_K8S_TOKEN` +
    // a CA file give) it works.
    let uri: http::Uri = sim.url().parse().expect("uri");
    let der = pem_der(&ca);
    let mut cfg = kube::Config::new(uri.clone());
    cfg.root_cert = Some(vec![der.clone()]);
    let anonymous = kube::Client::try_from(cfg).expect("client");
    let e = api_err(
        Api::<Node>::all(anonymous)
            .list(&ListParams::default())
            .await
            .expect_err("401"),
    );
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );
    let mut cfg = kube::Config::new(uri);
    cfg.root_cert = Some(vec![der]);
    cfg.auth_info = serde_json::from_value(json!({"token": SECRET})).expect("auth info");
    let nodes = Api::<Node>::all(kube::Client::try_from(cfg).expect("client"))
        .list(&ListParams::default())
        .await
        .expect("url + token + CA");
    assert_eq!(nodes.items.len(), 1);
    sim.shutdown().await;
}

/// The DER bytes of the one certificate in `pem`.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine as _;
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("PEM body")
}

#[tokio::test]
async fn the_kubeconfig_and_client_carry_the_token() {
    let sim = start_protected().await;
    assert_eq!(sim.token(), SECRET);
    // `client()` (what the simulated controllers use as well).
    let nodes = Api::<Node>::all(sim.client().expect("client"))
        .list(&ListParams::default())
        .await
        .expect("authenticated list");
    assert_eq!(nodes.items.len(), 1);
    // The kubeconfig file, loaded the way kube-rs users load one.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).expect("write");
    let kc = Kubeconfig::read_from(&path).expect("parse kubeconfig");
    let user = kc.auth_infos[0].auth_info.as_ref().expect("user");
    assert!(user.token.is_some(), "the kubeconfig has a token");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    assert_eq!(cfg.default_namespace, "starforge");
    let client = kube::Client::try_from(cfg).expect("client");
    let n = Api::<Node>::all(client).get("h100-0").await.expect("get");
    assert_eq!(n.metadata.name.as_deref(), Some("h100-0"));
    // Without a configured token the server accepts anything and the kubeconfig
    // carries the placeholder.
    let open = crate::support::start_bare().await;
    assert_eq!(open.token(), forge_kubesim::TOKEN);
    assert!(open.url().starts_with("http://") && open.ca_pem().is_none());
    assert!(open.kubeconfig_yaml().contains(forge_kubesim::TOKEN));
    let (code, _, _) = raw_http(open.addr(), "GET", "/api/v1/nodes").await;
    assert_eq!(code, 200);
    open.shutdown().await;
    sim.shutdown().await;
}

/// The binary: `KUBESIM_TOKEN` (and `--token`) protect the server; the kubeconfig it
/// prints carries the token.
#[tokio::test]
async fn the_binary_takes_the_token_from_its_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kc");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_forge-kubesim"))
        .args(["--no-controllers", "--nodes", "h100=1x8", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("KUBESIM_TOKEN", SECRET)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn forge-kubesim");
    // It prints the kubeconfig once it serves.
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut printed = String::new();
    while let Some(line) = lines.next_line().await.expect("read stdout") {
        printed.push_str(&line);
        printed.push('\n');
        if line.trim_start().starts_with("token:") {
            break;
        }
    }
    assert!(
        printed.contains(SECRET),
        "the printed kubeconfig carries the token"
    );
    let written = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    assert!(written.contains(SECRET));
    let kc = Kubeconfig::from_yaml(&written).expect("kubeconfig");
    let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
    let server = cluster.server.clone().expect("server");
    let ca = {
        use base64::Engine as _;
        let data = cluster
            .certificate_authority_data
            .as_deref()
            .expect("CA data");
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .expect("base64"),
        )
        .expect("PEM")
    };
    let client = https(&ca);
    let nodes = format!("{server}/api/v1/nodes");
    assert_eq!(get(&client, &nodes, &[]).await.0, 401);
    let bearer = format!("Bearer {SECRET}");
    assert_eq!(
        get(&client, &nodes, &[("Authorization", &bearer)]).await.0,
        200
    );
    child.kill().await.expect("stop forge-kubesim");
}
