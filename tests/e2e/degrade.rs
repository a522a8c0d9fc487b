//! Degrade, don't die (issue 12, item 7): each fault is caused for real on a
//! `forge-gateway serve` process with its capsules and plugin blobs in S3 (the
//! testkit's s3s-fs), against the emulator as its own process.
//!
//! - a team chain whose plugin blob is gone from object storage when the gateway
//!   starts: the gateway starts and is Ready, that team's admissions fail closed (503
//!   `policy-unavailable`), another team's are admitted; once the blob is back the
//!   policy sync loads the chain and the team is admitted again;
//! - a stored plugin whose bytes no longer match its digest is refused at load (the
//!   same fail-closed answer, and the log names the mismatch);
//! - object storage down: a submission and a plugin upload answer 503
//!   `storage-unavailable` and nothing is stored (no job, no plugin record).

use std::path::{Path, PathBuf};
use std::time::Duration;

use forge_testkit::s3::S3Server;
use forge_tests::jobs::{JobClient, one_gpu_spec, zip_of};
use forge_tests::plugins;
use forge_tests::policy::{ALICE, BOB, PolicyClient};
use forge_tests::procs::{Emulator, Gateway, GatewayOptions, TOKEN, write_gateway_files};
use forge_tests::wait::{eventually, not_yet};
use serde_json::{Value, json};

/// Writes the gateway files, replacing the tokens file with the admin (team-a),
/// alice (member of team-a) and bob (member of team-b), and the start-up chain with
/// `pool-series` alone: blobs are stored by digest, so team-a's `team-quota` must not
/// also be a global plugin (removing its blob would break the global chain too).
fn files(dir: &Path) {
    write_gateway_files(dir);
    let comp = plugins::workspace_root().join("target/plugins/components");
    std::fs::write(
        dir.join("chain.yaml"),
        format!(
            "plugins:\n  - name: pool-series\n    component: {}/forge-policy-pool-series.wasm\n    \
             settings: {{ default_series: h100, allowed: [h100] }}\n",
            comp.display()
        ),
    )
    .expect("chain file");
    let hash = forge_gateway::auth::hash_token;
    std::fs::write(
        dir.join("tokens.yaml"),
        format!(
            "tokens:\n  - team: team-a\n    role: admin\n    token_sha256: {}\n  \
             - team: team-a\n    role: member\n    name: alice\n    token_sha256: {}\n  \
             - team: team-b\n    role: member\n    name: bob\n    token_sha256: {}\n",
            hash(TOKEN),
            hash(ALICE),
            hash(BOB)
        ),
    )
    .expect("tokens file");
}

fn policy_client(g: &Gateway, token: &str) -> PolicyClient {
    PolicyClient {
        url: g.url.clone(),
        token: token.to_string(),
        http: reqwest::Client::new(),
    }
}

fn code() -> Vec<u8> {
    zip_of(&[("job.py", "print('hello')\n")])
}

/// The files under `root` whose bytes are exactly `bytes`.
fn files_holding(root: &Path, bytes: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if std::fs::read(&path).is_ok_and(|b| b == bytes) {
                out.push(path);
            }
        }
    }
    out
}

/// Submits as `token`; the status and the error code (or the job id).
async fn submit(g: &Gateway, token: &str, name: &str) -> (u16, Value) {
    JobClient::new(&g.url, token)
        .try_submit(&one_gpu_spec(name, "python3 job.py"), code())
        .await
        .expect("an answer")
}

