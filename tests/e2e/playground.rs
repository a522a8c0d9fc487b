//! Playgrounds (issue 18) from the outside: a team starts an inference server (the
//! emulator's OpenAI-compatible stand-in for `FORGE_IMAGE_VLLM`), waits for it to be
//! ready, and talks to it through the gateway — which reaches it through the API
//! server's pod proxy with the playground's key. Streamed answers pass chunk by chunk:
//! with a stand-in that emits one chunk every 250 ms, the first chunk through the
//! gateway arrives within 300 ms of the first chunk straight from the pod proxy.
//! Another team gets 404; deleting ends it and removes its pod. A restarted gateway
//! process (the emulator running on as its own process) keeps the playground, its TTL
//! and its proxy.

use std::path::Path;
use std::time::{Duration, Instant};

use forge_gateway::auth::hash_token;
use forge_tests::gateway::TestGateway;
use forge_tests::wait::{eventually, not_yet};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::Api;
use serde_json::{Value, json};

const ALICE: &str = "alice-team-a-member-token-playground-0123456789";
const CAROL: &str = "carol-team-c-member-token-playground-0123456789";
const IMAGE: &str = "vllm/vllm-openai:v0.11.0";

fn write_tokens(path: &Path) {
    let mut text = String::from("tokens:\n");
    for (token, team) in [(ALICE, "team-a"), (CAROL, "team-c")] {
        text.push_str(&format!(
            "  - team: {team}\n    role: member\n    token_sha256: {}\n",
            hash_token(token)
        ));
    }
    std::fs::write(path, text).expect("tokens file");
}

async fn gateway() -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    write_tokens(&tokens);
    let path = tokens.display().to_string();
    let gw = TestGateway::start(
        "h100=1x8",
        &[
            ("FORGE_TOKENS_FILE", path.as_str()),
            ("FORGE_IMAGE_VLLM", IMAGE),
        ],
    )
    .await;
    (gw, dir)
}

fn call(
    gw: &TestGateway,
    token: &str,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    gw.http
        .request(method, format!("{}{path}", gw.url))
        .bearer_auth(token)
}

async fn json_of(r: reqwest::RequestBuilder) -> (u16, Value) {
    let resp = r.send().await.expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn ready(gw: &TestGateway, id: &str) -> Value {
    eventually("the playground ready", Duration::from_secs(60), || async {
        let (_, v) = json_of(call(
            gw,
            ALICE,
            reqwest::Method::GET,
            &format!("/v1/playgrounds/{id}"),
        ))
        .await;
        if v["state"] == "ready" {
            Ok(v)
        } else {
            Err(not_yet(v))
        }
    })
    .await
}

/// Waits until the object `name` of `api` no longer exists.
async fn gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(&format!("{name} gone"), Duration::from_secs(30), || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(not_yet(format!("{other:?}"))),
        }
    })
    .await;
}

fn chat(stream: bool) -> Value {
    json!({"model": "team-a/m", "stream": stream,
        "messages": [{"role": "user", "content": "hello there"}]})
}

