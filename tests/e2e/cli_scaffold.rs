//! `forge plugin new --lang python|ts`: a Python and a TypeScript plugin scaffolded in
//! a directory outside the repository, whose own tests pass with `forge plugin test`,
//! built with `forge plugin build` against the SDK and contract vendored into them
//! (not the repository's), and run in the gateway's host with `forge plugin run` on
//! the sample request: admitted, rejected under a lower limit, refused settings. The
//! toolchains are one shared installation (the repository's, installed by
//! `tests/run.sh`), named with `FORGE_PYTHON_VENV` / `FORGE_NODE_MODULES` as a user
//! with many plugins would.

use std::path::Path;

use forge_tests::cli::{Forge, Run, output};
use forge_tests::plugins::workspace_root;
use serde_json::json;

/// A `forge` user with no gateway (the plugin loop is local).
fn local_forge() -> Forge {
    Forge {
        url: "http://127.0.0.1:9".into(),
        token: "unused".into(),
        home: tempfile::tempdir().expect("config home"),
    }
}

/// `forge args…` in `dir`, with the shared toolchain installation and no SDK override.
async fn forge_in(forge: &Forge, dir: &Path, args: &[&str]) -> Run {
    let root = workspace_root();
    let mut cmd = forge.command(args, false);
    cmd.current_dir(dir)
        .env("FORGE_PYTHON_VENV", root.join("target/sdk/python"))
        .env(
            "FORGE_NODE_MODULES",
            root.join("plugin-sdk/js/node_modules"),
        )
        .env_remove("FORGE_SDK_DIR")
        .env_remove("FORGE_COMPONENTIZE_PY");
    output(cmd).await
}

