//! Tenant isolation (issue 13), proved from the outside: three teams — `team-a` and
//! `team-c` with a member each, `ops` with an admin — against the real app. Every
//! cross-team attempt gets the answer below, and the legitimate path still works.
//!
//! | attempt (by a member of team-c unless said) | answer |
//! |---|---|
//! | run team-a's capsule by digest | 422 `unknown-capsule`, the same body as for a digest nobody uploaded |
//! | upload the very same spec + code team-a uploaded | 202, same digest, stored once (deduplicated): it now owns those bytes too |
//! | read / cancel / read the logs of team-a's job; list jobs | 404 `not-found` ×3; the list has only team-c's jobs |
//! | `secretEnv` naming team-a's Secret `team-a.api` | 422 `invalid-spec`, `secretEnv["API_KEY"].secret` `forbidden` |
//! | use team-a's plugin in its own chain; list plugins | 422 `policy.unknown-plugin`; not listed |
//! | change team-a's chain; change the global chain | 403 `forbidden` ×2 |
//! | read team-a's policy history | 403 `forbidden` |
//! | read shadow results | 200 with team-c's comparisons only (admin: all teams') |
//! | a team-a plugin adding `sidecar.istio.io/inject` / a foreign-prefix label | 503 `policy-failed`, cause `widened`, `details.field` names the annotation |
//! | a team-a plugin adding a `team-a.teams.forge.dev/` label | 202: the label is on team-a's pods |
//! | `/metrics` without a token, or with a member's | no team or plugin names (aggregates); admin or `FORGE_METRICS_TOKEN`: per-plugin series; an unknown token: 401 |
//! | use a token after it was removed from the tokens file | 401 once the file is rewritten (no restart); others keep working |
//! | a tokens file naming a team `global` | the change is refused, the previous tokens stay in force |
//! | dev's embedded Kubernetes API without its kubeconfig's token (none, the emulator's old static one, a Forge admin token) | 401 |
//! | a `secretEnv` job of team-a (its own Secret `team-a.api`) | runs with the value in its process; the value is in no file of the data directory (store, capsule, archived log; zips unpacked), not in the RayJob, not in the log |
//! | a dev-mode job reading its environment / working directory | none of the host process's variables; a directory outside the data directory |
//! | where team-a's / team-c's storage jobs write | `teams/team-a` / `teams/team-c` of the claim (`subPath`); the common directory read-only |
//! | team-c's Ray head connecting to team-a's head (8265, 10001, 6379), and back | refused by team-a's NetworkPolicy (the emulator evaluates it); team-a's submitter and the gateway's pods admitted; the policies are deleted with the jobs |
//! | each Ray pod | no service-account token; no privilege escalation, capabilities dropped, non-root |

use std::path::{Path, PathBuf};
use std::time::Duration;

use forge_gateway::auth::hash_token;
use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{JobClient, one_gpu_spec, rayjobs, zip_of};
use forge_tests::plugins;
use forge_tests::policy::PolicyClient;
use forge_tests::wait::{eventually, not_yet};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use reqwest::Method;
use serde_json::{Value, json};

/// Member of team-a.
const ALICE: &str = "alice-team-a-member-token-isolation-0123456789";
/// Member of team-c (the curious neighbour).
const CAROL: &str = "carol-team-c-member-token-isolation-0123456789";
/// Admin of team ops.
const ROOT: &str = "root-ops-admin-token-isolation-0123456789";
/// The scraper's token (`FORGE_METRICS_TOKEN`).
const SCRAPER: &str = "prometheus-scraper-token-isolation-0123456789";

/// A tokens file granting `entries` (token, team, role).
fn write_tokens(path: &Path, entries: &[(&str, &str, &str)]) {
    let mut text = String::from("tokens:\n");
    for (token, team, role) in entries {
        text.push_str(&format!(
            "  - team: {team}\n    role: {role}\n    token_sha256: {}\n",
            hash_token(token)
        ));
    }
    // Replace the file the way Secret volumes and editors do (rename over it).
    let next = path.with_extension("yaml.new");
    std::fs::write(&next, text).expect("tokens file");
    std::fs::rename(&next, path).expect("replace tokens file");
}

const EVERYONE: &[(&str, &str, &str)] = &[
    (ALICE, "team-a", "member"),
    (CAROL, "team-c", "member"),
    (ROOT, "ops", "admin"),
];