/// Time to the first non-empty, non-comment chunk of a streamed response, and the
/// whole body.
async fn first_chunk(req: reqwest::RequestBuilder) -> (Duration, String) {
    let start = Instant::now();
    let mut resp = req.send().await.expect("send");
    assert_eq!(resp.status().as_u16(), 200);
    let mut first = None;
    let mut body = String::new();
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        let text = String::from_utf8_lossy(&chunk).into_owned();
        if first.is_none() && text.contains("data: ") {
            first = Some(start.elapsed());
        }
        body.push_str(&text);
    }
    (first.expect("a data chunk"), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playground_serves_its_team_through_the_gateway_streamed_and_not() {
    let (gw, _dir) = gateway().await;
    let (status, created) = json_of(
        call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds").json(&json!({
            "model": "team-a/m", "series": "h100", "gpus": 1, "ttlSeconds": 600,
            "idleSeconds": 300, "args": ["--kubesim-chunk-delay-ms", "250"]})),
    )
    .await;
    assert_eq!(status, 201, "{created:#}");
    assert_eq!(created["state"], "pending");
    let id = created["id"].as_str().expect("id").to_string();
    let endpoint = created["endpoint"].as_str().expect("endpoint").to_string();
    assert_eq!(endpoint, format!("/v1/playgrounds/{id}/v1"));

    // The pod: GPUs, restricted, key from a Secret owned by the pod.
    let ns = gw.state.config.k8s.namespace.clone();
    let pods: Api<Pod> = Api::namespaced(gw.sim.client().expect("client"), &ns);
    let pod = pods.get(&format!("forge-pg-{id}")).await.expect("pod");
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert!(spec.active_deadline_seconds.is_some());
    let c = &spec.containers[0];
    assert_eq!(c.image.as_deref(), Some(IMAGE));
    assert!(c.startup_probe.is_some() && c.readiness_probe.is_some());
    let secrets: Api<Secret> = Api::namespaced(gw.sim.client().expect("client"), &ns);
    let secret = secrets
        .get(&format!("forge-pg-{id}-key"))
        .await
        .expect("secret");
    let owner = &secret.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.uid, pod.metadata.uid.clone().expect("uid"));
    let key = String::from_utf8(secret.data.expect("data")["api-key"].0.clone()).expect("utf8");

    let v = ready(&gw, &id).await;
    assert_eq!(v["pod"]["phase"], "ready");
    // Its GPU counts as in use, cluster-wide and for the team.
    let (_, cap) = json_of(call(&gw, ALICE, reqwest::Method::GET, "/v1/capacity")).await;
    assert_eq!(cap["series"][0]["inUse"], 1, "{cap:#}");
    assert_eq!(
        cap["team"]["usage"],
        json!([{"series": "h100", "running": 1, "queued": 0}]),
        "{cap:#}"
    );
    let (_, cap) = json_of(call(&gw, CAROL, reqwest::Method::GET, "/v1/capacity")).await;
    assert_eq!(cap["team"]["usage"], json!([]), "{cap:#}");
    assert_eq!(v["reclaim"]["reason"], "idle");

    // Another team: 404 for the playground and its API; the owner sees it listed.
    let (s, _) = json_of(call(
        &gw,
        CAROL,
        reqwest::Method::GET,
        &format!("/v1/playgrounds/{id}"),
    ))
    .await;
    assert_eq!(s, 404);
    let (s, _) = json_of(call(
        &gw,
        CAROL,
        reqwest::Method::GET,
        &format!("{endpoint}/models"),
    ))
    .await;
    assert_eq!(s, 404);
    let (_, list) = json_of(call(&gw, CAROL, reqwest::Method::GET, "/v1/playgrounds")).await;
    assert_eq!(list["items"], json!([]));
    let (_, list) = json_of(call(&gw, ALICE, reqwest::Method::GET, "/v1/playgrounds")).await;
    assert_eq!(list["items"][0]["id"], id.as_str());

    // Models and a non-streamed completion through the gateway.
    let (s, models) = json_of(call(
        &gw,
        ALICE,
        reqwest::Method::GET,
        &format!("{endpoint}/models"),
    ))
    .await;
    assert_eq!(s, 200, "{models:#}");
    assert_eq!(models["data"][0]["id"], "team-a/m");
    let (s, full) = json_of(
        call(
            &gw,
            ALICE,
            reqwest::Method::POST,
            &format!("{endpoint}/chat/completions"),
        )
        .json(&chat(false)),
    )
    .await;
    assert_eq!(s, 200, "{full:#}");
    assert_eq!(
        full["choices"][0]["message"]["content"],
        "Stand-in reply to: hello there"
    );

    // Streamed: through the gateway vs straight from the API server's pod proxy.
    let direct_url = format!(
        "{}/api/v1/namespaces/{ns}/pods/forge-pg-{id}:8000/proxy/v1/chat/completions",
        gw.sim.url()
    );
    let ca = gw.sim.ca_pem().expect("the dev API server speaks HTTPS");
    let direct = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .build()
        .expect("client")
        .post(&direct_url)
        .bearer_auth(gw.sim.token())
        .header("x-forge-playground-key", &key)
        .json(&chat(true));
    let (direct_ttfc, direct_body) = first_chunk(direct).await;
    let through = call(
        &gw,
        ALICE,
        reqwest::Method::POST,
        &format!("{endpoint}/chat/completions"),
    )
    .json(&chat(true));
    let resp_headers = {
        let r = call(
            &gw,
            ALICE,
            reqwest::Method::POST,
            &format!("{endpoint}/chat/completions"),
        )
        .json(&chat(true))
        .send()
        .await
        .expect("send");
        r.headers().clone()
    };
    assert_eq!(
        resp_headers
            .get("x-accel-buffering")
            .and_then(|v| v.to_str().ok()),
        Some("no")
    );
    assert_eq!(
        resp_headers
            .get("cache-control")
            .and_then(|v| v.to_str().ok()),
        Some("no-cache")
    );
    let (gateway_ttfc, gateway_body) = first_chunk(through).await;
    println!(
        "time to first chunk (250 ms/chunk stand-in): direct {} ms, through the gateway {} ms",
        direct_ttfc.as_millis(),
        gateway_ttfc.as_millis()
    );
    assert!(
        gateway_ttfc < direct_ttfc + Duration::from_millis(300),
        "gateway {gateway_ttfc:?} vs direct {direct_ttfc:?}"
    );
    let strip = |b: &str| -> Vec<String> {
        b.split("\n\n")
            .filter(|e| e.starts_with("data: "))
            .map(|e| {
                let d = e.trim_start_matches("data: ");
                serde_json::from_str::<Value>(d)
                    .map(|v| {
                        v.pointer("/choices/0/delta/content")
                            .cloned()
                            .unwrap_or(Value::Null)
                            .to_string()
                    })
                    .unwrap_or_else(|_| d.to_string())
            })
            .collect()
    };
    assert_eq!(strip(&gateway_body), strip(&direct_body), "same events");
    assert!(gateway_body.ends_with("data: [DONE]\n\n"), "{gateway_body}");
    let metrics = gw.metrics().await;
    assert!(
        metrics
            .contains("forge_playground_requests_total{api=\"chat/completions\",status=\"2xx\"} 3"),
        "{metrics}"
    );

    // Delete: ended with its reason, the pod (and what it owns) goes.
    let (s, ended) = json_of(call(
        &gw,
        ALICE,
        reqwest::Method::DELETE,
        &format!("/v1/playgrounds/{id}"),
    ))
    .await;
    assert_eq!(s, 200, "{ended:#}");
    assert_eq!(ended["state"], "expired");
    assert_eq!(ended["reason"], "deleted");
    gone(&pods, &format!("forge-pg-{id}")).await;
    let (s, v) = json_of(call(
        &gw,
        ALICE,
        reqwest::Method::GET,
        &format!("{endpoint}/models"),
    ))
    .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (409, json!("playground-ended"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field_and_nothing_is_created() {
    let (gw, _dir) = gateway().await;
    for (body, field) in [
        (json!({"model": "m", "gpus": 0, "ttlSeconds": 600}), "gpus"),
        (
            json!({"model": "m", "gpus": 1, "ttlSeconds": 10}),
            "ttlSeconds",
        ),
        (
            json!({"model": "m", "gpus": 1, "ttlSeconds": 600, "args": ["--api-key", "x"]}),
            "args",
        ),
    ] {
        let (s, v) =
            json_of(call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds").json(&body)).await;
        assert_eq!(s, 422, "{v:#}");
        assert_eq!(v["error"]["code"], "invalid-playground");
        assert_eq!(v["error"]["details"]["field"], field);
    }
    // More GPUs than any node has: the policy refuses it with its usual code.
    let (s, v) = json_of(
        call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds")
            .json(&json!({"model": "m", "gpus": 8, "ttlSeconds": 600, "series": "a100"})),
    )
    .await;
    assert!(s == 403 || s == 429, "{s} {v:#}");
    let (_, list) = json_of(call(&gw, ALICE, reqwest::Method::GET, "/v1/playgrounds")).await;
    assert_eq!(list["items"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ttl_controller_warns_then_reclaims_and_the_pod_goes() {
    let (gw, _dir) = gateway().await;
    let (status, created) = json_of(
        call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds")
            .json(&json!({"model": "team-a/m", "series": "h100", "gpus": 2, "ttlSeconds": 3600})),
    )
    .await;
    assert_eq!(status, 201, "{created:#}");
    let id = created["id"].as_str().expect("id").to_string();
    ready(&gw, &id).await;
    // Extend: the hard TTL moves; past the 24 h lifetime is refused with the field.
    let (s, v) = json_of(
        call(
            &gw,
            ALICE,
            reqwest::Method::POST,
            &format!("/v1/playgrounds/{id}/extend"),
        )
        .json(&json!({"seconds": 600})),
    )
    .await;
    assert_eq!(s, 200, "{v:#}");
    assert_eq!(
        v["expiresAtMs"].as_i64(),
        created["expiresAtMs"].as_i64().map(|e| e + 600_000)
    );
    let (s, v) = json_of(
        call(
            &gw,
            ALICE,
            reqwest::Method::POST,
            &format!("/v1/playgrounds/{id}/extend"),
        )
        .json(&json!({"seconds": 86_400})),
    )
    .await;
    assert_eq!(
        (s, v["error"]["details"]["field"].clone()),
        (422, json!("seconds")),
        "{v:#}"
    );

    // Time passes: the stored clock (what the controller reads, so a restart keeps
    // it) now ends in 2 s. The leader warns first, then reclaims.
    let soon = forge_gateway::store::now_ms() + 2_000;
    assert!(
        gw.state
            .database
            .playgrounds
            .extend_playground(&id, soon)
            .await
            .expect("store")
    );
    let ended = eventually(
        "the playground reclaimed",
        Duration::from_secs(30),
        || async {
            let (_, v) = json_of(call(
                &gw,
                ALICE,
                reqwest::Method::GET,
                &format!("/v1/playgrounds/{id}"),
            ))
            .await;
            if v["state"] == "expired" {
                Ok(v)
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    assert_eq!(ended["reason"], "ttl-expired", "{ended:#}");
    assert!(
        gw.metrics()
            .await
            .contains("forge_playground_ends_total{reason=\"ttl-expired\"} 1")
    );
    assert!(
        ended["warnedAtMs"].as_i64().is_some(),
        "warned before the reclaim: {ended:#}"
    );
    let pods: Api<Pod> = Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    gone(&pods, &format!("forge-pg-{id}")).await;
    let secrets: Api<Secret> = Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    gone(&secrets, &format!("forge-pg-{id}-key")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_shows_extends_and_ends_a_playground() {
    let (gw, _dir) = gateway().await;
    let forge = forge_tests::cli::Forge::new(&gw);
    let created = forge
        .run(&[
            "playground",
            "create",
            "--model",
            "team-a/m",
            "--gpus",
            "1",
            "--ttl",
            "600",
            "--series",
            "h100",
            "--arg=--max-model-len",
            "--arg=4096",
            "-o",
            "json",
        ])
        .await
        .expect(0)
        .json();
    assert_eq!(created["state"], "pending", "{created:#}");
    assert_eq!(created["args"], json!(["--max-model-len", "4096"]));
    let id = created["id"].as_str().expect("id").to_string();
    let shown = forge.run(&["playground", "status", &id]).await.expect(0);
    assert!(shown.stdout.starts_with(&id), "{}", shown.stdout);
    assert!(
        shown
            .stdout
            .contains(&format!("endpoint: /v1/playgrounds/{id}/v1")),
        "{}",
        shown.stdout
    );
    let list = forge.run(&["playground", "list"]).await.expect(0);
    assert!(list.stdout.starts_with("ID"), "{}", list.stdout);
    assert!(list.stdout.contains(&id), "{}", list.stdout);
    let extended = forge
        .run(&["playground", "extend", &id, "60", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(
        extended["expiresAtMs"].as_i64(),
        created["expiresAtMs"].as_i64().map(|e| e + 60_000)
    );
    let ended = forge
        .run(&["playground", "delete", &id, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(
        (ended["state"].clone(), ended["reason"].clone()),
        (json!("expired"), json!("deleted"))
    );
    // A missing one is the usual one-line error with the not-found exit code.
    let missing = forge.run(&["playground", "status", "nope"]).await;
    assert_eq!(missing.code, 7, "{}", missing.stderr);
}

/// A restart of the gateway process — as a rollout does — forgets nothing: the
/// playground is still ready with the same clocks, and its proxy works with the key the
/// new process reads back (the pod, run by the emulator as its own process, lives on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_restart_keeps_the_playground_its_ttl_and_its_proxy() {
    use forge_tests::procs::{Emulator, Gateway, GatewayOptions, write_gateway_files};
    let dir = tempfile::tempdir().expect("tempdir");
    write_gateway_files(dir.path());
    let emulator = Emulator::start_with(
        dir.path(),
        "h100=1x8",
        &[("KUBESIM_INFERENCE_IMAGE", IMAGE)],
    )
    .await;
    let opts = GatewayOptions::new("gw", dir.path(), &emulator).env("FORGE_IMAGE_VLLM", IMAGE);
    let mut gw = Gateway::start(&opts).await;
    let client = gw.client();
    let (status, created) = json_of(
        client
            .http
            .post(format!("{}/v1/playgrounds", client.url))
            .bearer_auth(&client.token)
            .json(&json!({"model": "team-a/m", "series": "h100", "gpus": 1, "ttlSeconds": 3600})),
    )
    .await;
    assert_eq!(status, 201, "{created:#}");
    let id = created["id"].as_str().expect("id").to_owned();
    let chat_via = |url: String, token: String, id: String| async move {
        json_of(
            reqwest::Client::new()
                .post(format!("{url}/v1/playgrounds/{id}/v1/chat/completions"))
                .bearer_auth(token)
                .json(&chat(false)),
        )
        .await
    };
    let ready_on = |url: String, token: String, id: String| async move {
        eventually("the playground ready", Duration::from_secs(60), || {
            let (url, token, id) = (url.clone(), token.clone(), id.clone());
            async move {
                let (_, v) = json_of(
                    reqwest::Client::new()
                        .get(format!("{url}/v1/playgrounds/{id}"))
                        .bearer_auth(token),
                )
                .await;
                if v["state"] == "ready" {
                    Ok(v)
                } else {
                    Err(not_yet(v))
                }
            }
        })
        .await
    };
    let before = ready_on(client.url.clone(), client.token.clone(), id.clone()).await;
    let (s, answer) = chat_via(client.url.clone(), client.token.clone(), id.clone()).await;
    assert_eq!(s, 200, "{answer:#}");

    let status = gw.terminate().await;
    assert!(status.success(), "the gateway exited with {status}");
    let gw = Gateway::start(&opts).await;
    let client = gw.client();
    let after = ready_on(client.url.clone(), client.token.clone(), id.clone()).await;
    assert_eq!(after["expiresAtMs"], before["expiresAtMs"], "{after:#}");
    assert_eq!(after["createdAtMs"], before["createdAtMs"], "{after:#}");
    let (s, answer) = chat_via(client.url.clone(), client.token.clone(), id.clone()).await;
    assert_eq!(s, 200, "the proxy works after the restart: {answer:#}");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "Stand-in reply to: hello there"
    );
}
