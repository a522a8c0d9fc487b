//! Policy management (issue 7) through the real app: uploads checked before they are
//! stored, team scoping, optimistic concurrency, rollback, history, restart without
//! recompiling, replica pickup, shadow mode and replay, per-plugin metrics.

use std::time::{Duration, Instant};

use forge_gateway::compose::{self, CapsuleBackend};
use forge_tests::jobs::{JobClient, zip_of};
use forge_tests::plugins;
use forge_tests::policy::{ALICE, BOB, PolicyClient, gateway, spec_with_gpus, trace_plugins};
use reqwest::Method;
use serde_json::{Value, json};

fn code(v: &Value, want: &str) {
    assert_eq!(v["error"]["code"], want, "{v:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_checked_before_anything_is_stored() {
    // A Rust-sized upload limit (the default, 32 MiB, fits Python and TypeScript ones).
    let gw = gateway("h100=1x8", &[("FORGE_PLUGIN_MAX_KIB", "4096")]).await;
    let alice = PolicyClient::new(&gw, ALICE);
    let quota = plugins::component("team-quota");

    type Case = (&'static str, Vec<u8>, Option<Value>, u16, &'static str);
    let cases: Vec<Case> = vec![
        (
            "garbage",
            b"definitely not wasm".to_vec(),
            None,
            422,
            "plugin.not-a-component",
        ),
        (
            "core-module",
            plugins::wat_fixture("plugins/core-module.wat"),
            None,
            422,
            "plugin.not-a-component",
        ),
        (
            "other-world",
            plugins::wat_fixture("plugins/other-world.wat"),
            None,
            422,
            "plugin.wrong-world",
        ),
        (
            "wasi",
            plugins::wat_fixture("plugins/imports-wasi.wat"),
            None,
            422,
            "plugin.forbidden-import",
        ),
        (
            "bad-settings",
            quota.clone(),
            Some(json!({"limitz": {}})),
            422,
            "plugin.invalid-settings",
        ),
        (
            "too-big",
            vec![0u8; (4 << 20) + 1],
            None,
            413,
            "plugin.too-large",
        ),
    ];
    for (name, bytes, settings, status, want) in cases {
        let (s, body) = alice
            .upload(name, "1.0.0", bytes, settings.as_ref(), None)
            .await;
        assert_eq!(s, status, "{name}: {body:#}");
        code(&body, want);
        assert!(
            !body["error"]["message"].as_str().unwrap_or("").is_empty(),
            "{name}: the reason is given: {body:#}"
        );
    }
    // The WASI refusal names the import; the settings refusal is the plugin's own words.
    let (_, body) = alice
        .upload(
            "wasi",
            "1.0.0",
            plugins::wat_fixture("plugins/imports-wasi.wat"),
            None,
            None,
        )
        .await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("wasi"),
        "{body:#}"
    );
    // Nothing was registered for the team.
    let (_, list) = alice.get("/v1/plugins").await;
    let owners: Vec<&str> = list["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| p["owner"].as_str().unwrap_or(""))
        .collect();
    assert!(owners.iter().all(|o| *o == "global"), "{list:#}");

    // A valid upload; an identical re-upload is idempotent; other bytes under the same
    // version are refused (versions are immutable).
    let settings = json!({"default": {"*": 1}});
    let (s, rec) = alice
        .upload("tight", "1.0.0", quota.clone(), Some(&settings), None)
        .await;
    assert_eq!(s, 201, "{rec:#}");
    assert_eq!(rec["owner"], "team-a");
    assert_eq!(rec["uploadedBy"], "alice");
    assert!(rec["digest"].as_str().unwrap_or("").starts_with("sha256:"));
    let (s, again) = alice
        .upload("tight", "1.0.0", quota.clone(), None, None)
        .await;
    assert_eq!((s, &again["digest"]), (200, &rec["digest"]), "{again:#}");
    let (s, body) = alice
        .upload(
            "tight",
            "1.0.0",
            plugins::component("rwo-guard"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 409, "{body:#}");
    code(&body, "plugin.version-exists");

    // Members cannot upload global plugins; another team does not see team-a's.
    let (s, body) = alice
        .upload("mine", "1.0.0", quota.clone(), None, Some("global"))
        .await;
    assert_eq!(s, 403, "{body:#}");
    let (_, bobs) = PolicyClient::new(&gw, BOB).get("/v1/plugins").await;
    assert!(
        bobs["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .all(|p| p["owner"] != "team-a"),
        "{bobs:#}"
    );
    let (s, _) = PolicyClient::new(&gw, BOB)
        .get("/v1/plugins?team=team-a")
        .await;
    assert_eq!(s, 403);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn team_plugins_apply_to_their_team_only_and_cannot_loosen_global_policy() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let alice = PolicyClient::new(&gw, ALICE);
    let bob = PolicyClient::new(&gw, BOB);
    let quota = plugins::component("team-quota");

    // team-a allows itself at most 1 GPU per job.
    let (s, rec) = alice
        .upload("tight", "1.0.0", quota.clone(), None, None)
        .await;
    assert_eq!(s, 201, "{rec:#}");
    let team_chain = json!({
        "expectedVersion": 0,
        "plugins": [{"name": "tight", "version": "1.0.0", "settings": {"default": {"*": 1}}}],
        "comment": "one GPU per job"
    });
    let (s, body) = alice.put_policy(Some("team-a"), &team_chain).await;
    assert_eq!(s, 200, "{body:#}");
    assert_eq!(body["activated"]["version"], 1);
    assert_eq!(body["activated"]["scope"], "team:team-a");

    let two = spec_with_gpus("two", 2);
    let (s, a) = alice.review(&two).await;
    assert_eq!(s, 200, "{a:#}");
    assert_eq!(a["decision"]["kind"], "reject", "{a:#}");
    assert_eq!(a["decision"]["code"], "quota.job-exceeds-limit");
    assert_eq!(a["policy"], "global@1+team@1");
    assert_eq!(
        a["trace"][0]["plugin"], "team-a/tight",
        "team rules run first: {a:#}"
    );
    // team-b is untouched by team-a's rule.
    let (s, b) = bob.review(&two).await;
    assert_eq!(s, 200, "{b:#}");
    assert_eq!(b["decision"]["kind"], "admit", "{b:#}");
    assert_eq!(b["policy"], "global@1");
    assert!(
        trace_plugins(&b).iter().all(|p| !p.starts_with("team-a/")),
        "{b:#}"
    );
    // A real submission of team-a is refused by its own rule.
    let (s, body) = JobClient::new(&gw.url, ALICE)
        .submit(&two, zip_of(&[("job.py", "print(1)\n")]))
        .await;
    assert_eq!(s, 403, "{body:#}");
    assert_eq!(
        body["error"]["details"]["reason"],
        "quota.job-exceeds-limit"
    );

    // A team cannot loosen the global chain: its admit is followed by the global
    // plugins, which still reject what they reject (global quota: 16 per job).
    let (s, _) = bob
        .upload("lenient", "1.0.0", quota.clone(), None, None)
        .await;
    assert_eq!(s, 201);
    let lenient = json!({
        "expectedVersion": 0,
        "plugins": [{"name": "lenient", "version": "1.0.0", "settings": {"default": {"*": 1000}}}]
    });
    let (s, body) = bob.put_policy(Some("team-b"), &lenient).await;
    assert_eq!(s, 200, "{body:#}");
    let huge = json!({
        "name": "huge", "framework": "nemo-rl", "entrypoint": "python3 job.py",
        "pools": [{"name": "train", "nodes": 4, "gpusPerNode": 8}]
    });
    let (_, b) = bob.review(&huge).await;
    assert_eq!(b["decision"]["kind"], "reject", "{b:#}");
    assert_ne!(
        b["trace"].as_array().expect("trace").last().expect("last")["plugin"],
        "team-b/lenient"
    );

    // Members cannot touch the global chain or another team's; a team chain cannot
    // name another team's plugin.
    let global = json!({"expectedVersion": 1, "plugins": []});
    let (s, body) = alice.put_policy(None, &global).await;
    assert_eq!(s, 403, "{body:#}");
    let (s, _) = bob
        .send(Method::POST, "/v1/policy/rollback", &json!({}))
        .await;
    assert_eq!(s, 403);
    let (s, _) = bob.put_policy(Some("team-a"), &team_chain).await;
    assert_eq!(s, 403);
    let steal = json!({
        "expectedVersion": 1,
        "plugins": [{"name": "tight", "version": "1.0.0", "settings": {}}]
    });
    let (s, body) = bob.put_policy(Some("team-b"), &steal).await;
    assert_eq!(s, 422, "{body:#}");
    code(&body, "policy.unknown-plugin");
    assert_eq!(body["error"]["details"]["field"], "plugins[0]");
    // The global chain is still version 1, whatever members tried.
    assert_eq!(admin.global_version().await, 1);

    // A team plugin that fails (deadline) fails its team's admissions closed, and
    // the failure is counted per plugin and cause.
    let (s, _) = alice
        .upload(
            "hostile",
            "0.1.0",
            plugins::component("hostile"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 201);
    let looping = json!({
        "expectedVersion": 1,
        "plugins": [{"name": "hostile", "version": "0.1.0", "settings": {"mode": "loop"}}]
    });
    let (s, body) = alice.put_policy(Some("team-a"), &looping).await;
    assert_eq!(s, 200, "{body:#}");
    let (s, body) = alice.review(&spec_with_gpus("one", 1)).await;
    assert_eq!(s, 503, "{body:#}");
    code(&body, "policy-failed");
    let (s, b) = bob.review(&spec_with_gpus("one", 1)).await;
    assert_eq!((s, &b["decision"]["kind"]), (200, &json!("admit")), "{b:#}");
    let metrics = gw.metrics().await;
    assert!(
        metrics.contains(
            r#"forge_plugin_failures_total{plugin="team-a/hostile",version="0.1.0",cause="deadline"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"forge_plugin_calls_total{plugin="team-a/tight",version="1.0.0",outcome="reject"}"#
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("forge_plugin_call_seconds_bucket{")
                && l.contains(r#"plugin="pool-series""#)
                && l.contains(r#"version="boot-"#)),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_are_compare_and_set_and_rollback_restores_the_exact_chain() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let (_, initial) = admin.get("/v1/policy").await;
    let v1_links = initial["global"]["plugins"].clone();

    // Nothing to roll back to yet.
    let (s, body) = admin
        .send(Method::POST, "/v1/policy/rollback", &json!({}))
        .await;
    assert_eq!(s, 409, "{body:#}");
    code(&body, "policy.no-previous-version");

    let strict = admin
        .global_links_with("team-quota", json!({"default": {"*": 1}}))
        .await;
    let (s, v2) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": 1, "plugins": strict, "comment": "strict"}),
        )
        .await;
    assert_eq!(s, 200, "{v2:#}");
    assert_eq!(v2["activated"]["version"], 2);
    assert_eq!(v2["activated"]["fromVersion"], 1);
    let (_, r) = admin.review(&spec_with_gpus("two", 2)).await;
    assert_eq!(r["decision"]["kind"], "reject", "{r:#}");
    assert_eq!(r["policyVersion"], 2);

    // A stale writer gets 409 with the current version, and changes nothing.
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": 1, "plugins": []}))
        .await;
    assert_eq!(s, 409, "{body:#}");
    code(&body, "policy.version-conflict");
    assert_eq!(body["error"]["details"]["current"], 2);
    // A chain whose settings a plugin refuses is not activated.
    let bad = admin
        .global_links_with("team-quota", json!({"limits": {"": {"*": 1}}}))
        .await;
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": 2, "plugins": bad}))
        .await;
    assert_eq!(s, 422, "{body:#}");
    code(&body, "plugin.invalid-settings");
    assert_eq!(body["error"]["details"]["field"], "plugins[1].settings");
    assert_eq!(admin.global_version().await, 2);

    // Rollback: a new version (3) with exactly version 1's chain.
    let (s, rb) = admin
        .send(
            Method::POST,
            "/v1/policy/rollback",
            &json!({"comment": "too strict"}),
        )
        .await;
    assert_eq!(s, 200, "{rb:#}");
    assert_eq!(rb["version"], 3);
    assert_eq!(rb["action"], "rollback");
    assert_eq!(rb["plugins"], v1_links, "rollback restores the exact chain");
    let (_, now) = admin.get("/v1/policy").await;
    assert_eq!(now["global"]["plugins"], v1_links);
    let (_, r) = admin.review(&spec_with_gpus("two", 2)).await;
    assert_eq!(r["decision"]["kind"], "admit", "{r:#}");
    assert_eq!(r["policyVersion"], 3);

    let (s, h) = admin.get("/v1/policy/history").await;
    assert_eq!(s, 200, "{h:#}");
    let summary: Vec<(u64, u64, String, String)> = h["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap_or(0),
                v["fromVersion"].as_u64().unwrap_or(0),
                v["action"].as_str().unwrap_or("").to_string(),
                v["comment"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (3, 2, "rollback".into(), "too strict".into()),
            (2, 1, "put".into(), "strict".into()),
            (1, 0, "bootstrap".into(), "the start-up chain".into()),
        ]
    );
    assert_eq!(h["versions"][0]["author"], "dev");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_restores_the_active_chain_without_recompiling() {
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().display().to_string();
    let env = [("FORGE_DATA_DIR", dir.as_str())];
    let (links, version) = {
        let gw = gateway("h100=1x8", &env).await;
        let admin = PolicyClient::new(&gw, &gw.token);
        let strict = admin
            .global_links_with("team-quota", json!({"default": {"*": 2}}))
            .await;
        let (s, body) = admin
            .put_policy(None, &json!({"expectedVersion": 1, "plugins": strict}))
            .await;
        assert_eq!(s, 200, "{body:#}");
        let (_, p) = admin.get("/v1/policy").await;
        (
            p["global"]["plugins"].clone(),
            p["global"]["version"].clone(),
        )
    };
    let gw = gateway("h100=1x8", &env).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let (_, p) = admin.get("/v1/policy").await;
    assert_eq!(p["global"]["version"], version);
    assert_eq!(p["global"]["plugins"], links);
    assert_eq!(
        gw.state.policies.registry().engine().compilations(),
        0,
        "the restarted gateway loaded every plugin from the precompile cache"
    );
    let (_, r) = admin.review(&spec_with_gpus("three", 3)).await;
    assert_eq!(
        r["decision"]["kind"], "reject",
        "the restored chain decides: {r:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_sharing_the_store_picks_up_a_change_within_its_sync_interval() {
    let gw = gateway("h100=1x8", &[("FORGE_POLICY_SYNC_MS", "100")]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    // A second gateway on the same data directory (store and object store).
    let replica = compose::build_state(
        (*gw.state.config).clone(),
        gw.state.tokens.clone(),
        vec![gw.sim.client().expect("client")],
        Vec::new(),
        CapsuleBackend::Local {
            base_url: gw.url.parse().expect("url"),
        },
    )
    .await
    .expect("replica");
    let _sync = replica.policies.spawn_sync(Duration::from_millis(100));
    assert_eq!(replica.policies.current().global().version, 1);

    let strict = admin
        .global_links_with("team-quota", json!({"default": {"*": 1}}))
        .await;
    let (s, body) = admin
        .put_policy(None, &json!({"expectedVersion": 1, "plugins": strict}))
        .await;
    assert_eq!(s, 200, "{body:#}");
    let acked = Instant::now();
    while replica.policies.current().global().version != 2 {
        assert!(
            acked.elapsed() < Duration::from_secs(10),
            "the replica did not pick up version 2"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!(
        "replica pickup delay: {:?} (sync interval 100 ms)",
        acked.elapsed()
    );
    let links = |a: &forge_gateway::policy::ActivePolicy| {
        serde_json::to_value(a.view(&forge_gateway::policy::Scope::Global).plugins).expect("json")
    };
    assert_eq!(
        links(&replica.policies.current()),
        links(&gw.state.policies.current())
    );
    // A write from the replica with a stale version is refused by the shared store.
    let stale = replica
        .policies
        .rollback(
            &forge_gateway::policy::Scope::Global,
            Some(1),
            None,
            "replica",
            "",
        )
        .await;
    assert!(
        matches!(
            stale,
            Err(forge_gateway::policy::PolicyAdminError::VersionConflict { current: 2, .. })
        ),
        "{stale:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_mode_and_replay_report_agreement_and_differences() {
    let gw = gateway("h100=2x8", &[]).await;
    let admin = PolicyClient::new(&gw, &gw.token);
    let team_a = JobClient::new(&gw.url, &gw.token);
    let team_b = JobClient::new(&gw.url, BOB);
    // The candidate allows team-a one GPU per job (the live chain: 16 for everyone).
    let strict = admin
        .global_links_with(
            "team-quota",
            json!({"default": {"*": 16}, "limits": {"team-a": {"*": 1}}}),
        )
        .await;

    // Only admins set a shadow candidate; it enforces nothing.
    let (s, _) = PolicyClient::new(&gw, ALICE)
        .send(
            Method::PUT,
            "/v1/policy/shadow",
            &json!({"plugins": strict}),
        )
        .await;
    assert_eq!(s, 403);
    let (s, body) = admin
        .send(
            Method::PUT,
            "/v1/policy/shadow",
            &json!({"plugins": strict, "comment": "1 GPU per job"}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    assert_eq!(body["active"], true);
    assert_eq!(body["compared"], 0);

    let code_zip = zip_of(&[("job.py", "print('shadowed', flush=True)\n")]);
    let mut small = Vec::new();
    let mut big = Vec::new();
    for i in 0..3 {
        // team-b: both chains admit.
        small.push(
            team_b
                .submit_ok(&spec_with_gpus(&format!("s{i}"), 1), code_zip.clone())
                .await,
        );
        // team-a, 2 GPUs: the live chain admits, the candidate would reject.
        big.push(
            team_a
                .submit_ok(&spec_with_gpus(&format!("b{i}"), 2), code_zip.clone())
                .await,
        );
    }
    let started = Instant::now();
    let report = loop {
        let (_, r) = admin.get("/v1/policy/shadow").await;
        if r["compared"] == 6 {
            break r;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{r:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(report["agreed"], 3, "{report:#}");
    assert!((report["agreementRate"].as_f64().expect("rate") - 0.5).abs() < 1e-9);
    let mut differing: Vec<String> = report["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .map(|d| {
            assert_eq!(d["live"], "admit", "{d:#}");
            assert_eq!(d["shadow"], "reject:quota.job-exceeds-limit", "{d:#}");
            d["jobId"].as_str().expect("id").to_string()
        })
        .collect();
    differing.sort();
    big.sort();
    assert_eq!(differing, big);
    // Never enforced: the big jobs were admitted and queued/dispatched.
    for id in &big {
        let j = team_a.job(id).await;
        assert_ne!(j["state"], "rejected", "{j:#}");
    }

    // Replay the same candidate against the recorded decisions: a dry run that
    // reports the changed decisions and activates nothing.
    let (s, dry) = admin
        .put_policy(
            None,
            &json!({"expectedVersion": 1, "plugins": strict, "replay": 100, "dryRun": true}),
        )
        .await;
    assert_eq!(s, 200, "{dry:#}");
    assert_eq!(dry["dryRun"], true);
    assert!(dry["activated"].is_null(), "{dry:#}");
    let replay = &dry["replay"];
    assert!(
        replay["compared"].as_u64().expect("compared") >= 6,
        "{replay:#}"
    );
    let changed: Vec<&str> = replay["differences"]
        .as_array()
        .expect("differences")
        .iter()
        .map(|d| d["jobId"].as_str().expect("id"))
        .collect();
    for id in &big {
        assert!(changed.contains(&id.as_str()), "{id} not in {replay:#}");
    }
    for id in &small {
        assert!(!changed.contains(&id.as_str()), "{id} in {replay:#}");
    }
    assert_eq!(
        admin.global_version().await,
        1,
        "a dry run activates nothing"
    );

    let (s, done) = admin
        .send(Method::DELETE, "/v1/policy/shadow", &json!({}))
        .await;
    assert_eq!(s, 200, "{done:#}");
    assert_eq!(done["active"], false);
    assert_eq!(done["compared"], 6);
    let (s, none) = admin.get("/v1/policy/shadow").await;
    assert_eq!((s, &none["active"]), (200, &json!(false)));
    // Stopping twice: nothing is running any more.
    let (s, body) = admin
        .send(Method::DELETE, "/v1/policy/shadow", &json!({}))
        .await;
    assert_eq!(s, 404, "{body:#}");
    code(&body, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_team_plugin_holds_queued_jobs_and_a_rollback_releases_them() {
    let gw = gateway("h100=1x8", &[]).await;
    let team_a = JobClient::new(&gw.url, &gw.token);
    let policy = PolicyClient::new(&gw, &gw.token);
    let sleeper = zip_of(&[("job.py", "import time\ntime.sleep(60)\n")]);
    let quick = zip_of(&[("job.py", "print('released', flush=True)\n")]);

    // A holds every GPU; B waits for room.
    let a = team_a.submit_ok(&spec_with_gpus("hog", 8), sleeper).await;
    let b = team_a.submit_ok(&spec_with_gpus("waiter", 1), quick).await;
    let queue_code = |j: &Value| j["queue"]["code"].as_str().unwrap_or("").to_string();
    let wait_for = |want: &'static str| {
        let team_a = team_a.clone();
        let b = b.clone();
        async move {
            let started = Instant::now();
            loop {
                let j = team_a.job(&b).await;
                if queue_code(&j) == want || j["state"] == want {
                    return j;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "waiting for {want}: {j:#}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    wait_for("capacity.no-room").await;

    // The team's chain now fails (deadline) on every call: B is held, fail closed.
    let (s, _) = policy
        .upload(
            "hostile",
            "0.1.0",
            plugins::component("hostile"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 201);
    let (s, body) = policy
        .put_policy(
            Some("team-a"),
            &json!({"expectedVersion": 0, "plugins": [
                {"name": "hostile", "version": "0.1.0", "settings": {"mode": "loop"}}]}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    let held = wait_for("policy.failed").await;
    assert_eq!(held["state"], "queued", "never lost: {held:#}");
    assert!(
        held["queue"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("deadline"),
        "{held:#}"
    );

    // An empty team chain (version 2) lifts the hold; freeing the GPUs lets B run.
    let (s, body) = policy
        .put_policy(
            Some("team-a"),
            &json!({"expectedVersion": 1, "plugins": []}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    wait_for("capacity.no-room").await;
    let (s, _) = team_a.call(Method::DELETE, &format!("/v1/jobs/{a}")).await;
    assert_eq!(s, 200);
    let done = team_a
        .wait_terminal(std::slice::from_ref(&b), Duration::from_secs(120))
        .await;
    assert_eq!(done[&b]["state"], "succeeded", "{:#}", done[&b]);
}