/// Starts a gateway on S3, gives team-a a chain of its own plugin, stops the gateway,
/// applies `fault` to the plugin's blob (its path in S3's directory), and starts the
/// gateway again on the same store. Returns the restarted gateway and the blob path.
async fn team_chain_then_restart(
    dir: &Path,
    emulator: &Emulator,
    s3: &S3Server,
    fault: impl FnOnce(&Path),
) -> (Gateway, PathBuf, Vec<u8>) {
    let opts = GatewayOptions::new("degrade", dir, emulator).s3(s3);
    let mut g = Gateway::start(&opts).await;
    let alice = policy_client(&g, ALICE);
    let component = plugins::component("team-quota");
    let (s, rec) = alice
        .upload("own-quota", "1.0.0", component.clone(), None, None)
        .await;
    assert_eq!(s, 201, "{rec:#}");
    let chain = json!({
        "expectedVersion": 0,
        "plugins": [{"name": "own-quota", "version": "1.0.0", "settings": {"default": {"*": 8}}}],
        "comment": "team-a's own quota"
    });
    let (s, body) = alice.put_policy(Some("team-a"), &chain).await;
    assert_eq!(s, 200, "{body:#}");
    let (s, body) = submit(&g, ALICE, "before").await;
    assert_eq!(s, 202, "team-a is admitted while its chain loads: {body:#}");

    let status = g.terminate().await;
    assert!(status.success(), "gateway exited with {status}");
    let blobs = files_holding(s3.root.path(), &component);
    assert_eq!(blobs.len(), 1, "one stored copy of the plugin: {blobs:?}");
    fault(&blobs[0]);
    // The same data directory (the same SQLite store), the same S3.
    let g = Gateway::start(&opts).await;
    (g, blobs[0].clone(), component)
}

/// Team-a's admissions fail closed, team-b's go through.
async fn only_team_a_fails_closed(g: &Gateway) {
    let (s, body) = submit(g, ALICE, "after").await;
    assert_eq!(s, 503, "{body:#}\n{}", g.log());
    assert_eq!(body["error"]["code"], "policy-unavailable", "{body:#}");
    let (s, body) = submit(g, BOB, "other-team").await;
    assert_eq!(s, 202, "team-b is unaffected: {body:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_team_chain_whose_plugin_blob_is_missing_fails_only_that_team_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    files(dir.path());
    let emulator = Emulator::start(dir.path(), "h100=2x8").await;
    let s3 = S3Server::start();
    let (g, blob, component) = team_chain_then_restart(dir.path(), &emulator, &s3, |p| {
        std::fs::remove_file(p).expect("remove the plugin blob");
    })
    .await;
    // Started and Ready (Gateway::start waited for /readyz) despite the broken chain.
    only_team_a_fails_closed(&g).await;

    // The blob is restored: the policy sync retries the chain and team-a is admitted.
    std::fs::write(&blob, &component).expect("restore the blob");
    eventually("team-a admitted again", Duration::from_secs(30), || async {
        let (s, body) = submit(&g, ALICE, "restored").await;
        if s == 202 {
            Ok(())
        } else {
            Err(not_yet((s, body)))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_bytes_no_longer_match_its_digest_is_refused_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    files(dir.path());
    let emulator = Emulator::start(dir.path(), "h100=2x8").await;
    let s3 = S3Server::start();
    let (g, _, _) = team_chain_then_restart(dir.path(), &emulator, &s3, |p| {
        // Another valid component under the same key: loadable, but not the plugin
        // the chain names.
        std::fs::write(p, plugins::component("rwo-guard")).expect("replace the plugin blob");
    })
    .await;
    only_team_a_fails_closed(&g).await;
    assert!(
        g.log().contains("has digest"),
        "the log names the digest mismatch: {}",
        g.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_storage_down_answers_503_and_stores_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    files(dir.path());
    let emulator = Emulator::start(dir.path(), "h100=1x8").await;
    let s3 = S3Server::start();
    let g = Gateway::start(&GatewayOptions::new("no-s3", dir.path(), &emulator).s3(&s3)).await;
    drop(s3);

    let (s, body) = submit(&g, TOKEN, "no-storage").await;
    assert_eq!(s, 503, "{body:#}");
    assert_eq!(body["error"]["code"], "storage-unavailable", "{body:#}");
    assert!(g.client().list_ids().await.is_empty(), "no job was stored");

    let admin = policy_client(&g, TOKEN);
    let (s, body) = admin
        .upload(
            "unstored",
            "1.0.0",
            plugins::component("rwo-guard"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 503, "{body:#}");
    assert_eq!(body["error"]["code"], "storage-unavailable", "{body:#}");
    let (s, list) = admin.get("/v1/plugins").await;
    assert_eq!(s, 200, "{list:#}");
    assert!(
        list["plugins"]
            .as_array()
            .expect("plugins")
            .iter()
            .all(|p| p["name"] != "unstored"),
        "no plugin record: {list:#}"
    );
}