/// A gateway with the three teams' tokens (and `extra` settings); returns the tokens
/// file so a test can rewrite it.
async fn three_teams(nodes: &str, extra: &[(&str, &str)]) -> (TestGateway, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let tokens = dir.join("tokens.yaml");
    write_tokens(&tokens, EVERYONE);
    let path = tokens.display().to_string();
    let mut env = vec![
        ("FORGE_TOKENS_FILE", path.as_str()),
        ("FORGE_METRICS_TOKEN", SCRAPER),
    ];
    env.extend_from_slice(extra);
    (TestGateway::start(nodes, &env).await, tokens)
}

fn code(v: &Value, want: &str) {
    assert_eq!(v["error"]["code"], want, "{v:#}");
}

/// A RayJob of the gateway's namespace, by job id.
async fn rayjob_of(gw: &TestGateway, job_id: &str) -> DynamicObject {
    let api: Api<DynamicObject> = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let name = forge_gateway::manifests::rayjob_name(job_id);
    eventually("the RayJob", Duration::from_secs(30), || async {
        match api.get_opt(&name).await {
            Ok(Some(o)) => Ok(o),
            other => Err(not_yet(format!("{other:?}"))),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsules_jobs_logs_and_secrets_belong_to_their_team() {
    let (gw, _) = three_teams("h100=1x8", &[]).await;
    let alice = JobClient::new(&gw.url, ALICE);
    let carol = JobClient::new(&gw.url, CAROL);
    let root = JobClient::new(&gw.url, ROOT);

    // team-a's job carries a (non-secret, but private) env value in its capsule.
    let mut spec = one_gpu_spec("private", "python3 job.py");
    spec["env"] = json!({"API_KEY": "s3cr3t-team-a"});
    let code_zip = zip_of(&[("job.py", "print('team-a job', flush=True)\n")]);
    let (s, a_job) = alice.submit(&spec, code_zip.clone()).await;
    assert_eq!(s, 202, "{a_job:#}");
    let a_id = a_job["id"].as_str().expect("id").to_string();
    let digest = a_job["capsuleSha256"].as_str().expect("digest").to_string();

    // Capsule reuse: team-c names team-a's capsule with its own entrypoint. The answer
    // is the one a digest nobody uploaded gets.
    let steal = |capsule: &str| json!({"spec": one_gpu_spec("steal", "cat .forge/jobspec.json"), "capsule": capsule});
    let post = |token: &'static str, body: Value| {
        let http = gw.http.clone();
        let url = format!("{}/v1/jobs", gw.url);
        async move {
            let resp = http
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .expect("submit");
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.expect("json"),
            )
        }
    };
    let (s, stolen) = post(CAROL, steal(&digest)).await;
    assert_eq!(s, 422, "{stolen:#}");
    code(&stolen, "unknown-capsule");
    let nobody = "0".repeat(64);
    let (s, unknown) = post(CAROL, steal(&nobody)).await;
    assert_eq!(s, 422);
    assert_eq!(
        stolen["error"]["message"]
            .as_str()
            .expect("message")
            .replace(&digest, "<digest>"),
        unknown["error"]["message"]
            .as_str()
            .expect("message")
            .replace(&nobody, "<digest>"),
        "another team's capsule and an unknown one are indistinguishable"
    );
    assert_eq!(stolen["error"]["details"], unknown["error"]["details"]);
    // The owner may reference it.
    let (s, again) = post(ALICE, json!({"spec": spec, "capsule": digest})).await;
    assert_eq!(s, 202, "{again:#}");
    let a_again = again["id"].as_str().expect("id").to_string();
    // Uploading the very same bytes is fine: stored once, and now team-c owns them too.
    let (s, same) = carol.submit(&spec, code_zip.clone()).await;
    assert_eq!(s, 202, "{same:#}");
    assert_eq!(same["capsuleSha256"], digest.as_str());
    let (s, _) = post(CAROL, json!({"spec": spec, "capsule": digest})).await;
    assert_eq!(s, 202);
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(r#"forge_capsule_uploads_total{outcome="deduplicated"} 1"#),
        "{metrics}"
    );

    // Secrets: only the team's own (`team-c.*`).
    let mut secret_spec = one_gpu_spec("secret", "python3 job.py");
    secret_spec["secretEnv"] = json!({"API_KEY": {"secret": "team-a.api", "key": "key"}});
    let (s, body) = carol.submit(&secret_spec, code_zip.clone()).await;
    assert_eq!(s, 422, "{body:#}");
    code(&body, "invalid-spec");
    let fields = body["error"]["details"]["fields"]
        .as_array()
        .expect("fields");
    assert!(
        fields
            .iter()
            .any(|f| f["field"] == r#"secretEnv["API_KEY"].secret"# && f["code"] == "forbidden"),
        "{body:#}"
    );
    let (s, review) = PolicyClient::new(&gw, CAROL).review(&secret_spec).await;
    assert_eq!(s, 422, "the dry run applies the same rule: {review:#}");

    // Jobs, cancel and logs of another team are not found; lists are per team.
    for (method, path) in [
        (Method::GET, format!("/v1/jobs/{a_id}")),
        (Method::GET, format!("/v1/jobs/{a_id}/logs")),
        (Method::GET, format!("/v1/jobs/{a_id}/events")),
        (Method::DELETE, format!("/v1/jobs/{a_id}")),
    ] {
        let (s, body) = carol.call(method.clone(), &path).await;
        assert_eq!(s, 404, "{method} {path}: {body:#}");
        code(&body, "not-found");
    }
    let carol_sees = carol.list_ids().await;
    assert!(!carol_sees.contains(&a_id) && !carol_sees.contains(&a_again));
    assert_eq!(carol_sees.len(), 2, "{carol_sees:?}");
    let root_sees = root.list_ids().await;
    assert!(root_sees.contains(&a_id) && root_sees.len() == 4);
    // Still queued or running, not cancelled by team-c's attempt: team-a cancels it.
    assert_ne!(alice.job(&a_id).await["state"], "cancelled");
    let (s, _) = alice
        .call(Method::DELETE, &format!("/v1/jobs/{a_id}"))
        .await;
    assert!(s == 200 || s == 409, "the owner may cancel: {s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_are_per_team_and_team_plugins_only_narrow() {
    let (gw, _) = three_teams("h100=2x8", &[]).await;
    let alice = PolicyClient::new(&gw, ALICE);
    let carol = PolicyClient::new(&gw, CAROL);
    let root = PolicyClient::new(&gw, ROOT);
    let code_zip = zip_of(&[("job.py", "print('hi', flush=True)\n")]);

    // team-a's own plugin: invisible and unusable to team-c.
    let (s, body) = alice
        .upload("shaper", "1.0.0", plugins::component("hostile"), None, None)
        .await;
    assert_eq!(s, 201, "{body:#}");
    let (_, listed) = carol.get("/v1/plugins").await;
    assert!(
        !listed.to_string().contains("shaper"),
        "team-c's list: {listed:#}"
    );
    let use_it = json!({
        "expectedVersion": 0,
        "plugins": [{"name": "shaper", "version": "1.0.0", "settings": {"mode": "ok"}}]
    });
    let (s, body) = carol.put_policy(Some("team-c"), &use_it).await;
    assert_eq!(s, 422, "{body:#}");
    code(&body, "policy.unknown-plugin");
    // Nor may team-c change team-a's chain, the global chain, or read team-a's history.
    let (s, body) = carol.put_policy(Some("team-a"), &use_it).await;
    assert_eq!(s, 403, "{body:#}");
    let (s, _) = carol
        .put_policy(None, &json!({"expectedVersion": 1, "plugins": []}))
        .await;
    assert_eq!(s, 403);
    let (s, _) = carol.get("/v1/policy/history?team=team-a").await;
    assert_eq!(s, 403);
    let (s, _) = carol.get("/v1/policy?team=team-a").await;
    assert_eq!(s, 403);

    // A team plugin that widens the placement fails team-a's admissions closed,
    // naming the field; one that stays under the team prefix is admitted.
    let shape = |version: u64, shape: Value| {
        json!({
            "expectedVersion": version,
            "plugins": [{"name": "shaper", "version": "1.0.0",
                         "settings": {"mode": "shape", "shape": shape}}]
        })
    };
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &shape(
                0,
                json!({"annotations": {"sidecar.istio.io/inject": "true"}}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let team_a = JobClient::new(&gw.url, ALICE);
    let (s, body) = team_a
        .submit(&one_gpu_spec("widen", "python3 job.py"), code_zip.clone())
        .await;
    assert_eq!(s, 503, "{body:#}");
    code(&body, "policy-failed");
    assert_eq!(body["error"]["details"]["cause"], "widened");
    assert_eq!(
        body["error"]["details"]["field"],
        r#"placement.pools[0].annotations["sidecar.istio.io/inject"]"#
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("sidecar.istio.io/inject"),
        "{body:#}"
    );
    // team-c is not affected by team-a's broken chain.
    let team_c = JobClient::new(&gw.url, CAROL);
    let c_job = team_c
        .submit_ok(&one_gpu_spec("c-job", "python3 job.py"), code_zip.clone())
        .await;
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &shape(1, json!({"labels": {"team-c.teams.forge.dev/x": "1"}})),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let (s, body) = alice
        .review(&one_gpu_spec("foreign", "python3 job.py"))
        .await;
    assert_eq!(s, 503, "{body:#}");
    assert_eq!(
        body["error"]["details"]["field"],
        r#"placement.pools[0].labels["team-c.teams.forge.dev/x"]"#
    );
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &shape(
                2,
                json!({"labels": {"team-a.teams.forge.dev/owner": "alice"},
                       "nodeSelector": {"kubernetes.io/os": "linux"}}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let a_job = team_a
        .submit_ok(&one_gpu_spec("narrow", "python3 job.py"), code_zip.clone())
        .await;
    let rj = rayjob_of(&gw, &a_job).await;
    let head = &rj.data["spec"]["rayClusterSpec"]["headGroupSpec"]["template"];
    assert_eq!(
        head["metadata"]["labels"]["team-a.teams.forge.dev/owner"], "alice",
        "{head:#}"
    );
    assert_eq!(head["spec"]["nodeSelector"]["kubernetes.io/os"], "linux");

    // Shadow results: an admin sees every team's comparisons, a member its own only.
    let candidate = root
        .global_links_with("team-quota", json!({"default": {"*": 16}}))
        .await;
    let (s, body) = root
        .send(
            Method::PUT,
            "/v1/policy/shadow",
            &json!({"plugins": candidate}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let a_shadowed = team_a
        .submit_ok(
            &one_gpu_spec("a-shadow", "python3 job.py"),
            code_zip.clone(),
        )
        .await;
    let c_shadowed = team_c
        .submit_ok(
            &one_gpu_spec("c-shadow", "python3 job.py"),
            code_zip.clone(),
        )
        .await;
    eventually(
        "both shadow comparisons",
        Duration::from_secs(30),
        || async {
            let (_, r) = root.get("/v1/policy/shadow").await;
            if r["compared"] == 2 {
                Ok(())
            } else {
                Err(not_yet(r))
            }
        },
    )
    .await;
    let (s, mine) = carol.get("/v1/policy/shadow").await;
    assert_eq!(s, 200, "{mine:#}");
    assert_eq!(mine["compared"], 1, "team-c's comparisons only: {mine:#}");
    let text = mine.to_string();
    assert!(
        !text.contains("team-a") && !text.contains(&a_shadowed),
        "{text}"
    );
    let _ = c_shadowed;

    // Metrics: no team or plugin names without a token (or with a member's); the
    // per-plugin series for the admin and the scraper's token; an unknown token 401.
    let scrape = |token: Option<&'static str>| {
        let mut req = gw.http.get(format!("{}/metrics", gw.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.expect("metrics");
            (resp.status().as_u16(), resp.text().await.expect("text"))
        }
    };
    for token in [None, Some(ALICE)] {
        let (s, open) = scrape(token).await;
        assert_eq!(s, 200);
        assert!(
            !open.contains("team-a") && !open.contains("shaper"),
            "{open}"
        );
        assert!(
            open.contains("forge_policy_plugin_failures_total{cause=\"widened\"}"),
            "{open}"
        );
    }
    for token in [ROOT, SCRAPER] {
        let (s, detailed) = scrape(Some(token)).await;
        assert_eq!(s, 200);
        assert!(
            detailed.contains(r#"forge_plugin_failures_total{plugin="team-a/shaper",version="1.0.0",cause="widened"}"#),
            "{detailed}"
        );
    }
    let (s, _) = scrape(Some("not-a-token")).await;
    assert_eq!(s, 401);
    let _ = c_job;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_reloaded_on_change_and_reserved_teams_refused() {
    let (gw, tokens) = three_teams("h100=1x8", &[]).await;
    let carol = JobClient::new(&gw.url, CAROL);
    let alice = JobClient::new(&gw.url, ALICE);
    let (s, _) = carol.call(Method::GET, "/v1/jobs").await;
    assert_eq!(s, 200);

    // A file naming a team `global` (the admin plugin namespace) is refused as a
    // whole: the tokens in force stay, the would-be `global` member never exists.
    let mallory = "mallory-would-be-global-token-0123456789";
    write_tokens(
        &tokens,
        &[(ALICE, "team-a", "member"), (mallory, "global", "member")],
    );
    let refused = gw.state.tokens.reload().expect_err("a reserved team name");
    assert!(refused.to_string().contains("reserved"), "{refused}");
    let (s, _) = JobClient::new(&gw.url, mallory)
        .call(Method::GET, "/v1/jobs")
        .await;
    assert_eq!(s, 401);
    let (s, _) = carol.call(Method::GET, "/v1/jobs").await;
    assert_eq!(s, 200, "the previous tokens stay in force");

    // Revoke carol: the watcher swaps the next valid file in, no restart.
    write_tokens(
        &tokens,
        &[(ALICE, "team-a", "member"), (ROOT, "ops", "admin")],
    );
    eventually("carol's token revoked", Duration::from_secs(10), || async {
        match carol.call(Method::GET, "/v1/jobs").await {
            (401, body) => Ok(body),
            other => Err(not_yet(other)),
        }
    })
    .await;
    let (s, _) = alice.call(Method::GET, "/v1/jobs").await;
    assert_eq!(s, 200, "the others keep working");
    let (s, body) = carol.call(Method::GET, "/v1/jobs").await;
    assert_eq!(s, 401);
    code(&body, "unauthenticated");

    // dev's embedded API server serves only its kubeconfig's token (a job process or
    // another local user without it gets 401); the gateway's own client carries it.
    // With a token it speaks HTTPS with its own CA, which the kubeconfig carries.
    let ca = gw
        .sim
        .ca_pem()
        .expect("a token-protected emulator serves HTTPS");
    let kube_http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("CA"))
        .build()
        .expect("client");
    let sim_url = format!("{}/api/v1/namespaces", gw.sim.url());
    for token in [None, Some("kubesim"), Some(ROOT)] {
        let mut req = kube_http.get(&sim_url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.expect("kube API");
        assert_eq!(resp.status().as_u16(), 401, "{token:?}");
    }
    let kubeconfig = gw.sim.kubeconfig_yaml();
    let sim_token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .expect("the kubeconfig's token");
    let resp = kube_http
        .get(&sim_url)
        .bearer_auth(sim_token)
        .send()
        .await
        .expect("kube API");
    assert_eq!(resp.status().as_u16(), 200);
}

/// A job that waits for `GATE` (a file the test creates) so its pods stay up while the
/// test looks at them, then prints the SHA-256 of `API_KEY` (if set), the host
/// variables it can see and its working directory.
const GATED_JOB: &str = r#"import hashlib, os, time
deadline = time.time() + 120
while not os.path.exists(os.environ["GATE"]) and time.time() < deadline:
    time.sleep(0.05)
key = os.environ.get("API_KEY")
if key is not None:
    print("sha256", hashlib.sha256(key.encode()).hexdigest(), flush=True)
print("host", sorted(k for k in os.environ if k.startswith(("CARGO_", "RUST_"))), flush=True)
print("cwd", os.getcwd(), flush=True)
"#;

/// A gated job's spec for `gate`.
fn gated_spec(name: &str, gate: &Path) -> Value {
    let mut spec = one_gpu_spec(name, "python3 job.py");
    spec["env"] = json!({"GATE": gate.display().to_string()});
    spec
}

/// Every file under `dir`, zip archives (capsules) also entry by entry, contains
/// `needle`? Returns the places it was found.
fn find_in_tree(dir: &Path, needle: &[u8]) -> Vec<String> {
    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            if contains(&bytes, needle) {
                found.push(path.display().to_string());
            }
            if let Ok(mut zip) = zip::ZipArchive::new(std::io::Cursor::new(&bytes)) {
                for i in 0..zip.len() {
                    let mut f = zip.by_index(i).expect("zip entry");
                    let mut text = Vec::new();
                    std::io::Read::read_to_end(&mut f, &mut text).expect("unzip");
                    if contains(&text, needle) {
                        found.push(format!("{}!{}", path.display(), f.name()));
                    }
                }
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_env_reaches_the_process_and_nowhere_forge_keeps() {
    use k8s_openapi::api::core::v1::Secret;
    let (gw, _) = three_teams("h100=1x8", &[]).await;
    let alice = JobClient::new(&gw.url, ALICE);
    let value = "pa55-from-a-kubernetes-secret-7f3e";
    let secrets: Api<Secret> = Api::namespaced(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "team-a.api"},
        "stringData": {"key": value},
    }))
    .expect("secret");
    secrets
        .create(&kube::api::PostParams::default(), &secret)
        .await
        .expect("create the Secret");

    let gate_dir = tempfile::tempdir().expect("gate dir");
    let gate = gate_dir.path().join("go");
    let mut spec = gated_spec("with-secret", &gate);
    spec["secretEnv"] = json!({"API_KEY": {"secret": "team-a.api", "key": "key"}});
    let id = alice
        .submit_ok(&spec, zip_of(&[("job.py", GATED_JOB)]))
        .await;
    let rj = rayjob_of(&gw, &id).await;
    let rj_text = serde_json::to_string(&rj).expect("rayjob json");
    assert!(
        !rj_text.contains(value),
        "the value is in the RayJob: {rj_text}"
    );
    let head_env = &rj.data["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"]
        [0]["env"];
    assert_eq!(
        head_env[0]["valueFrom"]["secretKeyRef"]["name"], "team-a.api",
        "{head_env:#}"
    );
    std::fs::write(&gate, b"").expect("open the gate");
    let done = alice
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(90))
        .await;
    let (s, log) = alice.logs(&id).await;
    assert_eq!(done[&id]["state"], "succeeded", "{log}");
    assert_eq!(s, 200);

    // The value reached the process (its hash is in the log) ...
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(value.as_bytes()));
    assert!(log.contains(&format!("sha256 {hash}")), "{log}");
    // ... the test process's own variables did not (dev runs jobs in a pod's
    // environment), and the job ran outside the data directory.
    assert!(log.contains("host []"), "host variables leaked: {log}");
    let data_dir = gw.state.config.gateway.data_dir.clone();
    let cwd = log
        .lines()
        .find_map(|l| l.strip_prefix("cwd "))
        .expect("cwd line");
    assert!(
        !Path::new(cwd).starts_with(&data_dir),
        "{cwd} in {data_dir:?}"
    );
    // ... and Forge kept it nowhere: not in the store, the capsule, the archived log
    // (once archived: the probe finds what is there, the hash).
    assert!(!log.contains(value));
    eventually(
        "the log archived under the data directory",
        Duration::from_secs(30),
        || async {
            match find_in_tree(&data_dir, hash.as_bytes()) {
                found if found.is_empty() => Err(not_yet(found)),
                found => Ok(found),
            }
        },
    )
    .await;
    let found = find_in_tree(&data_dir, value.as_bytes());
    assert!(found.is_empty(), "the value is in {found:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_job_is_fenced_storage_network_and_pod() {
    use forge_kubesim::network::may_connect;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let (gw, _) = three_teams(
        "h100=2x8",
        &[
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_COMMON_SUBPATH", "shared/datasets"),
        ],
    )
    .await;
    // The claim exists in the cluster, as an operator would have created it (a pod
    // naming a missing claim is unschedulable, like on a real cluster).
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "forge-storage"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    kube::Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(
        gw.sim.client().expect("kube client"),
        gw.sim.namespace(),
    )
    .create(&kube::api::PostParams::default(), &claim)
    .await
    .expect("create the storage claim");
    let gate_dir = tempfile::tempdir().expect("gate dir");
    let gate = gate_dir.path().join("go");
    let code_zip = zip_of(&[("job.py", GATED_JOB)]);
    let mut ids = Vec::new();
    for (token, team) in [(ALICE, "team-a"), (CAROL, "team-c")] {
        let mut spec = gated_spec(team, &gate);
        spec["sharedStorage"] = json!(true);
        let id = JobClient::new(&gw.url, token)
            .submit_ok(&spec, code_zip.clone())
            .await;
        ids.push((id, team));
    }

    // Storage: each team's own directory of the claim, the common one read-only.
    for (id, team) in &ids {
        let rj = rayjob_of(&gw, id).await;
        let cluster = &rj.data["spec"]["rayClusterSpec"];
        let templates = std::iter::once(&cluster["headGroupSpec"]["template"]).chain(
            cluster["workerGroupSpecs"]
                .as_array()
                .expect("workers")
                .iter()
                .map(|g| &g["template"]),
        );
        for t in templates {
            let spec = &t["spec"];
            let mounts = &spec["containers"][0]["volumeMounts"];
            let storage: Vec<&Value> = mounts
                .as_array()
                .expect("mounts")
                .iter()
                .filter(|m| m["name"] == "forge-storage")
                .collect();
            assert_eq!(storage.len(), 2, "{mounts:#}");
            assert!(
                storage
                    .iter()
                    .any(|m| m["subPath"] == format!("teams/{team}")
                        && m["readOnly"].as_bool() != Some(true)),
                "{team}: {mounts:#}"
            );
            assert!(
                storage
                    .iter()
                    .any(|m| m["subPath"] == "shared/datasets" && m["readOnly"] == true),
                "{mounts:#}"
            );
            // Pods: no Kubernetes credentials, restricted.
            assert_eq!(spec["automountServiceAccountToken"], false, "{spec:#}");
            let sc = &spec["containers"][0]["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc:#}");
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{sc:#}");
            assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{spec:#}");
        }
    }

    // Network: with both jobs' pods up, team-c's pods cannot reach team-a's Ray head
    // (dashboard/Jobs API, client, GCS); team-a's own submitter can.
    let client = gw.sim.client().expect("client");
    let ns = &gw.state.config.k8s.namespace;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pods_of = |id: String, role: &'static str| {
        let pods = pods.clone();
        async move {
            let selector = match role {
                "submitter" => format!(
                    "batch.kubernetes.io/job-name={}",
                    forge_gateway::manifests::rayjob_name(&id)
                ),
                node_type => format!("forge.dev/job-id={id},ray.io/node-type={node_type}"),
            };
            let lp = ListParams::default().labels(&selector);
            eventually(
                &format!("{role} pod of {id}"),
                Duration::from_secs(60),
                || async {
                    match pods.list(&lp).await {
                        Ok(l) if !l.items.is_empty() => Ok(l.items[0].clone()),
                        other => Err(not_yet(format!("{other:?}"))),
                    }
                },
            )
            .await
        }
    };
    let (a_id, c_id) = (ids[0].0.clone(), ids[1].0.clone());
    let a_head = pods_of(a_id.clone(), "head").await;
    let a_submitter = pods_of(a_id.clone(), "submitter").await;
    let c_head = pods_of(c_id.clone(), "head").await;
    for port in [8265, 10001, 6379] {
        assert!(
            !may_connect(&client, &c_head, &a_head, port)
                .await
                .expect("policies"),
            "{} reached team-a's head on {port}",
            c_head.name_any()
        );
    }
    assert!(
        may_connect(&client, &a_submitter, &a_head, 8265)
            .await
            .expect("policies")
    );
    assert!(
        !may_connect(&client, &a_head, &c_head, 8265)
            .await
            .expect("policies"),
        "and the other way round"
    );
    // The gateway's pods are admitted (a pod as the Deployment labels them).
    let gateway_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "forge-gateway-x", "namespace": ns,
                     "labels": {"app.kubernetes.io/name": "forge-gateway"}},
    }))
    .expect("pod");
    assert!(
        may_connect(&client, &gateway_pod, &a_head, 8265)
            .await
            .expect("policies")
    );

    // The policies go with the jobs.
    std::fs::write(&gate, b"").expect("open the gate");
    let ids: Vec<String> = vec![a_id, c_id];
    JobClient::new(&gw.url, ROOT)
        .wait_terminal(&ids, Duration::from_secs(90))
        .await;
    let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        Api::namespaced(client.clone(), ns);
    eventually(
        "the jobs' NetworkPolicies deleted",
        Duration::from_secs(60),
        || async {
            match policies.list(&ListParams::default()).await {
                Ok(l) if l.items.is_empty() => Ok(()),
                other => Err(not_yet(format!("{other:?}"))),
            }
        },
    )
    .await;
}
