//! Every route of the API router, held against the real app: each `/v1` route refuses
//! a request without a token, or with an unknown one, with 401 and a bearer challenge
//! (before it reads any body or parameter), and the open probes answer without one.

use forge_gateway::http::ROUTES;
use forge_tests::gateway::TestGateway;

fn method_of(name: &str) -> reqwest::Method {
    name.to_ascii_uppercase()
        .parse()
        .unwrap_or_else(|_| panic!("route table method {name}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_v1_route_needs_a_token() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let v1: Vec<_> = ROUTES
        .iter()
        .filter(|r| r.path.starts_with("/v1/"))
        .collect();
    assert!(v1.len() >= 15, "the route table lists the API: {v1:?}");
    for &forge_gateway::http::Route { method, path, .. } in v1 {
        let url = format!(
            "{}{}",
            gw.url,
            path.replace("{id}", "0123456789abcdef01234567")
        );
        for token in [None, Some("not-a-token")] {
            let mut req = gw.http.request(method_of(method), &url);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.body("{}").send().await.expect("request");
            assert_eq!(
                resp.status().as_u16(),
                401,
                "{method} {path} with token {token:?} must be refused"
            );
            let challenge = resp
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            assert!(
                challenge.starts_with("Bearer"),
                "{method} {path}: {challenge:?}"
            );
            let body: serde_json::Value = resp.json().await.expect("error body");
            assert_eq!(body["error"]["code"], "unauthenticated", "{method} {path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics_are_open() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let open: Vec<_> = ROUTES
        .iter()
        .filter(|r| !r.path.starts_with("/v1/"))
        .collect();
    assert_eq!(open.len(), 4, "only probes and metrics are open: {open:?}");
    for &forge_gateway::http::Route { method, path, .. } in open {
        let resp = gw
            .http
            .request(method_of(method), format!("{}{path}", gw.url))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 200, "{method} {path}");
    }
}
