//! The gateway's HTTP API driven over real HTTP against the embedded emulator:
//! authentication, live capacity from Node objects (following cordons), dry-run
//! admission through the compiled reference chain, and the error contract (422 with
//! every field problem, 413 for oversize bodies).

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::wait::{eventually, not_yet};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

fn spec(pools: Value) -> Value {
    json!({"name": "demo", "framework": "nemo-rl", "entrypoint": "python train.py", "pools": pools})
}

async fn review(gw: &TestGateway, body: &Value) -> (u16, Value) {
    let resp = gw
        .post_json("/v1/admission/review", body)
        .send()
        .await
        .expect("review request");
    (
        resp.status().as_u16(),
        resp.json().await.expect("JSON body"),
    )
}

/// `GET /v1/capacity` as JSON.
async fn capacity(gw: &TestGateway) -> Value {
    gw.get("/v1/capacity")
        .send()
        .await
        .expect("GET /v1/capacity")
        .json()
        .await
        .expect("capacity JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_is_live_and_follows_cordons() {
    let gw = TestGateway::start("h100=2x8,h200=1x8", &[]).await;
    // The Node cache is filled by its watch: the first answer may come before it has
    // seen every node (CI once read an empty list here).
    let cap: Value = eventually(
        "both series in the capacity",
        Duration::from_secs(60),
        || async {
            let cap = capacity(&gw).await;
            match cap["series"].as_array().map(Vec::len) {
                Some(2) if cap["series"][0]["total"] == 16 => Ok(cap),
                _ => Err(not_yet(cap.to_string())),
            }
        },
    )
    .await;
    assert_eq!(cap["gpuNodeLabel"], "starforge/gpu-series");
    let h100 = &cap["series"][0];
    assert_eq!(
        (
            h100["series"].as_str(),
            h100["total"].as_u64(),
            h100["free"].as_u64()
        ),
        (Some("h100"), Some(16), Some(16))
    );
    assert_eq!(cap["team"]["name"], "team-a");
    // Per fleet: the test gateway drives one, `default`, which holds every series.
    let fleets = cap["fleets"].as_array().expect("fleets");
    assert_eq!(fleets.len(), 1, "{cap:#}");
    assert_eq!(
        (&fleets[0]["name"], &fleets[0]["available"]),
        (&json!("default"), &json!(true))
    );
    assert_eq!(
        fleets[0]["series"], cap["series"],
        "one fleet: the sum is its own"
    );

    // Cordon one h100 node through the Kubernetes API, like `kubectl cordon`.
    let nodes: Api<Node> = Api::all(gw.sim.client().unwrap());
    let name = nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .find(|n| n.metadata.labels.as_ref().unwrap()["starforge/gpu-series"] == "h100")
        .and_then(|n| n.metadata.name.clone())
        .unwrap();
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    // The Node cache follows the watch: wait for it (under a loaded CI this has taken
    // longer than the 5 s a fixed loop gave it).
    eventually(
        "the cordoned node's GPUs blocked",
        Duration::from_secs(60),
        || async {
            let cap = capacity(&gw).await;
            let seen = cap["series"][0].clone();
            let counts = (
                seen["blocked"].as_u64(),
                seen["allocatable"].as_u64(),
                seen["free"].as_u64(),
            );
            if counts == (Some(8), Some(8), Some(8)) {
                Ok(())
            } else {
                Err(not_yet(seen.to_string()))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_runs_the_compiled_chain_and_changes_nothing() {
    let gw = TestGateway::start("h100=2x8,h200=2x8", &[]).await;
    let (status, out) = review(
        &gw,
        &spec(json!([{"name": "train", "nodes": 2, "gpusPerNode": 8}])),
    )
    .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["decision"]["kind"], "admit");
    assert_eq!(out["decision"]["placement"]["pools"][0]["series"], "h100");
    assert_eq!(
        out["decision"]["placement"]["pools"][0]["nodeSelector"]["starforge/gpu-series"],
        "h100"
    );
    assert_eq!(out["policyVersion"], 1);
    assert_eq!(out["trace"].as_array().unwrap().len(), 3);
    // The dev chain caps every team's priority at 100 (team-quota's `max_priority`):
    // a member asking for more is admitted at the cap, not promoted.
    assert_eq!(out["decision"]["priorityCap"], 100, "{out}");
    let mut urgent = spec(json!([{"name": "train", "nodes": 1, "gpusPerNode": 8}]));
    urgent["priority"] = json!(1000);
    let (status, capped) = review(&gw, &urgent).await;
    assert_eq!(status, 200, "{capped}");
    assert_eq!(capped["decision"]["kind"], "admit");
    assert_eq!(capped["decision"]["priorityCap"], 100, "{capped}");
    assert!(out["digests"][0].as_str().unwrap().starts_with("sha256:"));

    let (_, out) = review(
        &gw,
        &spec(json!([{"name": "train", "nodes": 1, "gpusPerNode": 8, "series": "b200"}])),
    )
    .await;
    assert_eq!(out["decision"]["kind"], "reject");
    assert_eq!(out["decision"]["code"], "series.not-allowed");
    assert_eq!(out["decision"]["field"], "pools[0].series");

    let (_, out) = review(
        &gw,
        &spec(json!([{"name": "train", "nodes": 3, "gpusPerNode": 8}])),
    )
    .await;
    assert_eq!(out["decision"]["code"], "quota.job-exceeds-limit", "{out}");

    // A dry run creates nothing in the cluster.
    let rayjobs: Api<DynamicObject> = Api::namespaced_with(
        gw.sim.client().unwrap(),
        "starforge",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("ray.io", "v1", "RayJob")),
    );
    assert!(
        rayjobs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_reports_rwo_storage_rejections() {
    let gw = TestGateway::start("h100=2x8", &[("FORGE_K8S_STORAGE_SHARED", "false")]).await;
    let (_, out) = review(
        &gw,
        &spec(json!([{"name": "train", "nodes": 2, "gpusPerNode": 8}])),
    )
    .await;
    assert_eq!(out["decision"]["code"], "storage.rwo-multi-node", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_get_422_with_every_field_problem() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let fields = |out: &Value| -> Vec<String> {
        out["error"]["details"]["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["field"].as_str().unwrap().to_string())
            .collect()
    };
    let body = json!({"name": "Bad_Name", "framework": "nemo-rl", "entrypoint": "", "pools": [{"name": "a", "nodes": 0, "gpusPerNode": 99}]});
    let (status, out) = review(&gw, &body).await;
    assert_eq!(status, 422, "{out}");
    assert_eq!(out["error"]["code"], "invalid-spec");
    let got = fields(&out);
    for expected in [
        "name",
        "entrypoint",
        "pools[0].nodes",
        "pools[0].gpusPerNode",
    ] {
        assert!(
            got.iter().any(|f| f == expected),
            "missing {expected} in {got:?}"
        );
    }
    // The team comes from the token, never from the body.
    let (status, out) = review(&gw, &json!({"name": "ok", "framework": "nemo-rl", "entrypoint": "x", "pools": [{"name": "a", "nodes": 1}], "team": "other"})).await;
    assert_eq!(status, 422, "{out}");
    assert!(fields(&out).iter().any(|f| f == "team"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_bodies_get_413_and_request_ids_are_echoed() {
    let gw = TestGateway::start("h100=1x8", &[("FORGE_MAX_BODY_MIB", "1")]).await;
    let big = "x".repeat(2 << 20);
    // The server answers 413 from the Content-Length without reading the body and may
    // close the connection while the client is still writing it: a reset is a
    // legitimate outcome of one attempt, so try again (the answer is what is tested).
    let mut attempt = 0;
    let resp = loop {
        attempt += 1;
        let sent = gw
            .http
            .post(format!("{}/v1/admission/review", gw.url))
            .bearer_auth(&gw.token)
            .header("content-type", "application/json")
            .header("x-request-id", "req-42")
            .body(big.clone())
            .send()
            .await;
        match sent {
            Ok(r) => break r,
            Err(e) if attempt < 5 => eprintln!("attempt {attempt}: {e}"),
            Err(e) => panic!("no answer in {attempt} attempts: {e}"),
        }
    };
    assert_eq!(resp.status(), 413);
    assert_eq!(resp.headers()["x-request-id"], "req-42");
    // On a new connection: the server may close the one it answered 413 on (the
    // rest of the body unread), and a pooled client could pick that one up again.
    let fresh = reqwest::Client::new()
        .get(format!("{}/v1/capacity", gw.url))
        .bearer_auth(&gw.token)
        .send()
        .await
        .unwrap();
    assert!(fresh.headers().contains_key("x-request-id"));
}
