//! `forge policy …` and the plugin developer's loop with the real binary: set,
//! history, diff, rollback, replay and shadow of the global chain; then a plugin
//! scaffolded with `forge plugin new` in a directory outside the repository, built
//! with `forge plugin build`, run and benchmarked in the gateway's host, uploaded and
//! activated as a team chain that then decides a review.

use std::path::Path;

use forge_tests::cli::{Forge, Run};
use forge_tests::plugins::workspace_root;
use forge_tests::policy::{ALICE, gateway};
use serde_json::{Value, json};

fn write_json(path: &Path, value: &Value) -> String {
    std::fs::write(path, serde_json::to_vec_pretty(value).expect("json")).expect("write");
    path.display().to_string()
}

/// The global chain as a chain file, with `team-quota`'s settings replaced.
fn chain_with_quota(show: &Value, quota: Value) -> Value {
    let plugins: Vec<Value> = show["global"]["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .map(|p| {
            let settings = if p["name"] == "team-quota" {
                quota.clone()
            } else {
                p["settings"].clone()
            };
            json!({"digest": p["digest"], "settings": settings})
        })
        .collect();
    json!({"comment": "from the test", "plugins": plugins})
}

fn version(run: &Run) -> u64 {
    run.json()["global"]["version"].as_u64().expect("version")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_commands_change_and_explain_the_global_chain() {
    let gw = gateway("h100=1x8", &[]).await;
    let admin = Forge::new(&gw);
    let work = tempfile::tempdir().expect("tmp");
    let show = admin.run(&["policy", "show", "-o", "json"]).await.expect(0);
    assert_eq!(version(&show), 1);
    let show = show.json();
    let chain = write_json(
        &work.path().join("chain.json"),
        &chain_with_quota(&show, json!({"default": {"*": 8}})),
    );

    let set = admin
        .run(&["policy", "set", "-f", &chain, "--comment", "tighter"])
        .await
        .expect(0);
    assert!(
        set.stderr.contains("activated global version 2"),
        "{}",
        set.stderr
    );
    let history = admin
        .run(&["policy", "history", "-o", "json"])
        .await
        .expect(0)
        .json();
    let versions: Vec<u64> = history["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_u64())
        .collect();
    assert_eq!(versions, vec![2, 1]);
    assert_eq!(history["versions"][0]["comment"], "tighter");
    let diff = admin.run(&["policy", "diff", "1", "2"]).await.expect(0);
    assert!(
        diff.stdout.contains("--- version 1") && diff.stdout.contains("+++ version 2"),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout
            .lines()
            .any(|l| l.starts_with('-') && l.contains("16")),
        "{}",
        diff.stdout
    );
    assert!(
        diff.stdout
            .lines()
            .any(|l| l.starts_with('+') && l.contains('8')),
        "{}",
        diff.stdout
    );
    admin.run(&["policy", "diff", "1", "9"]).await.expect(7);

    // A stale expected version is refused (409): nothing changes.
    admin
        .run(&["policy", "set", "-f", &chain, "--expected-version", "1"])
        .await
        .expect(1);
    let rollback = admin
        .run(&["policy", "rollback", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(rollback["version"], 3);
    let now = admin
        .run(&["policy", "show", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(
        now["global"]["plugins"], show["global"]["plugins"],
        "the chain of version 1 again"
    );

    let replay = admin
        .run(&["policy", "replay", "10", "-f", &chain, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert!(replay["replay"]["compared"].is_u64(), "{replay:#}");
    assert_eq!(replay["dryRun"], true);

    let started = admin
        .run(&["policy", "shadow", "start", "-f", &chain, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(started["active"], true);
    let status = admin.run(&["policy", "shadow", "status"]).await.expect(0);
    assert!(status.stdout.contains("compared 0"), "{}", status.stdout);
    let stopped = admin
        .run(&["policy", "shadow", "stop", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(stopped["active"], false);

    // A member may not change the global chain.
    let mut alice = Forge::new(&gw);
    alice.token = ALICE.to_string();
    let refused = alice.run(&["policy", "set", "-f", &chain]).await.expect(1);
    assert!(refused.stderr.contains("admin-only"), "{}", refused.stderr);
}

/// Runs a command in `dir` with cargo's own variables removed (a nested build), but
/// with this machine's cargo home: `forge` runs with a temporary `HOME`, and a cargo
/// home under it would download the registry and rebuild every dependency again
/// (minutes, past the test's bound for one command, in a loaded CI run).
fn clean_cargo_env(cmd: &mut tokio::process::Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_")
            || key == "RUSTFLAGS"
            || key == "RUSTC"
            || key == "RUSTC_WRAPPER"
            || key == "RUSTC_WORKSPACE_WRAPPER"
            || key == "CLIPPY_ARGS"
        {
            cmd.env_remove(&key);
        }
    }
    cmd.env("CARGO_HOME", cargo_home());
}

/// The cargo home this test runs under: `CARGO_HOME`, else `$HOME/.cargo`.
fn cargo_home() -> std::path::PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cargo")))
        .expect("CARGO_HOME or HOME is set")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaffolded_plugin_builds_outside_the_repository_runs_and_becomes_a_team_chain() {
    let gw = gateway("h100=2x8", &[]).await;
    let mut forge = Forge::new(&gw);
    forge.token = ALICE.to_string();
    let outside = tempfile::tempdir().expect("tmp");
    assert!(
        !outside.path().starts_with(workspace_root()),
        "the scaffold must live outside the repository"
    );
    let root = outside.path().join("max-gpus");
    let created = forge
        .run(&[
            "plugin",
            "new",
            "max-gpus",
            "--dir",
            root.to_str().expect("utf-8"),
        ])
        .await
        .expect(0);
    assert!(
        created.stderr.contains("created plugin crate max-gpus"),
        "{}",
        created.stderr
    );
    for f in [
        "Cargo.toml",
        "src/lib.rs",
        "request.json",
        "settings.json",
        "vendor/forge-plugin-sdk/Cargo.toml",
    ] {
        assert!(root.join(f).is_file(), "{f}");
    }
    forge
        .run(&[
            "plugin",
            "new",
            "max-gpus",
            "--dir",
            root.to_str().expect("utf-8"),
        ])
        .await
        .expect(2);

    // Build from inside the crate, into a target directory of its own under the
    // workspace's (kept between runs, so only the first compiles the standard library).
    // Not `target/plugins`: the crate's own lock file and vendored SDK there once
    // rebuilt the standard library under the workspace's plugins, and the next test
    // building one waited two minutes for it.
    let target = workspace_root().join("target/scaffold-plugins");
    let mut build = forge.command(
        &[
            "plugin",
            "build",
            "--target-dir",
            target.to_str().expect("utf-8"),
        ],
        false,
    );
    build.current_dir(&root);
    clean_cargo_env(&mut build);
    let built = forge_tests::cli::output(build).await.expect(0);
    let wasm = root.join("target/plugins/components/max-gpus.wasm");
    assert_eq!(
        built.stdout.trim(),
        "target/plugins/components/max-gpus.wasm",
        "{built:#?}"
    );
    assert!(wasm.is_file());
    let wasm = wasm.to_str().expect("utf-8").to_string();

    // Its own tests (the SDK's harness, natively) pass where it stands.
    let native = workspace_root().join("target/scaffold-native");
    let mut test = tokio::process::Command::new("cargo");
    test.args([
        "test",
        "--quiet",
        "--target-dir",
        native.to_str().expect("utf-8"),
    ])
    .current_dir(&root)
    .kill_on_drop(true);
    clean_cargo_env(&mut test);
    let tested = forge_tests::cli::output(test).await;
    assert_eq!(tested.code, 0, "cargo test in the scaffold: {tested:#?}");
    assert!(tested.stdout.contains("2 passed"), "{tested:#?}");

    // Run it in the gateway's host: admitted (16 ≤ 16), with its log; rejected (6)
    // with a lower limit.
    let ran = forge
        .run_in(
            &root,
            &[
                "plugin",
                "run",
                &wasm,
                "--request",
                "request.json",
                "--settings",
                "settings.json",
                "-o",
                "json",
            ],
        )
        .await
        .expect(0);
    let out = ran.json();
    assert_eq!(out["decision"]["kind"], "admit", "{out:#}");
    assert!(out["elapsedUs"].as_u64().is_some());
    assert!(
        ran.stderr.contains("asks for 16 GPUs"),
        "the plugin's log: {}",
        ran.stderr
    );
    // The compiled component is kept for the next run (the user's cache directory).
    let cached: Vec<_> = std::fs::read_dir(forge.home.path().join(".cache/forge/plugins"))
        .expect("the plugin cache")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
        .collect();
    assert_eq!(cached.len(), 1, "one compiled component: {cached:?}");
    let strict = write_json(&outside.path().join("strict.json"), &json!({"max_gpus": 8}));
    let run_with = |settings: String| {
        let (forge, root, wasm) = (&forge, &root, &wasm);
        async move {
            let args = [
                "plugin",
                "run",
                wasm.as_str(),
                "--request",
                "request.json",
                "--settings",
            ];
            forge
                .run_in(root, &[&args[..], &[settings.as_str()]].concat())
                .await
        }
    };
    let rejected = run_with(strict).await.expect(6);
    assert!(
        rejected.stdout.contains("gpus.too-many"),
        "{}",
        rejected.stdout
    );
    let bad = write_json(&outside.path().join("bad.json"), &json!({"max_gpus": 0}));
    let refused = run_with(bad).await.expect(1);
    assert!(
        refused.stderr.contains("max_gpus must be at least 1"),
        "{}",
        refused.stderr
    );
    let bench = forge
        .run_in(
            &root,
            &[
                "plugin",
                "bench",
                &wasm,
                "--request",
                "request.json",
                "--settings",
                "settings.json",
                "--iterations",
                "100",
                "-o",
                "json",
            ],
        )
        .await
        .expect(0)
        .json();
    assert!(
        bench["p50Us"].as_u64().is_some_and(|p| p > 0)
            && bench["p99Us"].as_u64() >= bench["p50Us"].as_u64(),
        "{bench:#}"
    );

    // Upload as a team plugin, list it, and make it team-a's chain.
    let uploaded = forge
        .run_in(
            &root,
            &[
                "plugin",
                "upload",
                &wasm,
                "--name",
                "max-gpus",
                "--version",
                "0.1.0",
                "--settings",
                "settings.json",
                "-o",
                "json",
            ],
        )
        .await
        .expect(0)
        .json();
    assert_eq!(uploaded["owner"], "team-a");
    let listed = forge
        .run(&["plugin", "list", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert!(
        listed["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .any(|p| p["name"] == "max-gpus"),
        "{listed:#}"
    );
    let team_chain = write_json(
        &outside.path().join("team-chain.json"),
        &json!({"plugins": [{"name": "max-gpus", "version": "0.1.0", "settings": {"max_gpus": 8}}]}),
    );
    let set = forge
        .run(&["policy", "set", "--team", "team-a", "-f", &team_chain])
        .await
        .expect(0);
    assert!(
        set.stderr.contains("activated team:team-a version 1"),
        "{}",
        set.stderr
    );

    // The team chain now decides: 16 GPUs are refused by max-gpus, 8 admitted.
    let spec = |gpus: u32| {
        write_json(
            &outside.path().join(format!("job{gpus}.json")),
            &json!({"name": "j", "framework": "nemo-rl", "entrypoint": "true",
                    "pools": [{"name": "train", "nodes": 1, "gpusPerNode": gpus}]}),
        )
    };
    let review = forge
        .run(&["review", "-f", &spec(16), "-o", "json"])
        .await
        .expect(6)
        .json();
    assert_eq!(review["decision"]["code"], "gpus.too-many", "{review:#}");
    assert_eq!(review["trace"][0]["plugin"], "team-a/max-gpus");
    forge.run(&["review", "-f", &spec(8)]).await.expect(0);
}