/// Scaffold `lang` in `outside` (with `files` among its own; the policy module second),
/// test, build, run and benchmark it; then break it and see its tests fail.
async fn scaffold_test_build_run(forge: &Forge, outside: &Path, lang: &str, files: &[&str]) {
    let root = outside.join(format!("max-gpus-{lang}"));
    let created = forge_in(
        forge,
        outside,
        &[
            "plugin",
            "new",
            "max-gpus",
            "--lang",
            lang,
            "--dir",
            root.to_str().expect("utf-8"),
            "-o",
            "json",
        ],
    )
    .await
    .expect(0)
    .json();
    assert_eq!(created["lang"], lang, "{created:#}");
    for f in files.iter().chain(&[
        "request.json",
        "settings.json",
        "vendor/plugin-sdk/sdk.toml",
    ]) {
        assert!(root.join(f).is_file(), "{lang}: {f}");
    }
    assert!(
        std::fs::read_dir(root.join("vendor/wit"))
            .expect("vendor/wit")
            .any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("policy@"))),
        "{lang}: the contract is vendored"
    );

    // Its own tests, natively with the SDK's harness; the SDK used is the vendored one
    // (its generated contract bindings land under the plugin's vendor/).
    let tested = forge_in(forge, &root, &["plugin", "test"]).await;
    assert_eq!(tested.code, 0, "{lang}: forge plugin test: {tested:#?}");
    let generated = match lang {
        "python" => "vendor/target/sdk/python-bindings",
        _ => "vendor/target/sdk/js-types",
    };
    assert!(
        root.join(generated).is_dir(),
        "{lang}: built against the vendored SDK ({generated})"
    );

    let built = forge_in(forge, &root, &["plugin", "build"]).await.expect(0);
    assert_eq!(
        built.stdout.trim(),
        "target/plugins/components/max-gpus.wasm",
        "{lang}: {built:#?}"
    );
    let wasm = root.join("target/plugins/components/max-gpus.wasm");
    let wasm = wasm.to_str().expect("utf-8");

    // In the gateway's host: admitted (16 ≤ 16) with the plugin's log; rejected (exit
    // 6) under a lower limit; settings the policy refuses fail the run (exit 1).
    let run = |settings: String| {
        let (forge, root) = (forge, &root);
        async move {
            forge_in(
                forge,
                root,
                &[
                    "plugin",
                    "run",
                    wasm,
                    "--request",
                    "request.json",
                    "--settings",
                    &settings,
                    // The gateway's memory cap; a deadline that a loaded machine
                    // does not miss (a fresh Python instance takes ~15 ms).
                    "--deadline-ms",
                    "1000",
                    "-o",
                    "json",
                ],
            )
            .await
        }
    };
    let ran = run("settings.json".into()).await.expect(0);
    let out = ran.json();
    assert_eq!(out["decision"]["kind"], "admit", "{lang}: {out:#}");
    assert!(
        ran.stderr.contains("asks for 16 GPUs (at most 16)"),
        "{lang}: the plugin's log: {}",
        ran.stderr
    );
    let write = |name: &str, value: serde_json::Value| {
        let path = outside.join(format!("{lang}-{name}.json"));
        std::fs::write(&path, value.to_string()).expect("settings");
        path.display().to_string()
    };
    let rejected = run(write("strict", json!({"max_gpus": 8}))).await.expect(6);
    assert_eq!(
        rejected.json()["decision"]["code"],
        "gpus.too-many",
        "{lang}: {rejected:#?}"
    );
    let refused = run(write("zero", json!({"max_gpus": 0}))).await.expect(1);
    assert!(
        refused.stderr.contains("max_gpus must be at least 1"),
        "{lang}: {}",
        refused.stderr
    );

    // Benchmarked the same way as a Rust component.
    let bench = forge_in(
        forge,
        &root,
        &[
            "plugin",
            "bench",
            wasm,
            "--request",
            "request.json",
            "--settings",
            "settings.json",
            "--iterations",
            "20",
            "--warmup",
            "2",
            "--deadline-ms",
            "1000",
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
        "{lang}: {bench:#}"
    );

    // A policy that no longer does what its tests say fails `forge plugin test`.
    let module = root.join(files[1]);
    let source = std::fs::read_to_string(&module).expect("policy module");
    assert!(source.contains("gpus.too-many"), "{lang}: {source}");
    std::fs::write(&module, source.replace("gpus.too-many", "gpus.other")).expect("edit");
    let failed = forge_in(forge, &root, &["plugin", "test"]).await;
    assert_eq!(failed.code, 1, "{lang}: a failing test: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_typescript_scaffolds_test_build_and_run_outside_the_repository() {
    let forge = local_forge();
    let outside = tempfile::tempdir().expect("tmp");
    assert!(
        !outside.path().starts_with(workspace_root()),
        "the scaffolds must live outside the repository"
    );
    scaffold_test_build_run(
        &forge,
        outside.path(),
        "python",
        &[
            "forge-plugin.toml",
            "max_gpus.py",
            "test_max_gpus.py",
            "vendor/plugin-sdk/python/forge_policy/__init__.py",
        ],
    )
    .await;
    scaffold_test_build_run(
        &forge,
        outside.path(),
        "ts",
        &[
            "forge-plugin.toml",
            "max-gpus.ts",
            "max-gpus.test.ts",
            "vendor/plugin-sdk/js/src/index.ts",
        ],
    )
    .await;

    // Unknown languages and names that would shadow the SDK are refused (usage, 2),
    // and nothing is written.
    let bad = outside.path().join("bad");
    let bad_dir = bad.to_str().expect("utf-8");
    for args in [
        [
            "plugin", "new", "max-gpus", "--lang", "cobol", "--dir", bad_dir,
        ],
        [
            "plugin",
            "new",
            "forge-policy",
            "--lang",
            "python",
            "--dir",
            bad_dir,
        ],
    ] {
        let refused = forge_in(&forge, outside.path(), &args).await.expect(2);
        assert!(refused.stderr.starts_with("error: "), "{refused:#?}");
        assert!(!bad.exists(), "{args:?} wrote {bad_dir}");
    }
}
