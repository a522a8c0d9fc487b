//! Policies written in Python and TypeScript (issue 20) through the real gateway: the
//! `scratch-guard` components built from `plugins/scratch-guard-py` and
//! `plugins/scratch-guard-ts` are uploaded as a team's plugins with their own limits,
//! activated, swapped one for the other and rolled back — deciding alike at every step,
//! for the team only.

use forge_tests::jobs::{JobClient, zip_of};
use forge_tests::plugins;
use forge_tests::policy::{ALICE, BOB, PolicyClient, gateway, trace_plugins};
use reqwest::Method;
use serde_json::{Value, json};

fn spec(name: &str, series: &str) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 job.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8, "series": series}]
    })
}

/// The team plugin's verdict in a review: (plugin, decision) of the first trace entry.
fn team_verdict(review: &Value) -> (String, Value) {
    let first = &review["trace"][0];
    (
        first["plugin"].as_str().unwrap_or("").to_string(),
        first["decision"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_typescript_plugins_are_uploaded_activated_swapped_and_rolled_back() {
    let gw = gateway("h100=2x8,h200=2x8", &[]).await;
    let alice = PolicyClient::new(&gw, ALICE);
    let py = plugins::component("scratch-guard-py");
    let ts = plugins::component("scratch-guard-ts");
    // As team plugins they may only add labels under the team's own prefix.
    let settings = json!({"prefix": "tmp-", "reserved": ["h200"], "max_gpus": 16,
                          "label": "team-a.teams.forge.dev/scratch"});

    // Limits are the plugin's own, bounded by the operator's maxima.
    let (s, body) = alice
        .upload_with(
            "scratch-py",
            "1.0.0",
            py.clone(),
            Some(&settings),
            &[("memoryMib", "100000")],
        )
        .await;
    assert_eq!(s, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "plugin.limit-too-high", "{body:#}");
    assert_eq!(body["error"]["details"]["field"], "memoryMib");
    let (s, body) = alice
        .upload_with(
            "scratch-py",
            "1.0.0",
            py.clone(),
            None,
            &[("deadlineMs", "soon")],
        )
        .await;
    assert_eq!(
        (s, &body["error"]["details"]["field"]),
        (400, &json!("deadlineMs"))
    );
    // Refused settings are the plugin's own words, from Python.
    let (s, body) = alice
        .upload_with(
            "scratch-py",
            "1.0.0",
            py.clone(),
            Some(&json!({"max_gpus": 0})),
            &[],
        )
        .await;
    assert_eq!(s, 422, "{body:#}");
    assert_eq!(body["error"]["code"], "plugin.invalid-settings");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("max_gpus must be at least 1"),
        "{body:#}"
    );

    for (name, bytes) in [("scratch-py", py), ("scratch-ts", ts)] {
        let size = bytes.len();
        let (s, rec) = alice
            .upload_with(
                name,
                "1.0.0",
                bytes,
                Some(&settings),
                &[("memoryMib", "128"), ("deadlineMs", "500")],
            )
            .await;
        assert_eq!(s, 201, "{name}: {rec:#}");
        assert_eq!(rec["owner"], "team-a");
        assert_eq!(rec["world"], "forge:policy/policy@0.3.0");
        assert_eq!(rec["size"], size);
        assert!(
            size > 8 << 20,
            "{name} carries its interpreter: {size} bytes"
        );
        assert_eq!(
            (&rec["memoryMib"], &rec["deadlineMs"]),
            (&json!(128), &json!(500))
        );
    }

    let reserved = spec("tmp-sweep", "h200");
    let fine = spec("tmp-probe", "h100");
    let expected_reject = json!({
        "kind": "reject",
        "code": "scratch.reserved-series",
        "message": "scratch job `tmp-sweep` (its name starts with `tmp-`) may not use the reserved series h200; use another series or rename the job",
        "field": "pools[0].series"
    });
    let check = |review: &Value, plugin: &str, policy: &str| {
        assert_eq!(review["policy"], policy, "{review:#}");
        assert_eq!(review["decision"], expected_reject, "{review:#}");
        assert_eq!(team_verdict(review).0, plugin, "{review:#}");
    };

    // v1: the Python plugin.
    let link = |name: &str| json!({"name": name, "version": "1.0.0", "settings": settings});
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &json!({"expectedVersion": 0, "plugins": [link("scratch-py")], "comment": "python"}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    assert_eq!(body["activated"]["version"], 1);
    let (_, r) = alice.review(&reserved).await;
    check(&r, "team-a/scratch-py", "global@1+team@1");
    let (_, r) = alice.review(&fine).await;
    let (plugin, decision) = team_verdict(&r);
    assert_eq!(plugin, "team-a/scratch-py");
    assert_eq!(decision["kind"], "admit", "{r:#}");
    assert_eq!(
        decision["placement"]["pools"][0]["labels"]["team-a.teams.forge.dev/scratch"], "true",
        "{r:#}"
    );
    // A real submission is refused by the Python rule.
    let (s, body) = JobClient::new(&gw.url, ALICE)
        .submit(&reserved, zip_of(&[("job.py", "print(1)\n")]))
        .await;
    assert_eq!(s, 403, "{body:#}");
    assert_eq!(
        body["error"]["details"]["reason"],
        "scratch.reserved-series"
    );

    // v2: swapped for the TypeScript plugin, same answers.
    let (s, body) = alice
        .put_policy(
            Some("team-a"),
            &json!({"expectedVersion": 1, "plugins": [link("scratch-ts")], "comment": "typescript"}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    assert_eq!(body["activated"]["version"], 2);
    let (_, r) = alice.review(&reserved).await;
    check(&r, "team-a/scratch-ts", "global@1+team@2");
    let (_, r2) = alice.review(&fine).await;
    assert_eq!(
        team_verdict(&r2).1,
        decision,
        "TypeScript admits like Python"
    );

    // v3: rolled back to the Python chain.
    let (s, body) = alice
        .send(
            Method::POST,
            "/v1/policy/rollback?team=team-a",
            &json!({"comment": "back to python"}),
        )
        .await;
    assert_eq!(s, 200, "{body:#}");
    assert_eq!(body["version"], 3);
    assert_eq!(body["action"], "rollback");
    assert_eq!(body["plugins"][0]["name"], "scratch-py", "{body:#}");
    let (_, r) = alice.review(&reserved).await;
    check(&r, "team-a/scratch-py", "global@1+team@3");

    // Another team is untouched.
    let (_, b) = PolicyClient::new(&gw, BOB).review(&reserved).await;
    assert!(
        trace_plugins(&b).iter().all(|p| !p.starts_with("team-a/")),
        "{b:#}"
    );
    // Calls are counted per plugin and version, whatever its language.
    let metrics = gw.metrics().await;
    for plugin in ["team-a/scratch-py", "team-a/scratch-ts"] {
        assert!(
            metrics.contains(&format!(
                r#"forge_plugin_calls_total{{plugin="{plugin}",version="1.0.0",outcome="reject"}}"#
            )),
            "{plugin}: {metrics}"
        );
    }
}
