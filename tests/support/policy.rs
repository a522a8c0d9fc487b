//! Policy-management helpers: a gateway with an admin and two team members, and a
//! small client for `/v1/plugins`, `/v1/policy*` and `/v1/admission/review`.

use serde_json::{Value, json};

use crate::gateway::TestGateway;

/// Member of team-a.
pub const ALICE: &str = "alice-team-a-member-token-0123456789";
/// Member of team-b.
pub const BOB: &str = "bob-team-b-member-token-0123456789";

/// Start a gateway (dev composition) whose tokens file adds `ALICE` and `BOB`; the
/// gateway's own token is an admin of team-a.
pub async fn gateway(nodes: &str, extra: &[(&str, &str)]) -> TestGateway {
    gateway_tweaked(nodes, extra, |_| {}).await
}

/// [`gateway`] with the dev options adjusted by `tweak` (more fleets, say).
pub async fn gateway_tweaked(
    nodes: &str,
    extra: &[(&str, &str)],
    tweak: impl FnOnce(&mut forge_gateway::dev::DevOptions),
) -> TestGateway {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "tokens:\n  - team: team-a\n    role: member\n    name: alice\n    token_sha256: {}\n  \
             - team: team-b\n    role: member\n    name: bob\n    token_sha256: {}\n",
            forge_gateway::auth::hash_token(ALICE),
            forge_gateway::auth::hash_token(BOB)
        ),
    )
    .expect("tokens file");
    let tokens = tokens.display().to_string();
    let mut env = vec![("FORGE_TOKENS_FILE", tokens.as_str())];
    env.extend_from_slice(extra);
    TestGateway::start_tweaked(nodes, &env, tweak).await
}

/// A policy-API client acting with one token.
#[derive(Clone)]
pub struct PolicyClient {
    pub url: String,
    pub token: String,
    pub http: reqwest::Client,
}

async fn answer(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

impl PolicyClient {
    pub fn new(gw: &TestGateway, token: &str) -> PolicyClient {
        PolicyClient {
            url: gw.url.clone(),
            token: token.to_string(),
            http: reqwest::Client::new(),
        }
    }

    /// `POST /v1/plugins` with the given parts (`settings`/`scope` optional).
    pub async fn upload(
        &self,
        name: &str,
        version: &str,
        component: Vec<u8>,
        settings: Option<&Value>,
        scope: Option<&str>,
    ) -> (u16, Value) {
        let extra: Vec<(&str, &str)> = scope.map(|s| ("scope", s)).into_iter().collect();
        self.upload_with(name, version, component, settings, &extra)
            .await
    }

    /// `POST /v1/plugins` with `settings` (optional) and further text parts
    /// (`scope`, `memoryMib`, `deadlineMs`, …).
    pub async fn upload_with(
        &self,
        name: &str,
        version: &str,
        component: Vec<u8>,
        settings: Option<&Value>,
        extra: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut form = reqwest::multipart::Form::new()
            .part(
                "component",
                reqwest::multipart::Part::bytes(component).file_name("plugin.wasm"),
            )
            .text("name", name.to_string())
            .text("version", version.to_string())
            .text("description", format!("{name} for tests"));
        if let Some(s) = settings {
            form = form.text("settings", s.to_string());
        }
        for (part, value) in extra {
            form = form.text(part.to_string(), value.to_string());
        }
        let resp = self
            .http
            .post(format!("{}/v1/plugins", self.url))
            .bearer_auth(&self.token)
            .multipart(form)
            .send()
            .await
            .expect("upload");
        answer(resp).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("GET");
        answer(resp).await
    }

    pub async fn send(&self, method: reqwest::Method, path: &str, body: &Value) -> (u16, Value) {
        let resp = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .expect("request");
        answer(resp).await
    }

    /// Makes the hostile fixture (uploaded as `guard@1.0.0`) `team`'s first chain,
    /// admitting everything and answering every preemption plan of the team's jobs
    /// with `plan` (`veto`, `trap`, …).
    pub async fn guard_team(&self, team: &str, plan: &str) {
        let (s, body) = self
            .upload(
                "guard",
                "1.0.0",
                crate::plugins::component("hostile"),
                None,
                None,
            )
            .await;
        assert_eq!(s, 201, "{body:#}");
        let chain = json!({
            "expectedVersion": 0,
            "plugins": [{"name": "guard", "version": "1.0.0", "settings": {"mode": "ok", "plan": plan}}]
        });
        let (s, body) = self.put_policy(Some(team), &chain).await;
        assert_eq!(s, 200, "{body:#}");
    }

    /// `PUT /v1/policy[?team=]`.
    pub async fn put_policy(&self, team: Option<&str>, body: &Value) -> (u16, Value) {
        let path = match team {
            Some(t) => format!("/v1/policy?team={t}"),
            None => "/v1/policy".to_string(),
        };
        self.send(reqwest::Method::PUT, &path, body).await
    }

    /// The global chain's current version.
    pub async fn global_version(&self) -> u64 {
        let (status, body) = self.get("/v1/policy").await;
        assert_eq!(status, 200, "{body:#}");
        body["global"]["version"].as_u64().expect("version")
    }

    /// The global chain's links as `PUT` accepts them, with one link's settings
    /// replaced.
    pub async fn global_links_with(&self, plugin: &str, settings: Value) -> Vec<Value> {
        let (_, body) = self.get("/v1/policy").await;
        body["global"]["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .map(|l| {
                let s = if l["name"] == plugin {
                    settings.clone()
                } else {
                    l["settings"].clone()
                };
                json!({"digest": l["digest"], "settings": s})
            })
            .collect()
    }

    /// `POST /v1/admission/review` of a JobSpec.
    pub async fn review(&self, spec: &Value) -> (u16, Value) {
        self.send(reqwest::Method::POST, "/v1/admission/review", spec)
            .await
    }
}

/// The plugins a review's trace names, in order.
pub fn trace_plugins(review: &Value) -> Vec<String> {
    review["trace"]
        .as_array()
        .expect("a review carries its trace")
        .iter()
        .map(|t| t["plugin"].as_str().unwrap_or("").to_string())
        .collect()
}

/// A JobSpec asking `gpus` GPUs on one node.
pub fn spec_with_gpus(name: &str, gpus: u32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 job.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": gpus}]
    })
}
