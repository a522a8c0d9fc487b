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
    gateway_with("h100=1x8", &[]).await
}

/// A gateway on `nodes` with playgrounds enabled, ALICE and CAROL, and `extra`.
async fn gateway_with(nodes: &str, extra: &[(&str, &str)]) -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens.yaml");
    write_tokens(&tokens);
    let path = tokens.display().to_string();
    let mut env = vec![
        ("FORGE_TOKENS_FILE", path.as_str()),
        ("FORGE_IMAGE_VLLM", IMAGE),
    ];
    env.extend_from_slice(extra);
    let gw = TestGateway::start(nodes, &env).await;
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
    // Extend: the hard TTL moves; past the 24 h lifetime is refused (409, the
    // playground's age decides) with the field and how much is still possible.
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
        (
            s,
            v["error"]["code"].clone(),
            v["error"]["details"]["field"].clone()
        ),
        (409, json!("playground-lifetime"), json!("seconds")),
        "{v:#}"
    );
    let most = v["error"]["details"]["maxSeconds"]
        .as_u64()
        .expect("maxSeconds");
    // Created with a 3 600 s TTL, extended by 600 s: 24 h less those.
    assert_eq!(most, 86_400 - 3_600 - 600, "{v:#}");

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

/// A playground `body` created by ALICE (201), its id.
async fn create(gw: &TestGateway, token: &str, body: Value) -> String {
    let (status, created) =
        json_of(call(gw, token, reqwest::Method::POST, "/v1/playgrounds").json(&body)).await;
    assert_eq!(status, 201, "{created:#}");
    created["id"].as_str().expect("id").to_string()
}

