//! The `forge` command-line client, as a user runs it: the real binary against a dev
//! gateway (output through pipes, so never a terminal). Login and identity; submit a
//! directory and wait for the outcome; the second submit of the same directory
//! uploads nothing (the gateway's metrics say so); logs, status, jobs, capacity,
//! review, cancel, `-o json`; following a job and detaching with Ctrl-C; the
//! exit-code contract; errors as one line; the policy commands; an interrupted
//! upload of a ≥ 200 MiB tree that resumes; and the plugin developer's loop in a
//! directory outside the repository.

use std::path::Path;
use std::time::Duration;

use forge_tests::cli::{Forge, metric, output};
use forge_tests::gateway::TestGateway;
use forge_tests::wait::{eventually, not_yet};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

/// A code tree with things that must not be packed.
fn code_tree(dir: &Path, script: &str) {
    let files: &[(&str, &str)] = &[
        ("job.py", script),
        ("lib/util.py", "X = 1\n"),
        (".gitignore", "data/\n*.log\n"),
        (".forgeignore", "notes.txt\n"),
        ("notes.txt", "private\n"),
        ("run.log", "old output\n"),
        ("data/big.bin", "ignored by .gitignore\n"),
        (".git/HEAD", "ref: refs/heads/main\n"),
        ("venv/pyvenv.cfg", "home = /usr/bin\n"),
        ("venv/lib/site.py", "x\n"),
        ("envs/other/pyvenv.cfg", "home = /usr/bin\n"),
        ("__pycache__/job.cpython-313.pyc", "bytecode"),
    ];
    for (rel, body) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
    }
}

fn job_yaml(dir: &Path, name: &str, entrypoint: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "name: {name}\nframework: nemo-rl\nentrypoint: {entrypoint}\npools:\n  - name: train\n    nodes: 1\n    gpusPerNode: 1\n"
        ),
    )
    .expect("spec");
    path
}

/// No progress-bar control characters (carriage returns, escape sequences).
fn assert_plain(text: &str) {
    assert!(
        !text.contains('\r') && !text.contains('\u{1b}'),
        "control characters in non-TTY output: {text:?}"
    );
}

/// A one-line error, without a backtrace.
fn assert_one_line_error(stderr: &str) {
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(!stderr.contains("backtrace"), "{stderr}");
}

