//! With `SimConfig::token` set the API server serves only requests carrying that bearer
//! token (401 `Unauthorized` Status otherwise, health and version stay public); the
//! kubeconfig and `Sim::client` carry it.

use forge_kubesim::SimConfig;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

use crate::support::start_with;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_is_required() {
    let sim = start_with(SimConfig {
        run_controllers: false,
        token: Some("the-one-token".into()),
        ..SimConfig::default()
    })
    .await;
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces", sim.url());
    for auth in [
        None,
        Some("Bearer kubesim"),
        Some("Bearer the-one-token-not"),
    ] {
        let mut req = http.get(&url);
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.expect("request");
        assert_eq!(resp.status().as_u16(), 401, "{auth:?}");
        let body: serde_json::Value =
            serde_json::from_str(&resp.text().await.expect("body")).expect("status body");
        assert_eq!(body["reason"], "Unauthorized");
    }
    let resp = http
        .get(&url)
        .header("authorization", "Bearer the-one-token")
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 200);
    for public in ["/healthz", "/version"] {
        let resp = http
            .get(format!("{}{public}", sim.url()))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 200, "{public}");
    }
    // The client and the kubeconfig carry it.
    let client = sim.client().expect("client");
    let list = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .expect("the client is authorized");
    assert!(!list.items.is_empty());
    assert!(sim.kubeconfig_yaml().contains("token: the-one-token\n"));
    assert!(
        !format!("{sim:?}").contains("the-one-token"),
        "redacted in Debug"
    );
}