/// The playground as `token` sees it.
async fn get(gw: &TestGateway, token: &str, id: &str) -> Value {
    json_of(call(
        gw,
        token,
        reqwest::Method::GET,
        &format!("/v1/playgrounds/{id}"),
    ))
    .await
    .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_playground_is_reclaimed_and_an_open_answer_keeps_it_busy() {
    // The operator allows short idle TTLs (the default shortest is 60 s).
    let (gw, _dir) = gateway_with("h100=1x8", &[("FORGE_PLAYGROUND_MIN_TTL_S", "2")]).await;
    let id = create(
        &gw,
        ALICE,
        json!({"model": "team-a/m", "gpus": 1, "ttlSeconds": 600, "idleSeconds": 4,
            "args": ["--kubesim-chunk-delay-ms", "400"]}),
    )
    .await;
    let v = ready(&gw, &id).await;
    assert_eq!(v["reclaim"]["reason"], "idle", "{v:#}");
    let endpoint = format!("/v1/playgrounds/{id}/v1/chat/completions");

    // A streamed answer of ~26 chunks at 400 ms (~10 s, longer than the idle TTL):
    // while it streams the playground is busy, and the stream carries the reclaim
    // warning (idle: 4 s away, within the warning lead) as a comment between events.
    let words = "one two three four five six seven eight nine ten eleven twelve \
        thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty \
        twenty-one twenty-two twenty-three";
    let body = json!({"model": "team-a/m", "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": words}]});
    let started = Instant::now();
    let (_, streamed) =
        first_chunk(call(&gw, ALICE, reqwest::Method::POST, &endpoint).json(&body)).await;
    let took = started.elapsed();
    assert!(
        took > Duration::from_secs(6),
        "the stream outlived the idle TTL: {took:?}"
    );
    assert!(streamed.ends_with("data: [DONE]\n\n"), "{streamed}");
    let warning = streamed
        .split("\n\n")
        .find(|e| e.starts_with(": forge-warning "))
        .unwrap_or_else(|| panic!("no reclaim warning in {streamed}"));
    let notice: Value =
        serde_json::from_str(&warning[": forge-warning ".len()..]).expect("warning JSON");
    assert_eq!(notice["reason"], "idle", "{notice:#}");
    assert_eq!(notice["playground"], id.as_str());
    assert!(
        streamed
            .split("\n\n")
            .all(|e| e.is_empty() || e.starts_with("data: ") || e.starts_with(": ")),
        "every event whole: {streamed}"
    );
    let after_stream = Instant::now();
    let ended_ms = forge_gateway::store::now_ms();
    let v = get(&gw, ALICE, &id).await;
    assert_eq!(v["state"], "ready", "busy while it streamed: {v:#}");
    // The idle clock restarts when the answer ends, not at the last touch while it
    // streamed (every third of the idle TTL: up to 1.3 s before the end).
    eventually(
        "the idle clock restarted at the answer's end",
        Duration::from_secs(2),
        || async {
            let v = get(&gw, ALICE, &id).await;
            if v["lastRequestAtMs"].as_i64().unwrap_or_default() >= ended_ms - 250 {
                Ok(())
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    // The tokens the server reported (include_usage) are counted.
    let metrics = gw.metrics().await;
    let tokens = forge_tests::cli::metric(
        &metrics,
        "forge_playground_tokens_total{kind=\"completion\"}",
    );
    assert!(tokens >= 20.0, "completion tokens counted: {metrics}");

    // Then nothing: reclaimed for idleness, 4 s (and a controller tick) after the
    // answer ended — not after the last touch while it streamed (up to 1.3 s earlier).
    let ended = eventually(
        "the idle playground reclaimed",
        Duration::from_secs(30),
        || async {
            let v = get(&gw, ALICE, &id).await;
            if v["state"] == "expired" {
                Ok(v)
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    let idle_for = after_stream.elapsed();
    assert_eq!(ended["reason"], "idle", "{ended:#}");
    assert!(
        idle_for >= Duration::from_millis(3_800),
        "reclaimed only after its idle TTL: {idle_for:?}"
    );
    assert!(
        gw.metrics()
            .await
            .contains("forge_playground_ends_total{reason=\"idle\"} 1")
    );
    let pods: Api<Pod> = Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    gone(&pods, &format!("forge-pg-{id}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_teams_quota_a_playground_is_rejected_or_told_to_wait() {
    let (gw, _dir) = gateway_with("h100=2x8", &[]).await;
    // team-a may hold 4 GPUs.
    let admin = forge_tests::policy::PolicyClient::new(&gw, &gw.token);
    let links = admin
        .global_links_with(
            "team-quota",
            json!({"limits": {"team-a": {"*": 4}}, "default": {"*": 16}}),
        )
        .await;
    let (s, v) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": admin.global_version().await,
                "plugins": links, "comment": "team-a: 4 GPUs"}),
        )
        .await;
    assert_eq!(s, 200, "{v:#}");

    // More than the limit alone: rejected with the plugin's code.
    let (s, v) = json_of(
        call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds")
            .json(&json!({"model": "m", "gpus": 6, "ttlSeconds": 600})),
    )
    .await;
    assert_eq!(s, 403, "{v:#}");
    assert_eq!(v["error"]["code"], "policy-rejected");
    assert_eq!(
        v["error"]["details"]["reason"], "quota.job-exceeds-limit",
        "{v:#}"
    );
    assert_eq!(v["error"]["details"]["plugin"], "team-quota", "{v:#}");

    // Within it: created, and counted in the team's usage.
    let id = create(
        &gw,
        ALICE,
        json!({"model": "m", "gpus": 4, "ttlSeconds": 600}),
    )
    .await;
    ready(&gw, &id).await;
    // One more GPU would take the team past its limit: told to wait (playgrounds do
    // not queue), with when to try again; nothing is created.
    let resp = call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds")
        .json(&json!({"model": "m", "gpus": 1, "ttlSeconds": 600}))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 429);
    assert!(resp.headers().get("retry-after").is_some(), "{resp:?}");
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["error"]["code"], "policy-queued");
    assert_eq!(v["error"]["details"]["reason"], "quota.exceeded", "{v:#}");
    let (_, list) = json_of(call(&gw, ALICE, reqwest::Method::GET, "/v1/playgrounds")).await;
    assert_eq!(list["items"].as_array().map(Vec::len), Some(1), "{list:#}");
    // Another team is not held by team-a's quota.
    let other = create(
        &gw,
        CAROL,
        json!({"model": "m", "gpus": 1, "ttlSeconds": 600}),
    )
    .await;
    assert_eq!(get(&gw, CAROL, &other).await["team"], "team-c");
    // A training job of team-a waits on the same quota.
    let job = forge_tests::jobs::JobClient::new(&gw.url, ALICE)
        .submit_ok(
            &forge_tests::jobs::one_gpu_spec("after-playground", "python3 -c 'print(1)'"),
            forge_tests::jobs::zip_of(&[("x.py", "print(1)\n")]),
        )
        .await;
    let waiting = eventually(
        "the job waits on quota",
        Duration::from_secs(30),
        || async {
            let (_, v) = json_of(call(
                &gw,
                ALICE,
                reqwest::Method::GET,
                &format!("/v1/jobs/{job}"),
            ))
            .await;
            if v["queue"]["code"] == "quota.exceeded" {
                Ok(v)
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    assert_eq!(waiting["state"], "queued", "{waiting:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_a_job_saved_is_served_from_the_teams_own_storage() {
    let (gw, _dir) = gateway_with(
        "h100=1x8",
        &[
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_MOUNT", "/starforge"),
        ],
    )
    .await;
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "forge-storage"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        gw.sim.client().expect("client"),
        gw.sim.namespace(),
    )
    .create(&kube::api::PostParams::default(), &claim)
    .await
    .expect("the storage claim");

    // team-a's training job saves a checkpoint on its storage.
    let jobs = forge_tests::jobs::JobClient::new(&gw.url, ALICE);
    let mut spec =
        forge_tests::jobs::one_gpu_spec("save-checkpoint", "python3 save.py /starforge/ckpt/run-1");
    spec["sharedStorage"] = json!(true);
    let save = "import json, os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n\
        json.dump({'architectures': ['LlamaForCausalLM']}, open(os.path.join(sys.argv[1], 'config.json'), 'w'))\n\
        print('saved', flush=True)\n";
    let job = jobs
        .submit_ok(&spec, forge_tests::jobs::zip_of(&[("save.py", save)]))
        .await;
    jobs.wait_terminal(std::slice::from_ref(&job), Duration::from_secs(90))
        .await;
    let (_, v) = json_of(call(
        &gw,
        ALICE,
        reqwest::Method::GET,
        &format!("/v1/jobs/{job}"),
    ))
    .await;
    assert_eq!(v["state"], "succeeded", "{v:#}");

    // Served from there: the pod mounts the team's directory read-only.
    let model = "/starforge/ckpt/run-1";
    let id = create(
        &gw,
        ALICE,
        json!({"model": model, "gpus": 1, "ttlSeconds": 600}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let pod = pods.get(&format!("forge-pg-{id}")).await.expect("pod");
    let c = &pod.spec.as_ref().expect("spec").containers[0];
    let m = &c.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(
        (m.mount_path.as_str(), m.sub_path.as_deref(), m.read_only),
        ("/starforge", Some("teams/team-a"), Some(true))
    );
    ready(&gw, &id).await;
    let (s, answer) = json_of(
        call(
            &gw,
            ALICE,
            reqwest::Method::POST,
            &format!("/v1/playgrounds/{id}/v1/chat/completions"),
        )
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})),
    )
    .await;
    assert_eq!(s, 200, "{answer:#}");
    assert!(
        answer["choices"][0]["message"]["content"]
            .as_str()
            .is_some_and(|t| t.contains("Stand-in reply to: hi")),
        "{answer:#}"
    );

    // team-c names the same path: its own (empty) directory, so its server cannot
    // start, and says why.
    let theirs = create(
        &gw,
        CAROL,
        json!({"model": model, "gpus": 1, "ttlSeconds": 600}),
    )
    .await;
    let failing = eventually(
        "team-c's server failing, with its reason",
        Duration::from_secs(60),
        || async {
            let v = get(&gw, CAROL, &theirs).await;
            let reason = v["pod"]["reason"].as_str().unwrap_or_default().to_string();
            if v["pod"]["phase"] == "failing" && reason.contains("config.json") {
                Ok(v)
            } else {
                Err(not_yet(v))
            }
        },
    )
    .await;
    assert_eq!(failing["state"], "pending", "{failing:#}");
    assert_eq!(
        failing["pod"]["pending"]["code"], "CrashLoopBackOff",
        "{failing:#}"
    );
    assert!(
        failing["pod"]["pending"]["lastLines"][0]
            .as_str()
            .is_some_and(|l| l.contains("does not appear to have a file named config.json")),
        "{failing:#}"
    );
    // A path outside the storage is refused before anything is created.
    let (s, v) = json_of(
        call(&gw, ALICE, reqwest::Method::POST, "/v1/playgrounds")
            .json(&json!({"model": "/etc/models/x", "gpus": 1, "ttlSeconds": 600})),
    )
    .await;
    assert_eq!(
        (s, v["error"]["details"]["field"].clone()),
        (422, json!("model")),
        "{v:#}"
    );
}