async fn metrics(gw: &TestGateway) -> String {
    gw.metrics().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_dedupe_and_the_job_commands() {
    let gw = TestGateway::start("h100=2x8", &[]).await;
    let forge = Forge::new(&gw);
    let work = tempfile::tempdir().expect("tmp");
    let code = work.path().join("code");
    code_tree(
        &code,
        "print('hello from forge', flush=True)\nprint('second line', flush=True)\nprint('last line', flush=True)\n",
    );
    let spec = job_yaml(work.path(), "hello", "python3 job.py");
    let (code_dir, spec_path) = (code.to_str().expect("utf-8"), spec.to_str().expect("utf-8"));

    // login: the token on stdin, checked, stored 0600.
    let mut login = forge.command(&["login", &gw.url], true);
    login.stdin(std::process::Stdio::piped());
    let mut child = login.spawn().expect("login");
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(format!("{}\n", gw.token).as_bytes())
            .await
            .expect("token");
    }
    let out = child.wait_with_output().await.expect("login output");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let config = forge.home.path().join("forge/config.yaml");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&config).expect("config").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let who = output(forge.command(&["whoami", "-o", "json"], true))
        .await
        .expect(0)
        .json();
    assert_eq!(who["team"], "team-a");
    assert_eq!(who["role"], "admin");

    // Submit and wait: packed without the ignored files, uploaded, succeeded.
    let first = forge
        .run(&["submit", code_dir, "-f", spec_path, "--wait"])
        .await
        .expect(0);
    assert_plain(&first.stderr);
    // job.py, lib/util.py and the two ignore files; nothing ignored or excluded.
    assert!(first.stderr.contains("4 files"), "{}", first.stderr);
    let id = first.stdout.lines().next().expect("the job id").to_string();
    // `forge submit` sent a new trace context (this gateway exports no traces, so the
    // client's is what the job keeps and its Ray processes get) and named its trace.
    let stored = gw
        .state
        .database
        .jobs
        .get(&id)
        .await
        .expect("store")
        .expect("job");
    let traceparent = stored.trace_parent.expect("the CLI sent a traceparent");
    let trace_id = traceparent.split('-').nth(1).expect("a trace id");
    assert!(
        first.stderr.contains(&format!("trace {trace_id}")),
        "{}",
        first.stderr
    );
    let text = metrics(&gw).await;
    let uploaded = metric(&text, "forge_upload_bytes_total");
    assert!(uploaded > 0.0, "{text}");
    assert_eq!(
        metric(&text, r#"forge_capsule_lookups_total{result="absent"}"#),
        1.0
    );

    // The same directory again: nothing is uploaded.
    let second = forge
        .run(&["submit", code_dir, "-f", spec_path, "--wait"])
        .await
        .expect(0);
    assert!(
        second.stderr.contains("nothing to upload"),
        "{}",
        second.stderr
    );
    let text = metrics(&gw).await;
    assert_eq!(
        metric(&text, "forge_upload_bytes_total"),
        uploaded,
        "the second submit uploaded"
    );
    assert_eq!(
        metric(&text, r#"forge_capsule_lookups_total{result="present"}"#),
        1.0
    );
    assert_eq!(
        metric(&text, r#"forge_upload_sessions_total{outcome="started"}"#),
        1.0
    );

    // Logs, whole and the tail.
    let logs = forge.run(&["logs", &id]).await.expect(0);
    assert!(
        logs.stdout
            .contains("hello from forge\nsecond line\nlast line\n"),
        "{}",
        logs.stdout
    );
    // The driver log is `ray job submit`'s output around the entrypoint's.
    // From a byte offset (what a reconnecting follower asks for): exactly the rest.
    let half = logs.stdout.len() / 2;
    let rest = forge
        .run(&["logs", &id, "--offset", &half.to_string()])
        .await
        .expect(0);
    assert_eq!(rest.stdout, logs.stdout[half..]);
    let tail = forge.run(&["logs", &id, "--tail", "2"]).await.expect(0);
    let last_two: Vec<&str> = logs.stdout.lines().rev().take(2).collect();
    assert_eq!(tail.stdout, format!("{}\n{}\n", last_two[1], last_two[0]));

    // Every pod's log: listed, then one picked by name (the head's Ray container).
    let pods = forge
        .run(&["logs", &id, "--pods", "-o", "json"])
        .await
        .expect(0)
        .json();
    let head = pods
        .as_array()
        .and_then(|l| l.iter().find(|p| p["role"] == "head"))
        .unwrap_or_else(|| panic!("a head pod in {pods:#}"));
    let (pod, container) = (
        head["pod"].as_str().expect("pod"),
        head["container"].as_str().expect("container"),
    );
    let table = forge.run(&["logs", &id, "--pods"]).await.expect(0);
    assert!(
        table.stdout.starts_with("POD") && table.stdout.contains(pod),
        "{}",
        table.stdout
    );
    let by_name = forge
        .run(&["logs", &id, "--pod", pod, "--container", container])
        .await
        .expect(0);
    let head_log = forge.run(&["logs", &id, "--pod", "head"]).await.expect(0);
    assert_eq!(
        by_name.stdout, head_log.stdout,
        "the head pod by name is the head's log"
    );
    let refused = forge
        .run(&["logs", &id, "--pod", "head", "--container", "ray-head"])
        .await
        .expect(2);
    assert!(refused.stderr.contains("--container"), "{}", refused.stderr);
    let bad = forge
        .run(&["logs", &id, "--pod", "Bad_Name"])
        .await
        .expect(2);
    assert!(bad.stderr.contains("--pod"), "{}", bad.stderr);

    // Status, jobs, capacity as JSON; the table by default.
    let status = forge
        .run(&["status", &id, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(status["state"], "succeeded");
    assert!(
        status["history"].as_array().is_some_and(|h| h.len() >= 4),
        "{status:#}"
    );
    let yaml = forge.run(&["status", &id, "-o", "yaml"]).await.expect(0);
    assert!(yaml.stdout.contains("state: succeeded"), "{}", yaml.stdout);
    let jobs = forge.run(&["jobs", "-o", "json"]).await.expect(0).json();
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert!(ids.contains(&id.as_str()) && ids.len() == 2, "{jobs:#}");
    let table = forge.run(&["jobs"]).await.expect(0);
    assert!(table.stdout.starts_with("ID"), "{}", table.stdout);
    assert_plain(&table.stdout);
    let capacity = forge
        .run(&["capacity", "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(capacity["series"][0]["series"], "h100");
    assert_eq!(capacity["series"][0]["total"], 16);

    // Review: admitted (0), and rejected by policy (6) with the plugin's code.
    let review = forge
        .run(&["review", "-f", spec_path, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(review["decision"]["kind"], "admit");
    assert_eq!(review["trace"].as_array().map(Vec::len), Some(3));
    let bad = work.path().join("bad.yaml");
    std::fs::write(&bad, "name: bad\nframework: nemo-rl\nentrypoint: python3 job.py\npools:\n  - name: train\n    nodes: 1\n    gpusPerNode: 1\n    series: a100\n").expect("bad spec");
    let rejected = forge
        .run(&["review", "-f", bad.to_str().expect("utf-8")])
        .await
        .expect(6);
    assert!(rejected.stdout.contains("series."), "{}", rejected.stdout);
    let refused = forge
        .run(&["submit", code_dir, "-f", bad.to_str().expect("utf-8")])
        .await
        .expect(6);
    assert_one_line_error(&refused.stderr);
    assert!(
        !refused.stderr.contains("packing"),
        "refused before packing: {}",
        refused.stderr
    );

    // Cancel a long job: 0, then the state; cancelling again is refused (409 → 1).
    let long = job_yaml(
        work.path(),
        "long",
        "python3 -c 'import time; time.sleep(60)'",
    );
    let sub = forge
        .run(&["submit", code_dir, "-f", long.to_str().expect("utf-8")])
        .await
        .expect(0);
    let long_id = sub.stdout.lines().next().expect("id").to_string();
    let cancelled = forge
        .run(&["cancel", &long_id, "-o", "json"])
        .await
        .expect(0)
        .json();
    assert_eq!(cancelled["state"], "cancelled");
    let again = forge.run(&["cancel", &long_id]).await.expect(1);
    assert_one_line_error(&again.stderr);
    let waited = forge.run(&["status", &long_id, "-w"]).await.expect(4);
    assert!(waited.stderr.contains("cancelled"), "{}", waited.stderr);

    // Errors: not found (7), a refused token (9), no login (9), one line each.
    let missing = forge.run(&["status", "no-such-job"]).await.expect(7);
    assert_one_line_error(&missing.stderr);
    let mut wrong = forge.command(&["jobs"], false);
    wrong.env("FORGE_TOKEN", "not-a-token");
    let wrong = output(wrong).await.expect(9);
    assert_one_line_error(&wrong.stderr);
    let stranger = Forge::new(&gw);
    let nobody = output(stranger.command(&["jobs"], true)).await.expect(9);
    assert!(nobody.stderr.contains("forge login"), "{}", nobody.stderr);

    // Help is help, with examples; completions.
    let help = forge.run(&["submit", "--help"]).await.expect(0);
    assert!(help.stdout.contains("Examples:"), "{}", help.stdout);
    let build_help = forge.run(&["plugin", "build", "--help"]).await.expect(0);
    assert!(
        build_help.stdout.contains("--lang") && build_help.stdout.contains("Examples:"),
        "{}",
        build_help.stdout
    );
    let completions = forge.run(&["completions", "bash"]).await.expect(0);
    assert!(completions.stdout.contains("_forge"), "completions");
    let usage = forge.run(&["submit"]).await.expect(2);
    assert!(usage.stderr.contains("--file"), "{}", usage.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_streams_states_then_the_log_and_ctrl_c_detaches() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let forge = Forge::new(&gw);
    let work = tempfile::tempdir().expect("tmp");
    let code = work.path().join("code");
    let lines: String = (1..=20)
        .map(|i| format!("print('line {i}', flush=True); time.sleep(0.05)\n"))
        .collect();
    code_tree(&code, &format!("import time\n{lines}"));
    let spec = job_yaml(work.path(), "follow", "python3 job.py");
    // `forge jobs -w -o json` watches the team's jobs meanwhile (one JSON per change).
    let mut watcher = forge
        .command(&["jobs", "-w", "-o", "json"], false)
        .spawn()
        .expect("jobs -w");
    let run = forge
        .run(&[
            "submit",
            code.to_str().expect("utf-8"),
            "-f",
            spec.to_str().expect("utf-8"),
            "--follow",
        ])
        .await
        .expect(0);
    let expected: Vec<String> = (1..=20).map(|i| format!("line {i}")).collect();
    let (id, followed) = run.stdout.split_once('\n').expect("the id, then the log");
    let printed: Vec<&str> = followed
        .lines()
        .filter(|l| l.starts_with("line "))
        .collect();
    assert_eq!(printed, expected, "every line once, in order");
    // Exactly the archived log: nothing lost, nothing repeated.
    let archived = forge.run(&["logs", id]).await.expect(0);
    assert_eq!(
        followed, archived.stdout,
        "what --follow printed is the whole driver log"
    );
    for state in ["queued", "running", "succeeded"] {
        assert!(run.stderr.contains(state), "{state} in {}", run.stderr);
    }
    let mut changes =
        tokio::io::BufReader::new(watcher.stdout.take().expect("watcher stdout")).lines();
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = changes.next_line().await.expect("read") {
            let Ok(change) = serde_json::from_str::<Value>(&line) else {
                continue; // the listing printed first
            };
            if change["data"]["jobId"] == id && change["data"]["to"] == "succeeded" {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "jobs -w saw the job succeed");
    watcher.start_kill().expect("stop the watcher");
    assert_plain(&run.stderr);

    // A failing job: --wait exits 3.
    let fail = job_yaml(work.path(), "fails", "python3 -c 'raise SystemExit(2)'");
    let failed = forge
        .run(&[
            "submit",
            code.to_str().expect("utf-8"),
            "-f",
            fail.to_str().expect("utf-8"),
            "--wait",
        ])
        .await
        .expect(3);
    assert!(
        failed.stderr.trim_end().ends_with("failed") || failed.stderr.contains(" failed"),
        "{}",
        failed.stderr
    );

    // Ctrl-C while following detaches (130); the job keeps running (far longer than
    // the test takes on a loaded machine: it is cancelled below).
    let long = job_yaml(
        work.path(),
        "long",
        "python3 -c 'import time; print(\"started\", flush=True); time.sleep(900)'",
    );
    let child = forge
        .command(
            &[
                "submit",
                code.to_str().expect("utf-8"),
                "-f",
                long.to_str().expect("utf-8"),
                "--follow",
            ],
            false,
        )
        .spawn()
        .expect("spawn");
    let job_id = eventually("the long job to run", Duration::from_secs(180), || async {
        let page: Value = gw
            .get("/v1/jobs?state=running")
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("json");
        page["jobs"][0]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| not_yet(page))
    })
    .await;
    let pid = child.id().expect("pid").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = child.wait_with_output().await.expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("detached"), "{stderr}");
    let job: Value = gw
        .get(&format!("/v1/jobs/{job_id}"))
        .send()
        .await
        .expect("job")
        .json()
        .await
        .expect("json");
    assert_eq!(job["state"], "running", "Ctrl-C never cancels: {job:#}");
    // logs -f from another terminal picks the log up; cancel ends it with exit 4.
    let follower = forge
        .command(&["logs", &job_id, "-f"], false)
        .spawn()
        .expect("logs -f");
    forge.run(&["cancel", &job_id]).await.expect(0);
    let out = follower.wait_with_output().await.expect("logs output");
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    // What it streamed is the job's whole archived log, down to the submitter's last
    // line (written once the Ray job stopped: the archive waits for it).
    let archived = forge.run(&["logs", &job_id]).await.expect(0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), archived.stdout);
    assert!(
        archived.stdout.trim_end().ends_with("was stopped"),
        "{}",
        archived.stdout
    );
}
