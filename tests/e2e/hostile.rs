//! Hostile input against the real gateway process (issue 14): `forge-gateway dev` runs
//! as a child process and is sent the attacks the issue measured — a label bomb over
//! and under the document limit, deep nesting, a YAML alias bomb, a spec part larger
//! than a spec, a tar GNU long-name bomb, a zip whose end record declares fifty
//! million entries, and plugin uploads the host must refuse before compiling (a core
//! module, a WASI import, another world, 300 000 functions, five memories) followed by
//! a flood of failed uploads, which the team's failed-upload budget stops with 429.
//! Each must get a small 4xx with a clear code; the process's peak
//! RSS (`VmHWM` in `/proc/<pid>/status`, which only grows) may grow by at most
//! 256 MiB over its warmed-up baseline; and a legitimate team keeps being served while
//! the attacks run; and nothing stored before the attacks (a job, a plugin) is lost.
//! The table (attack, answer, peak RSS growth, time) is printed.
//!
//! The binary is taken from the target directory (build it first:
//! `cargo build -p forge-gateway --bins`, as for the crash tests).

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use forge_tests::cli::binary;
use forge_tests::plugins;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Peak RSS growth allowed per attack.
const MAX_GROWTH_KIB: u64 = 256 * 1024;
/// Largest error answer accepted as "small".
const MAX_ANSWER_BYTES: usize = 16 * 1024;
/// The dev gateway's failed-upload budget in this test.
const FAILED_UPLOADS_PER_HOUR: u32 = 8;

/// `forge-gateway dev` as a child process (killed on drop).
struct DevGateway {
    child: tokio::process::Child,
    url: String,
    token: String,
    _dir: tempfile::TempDir,
}

impl DevGateway {
    async fn start() -> DevGateway {
        for name in ["pool-series", "team-quota", "rwo-guard"] {
            plugins::component(name);
        }
        let components = plugins::workspace_root().join("target/plugins/components");
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = tokio::process::Command::new(binary("forge-gateway"))
            .args(["dev", "--nodes", "h100=1x8", "--sim", "process"])
            .arg("--plugins-dir")
            .arg(&components)
            .env("FORGE_LISTEN", "127.0.0.1:0")
            .env("FORGE_DATA_DIR", dir.path().join("data"))
            // The emulator's scratch root goes under the test's directory: a gateway
            // killed on drop leaves nothing in the system's temporary directory.
            .env("TMPDIR", dir.path())
            .env("RUST_LOG", "warn")
            .env(
                "FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR",
                FAILED_UPLOADS_PER_HOUR.to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.path().join("gateway.log")).expect("log"))
            .kill_on_drop(true)
            .spawn()
            .expect("spawn forge-gateway dev");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (mut url, mut token) = (None, None);
        let read = async {
            while let Some(line) = lines.next_line().await.expect("stdout line") {
                if let Some(u) = line.split("listening on ").nth(1) {
                    url = Some(u.trim().to_string());
                }
                if let Some(t) = line.trim().strip_prefix("token:") {
                    token = Some(t.trim().to_string());
                }
                if url.is_some() && token.is_some() {
                    break;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(120), read)
            .await
            .unwrap_or_else(|_| {
                let log = std::fs::read_to_string(dir.path().join("gateway.log"));
                panic!("the dev gateway did not start: {log:?}")
            });
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let (Some(url), Some(token)) = (url, token) else {
            let log = std::fs::read_to_string(dir.path().join("gateway.log"));
            panic!("the dev gateway ended before it printed its URL and token: {log:?}")
        };
        DevGateway {
            child,
            url,
            token,
            _dir: dir,
        }
    }

    /// The process's peak resident set so far, KiB.
    fn peak_kib(&self) -> u64 {
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM")
    }
}

fn good_spec() -> Value {
    json!({
        "name": "legit",
        "framework": "nemo-rl",
        "entrypoint": "python3 job.py",
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 1}],
        "labels": {"project": "rl"}
    })
}

/// A spec whose `labels` hold `n` invalid keys.
fn label_bomb(n: usize) -> String {
    let mut spec = good_spec();
    spec.as_object_mut().expect("object").remove("labels");
    let mut s = spec.to_string();
    s.pop();
    s.push_str(",\"labels\":{");
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&format!("\"bad key {i}!\":\"v\""));
    }
    s.push_str("}}");
    s
}

/// A `.tar.gz` whose first entry is a GNU long name of `size` barely compressible
/// bytes.
fn long_name_tar_gz(size: usize) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..13].copy_from_slice(b"././@LongLink");
    header[100..108].copy_from_slice(b"0000644\0");
    header[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    header[156] = b'L';
    header[257..265].copy_from_slice(b"ustar  \0");
    header[148..156].fill(b' ');
    let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&header).expect("gz");
    let mut x: u32 = 0x1234_5678;
    let mut chunk = vec![0u8; 1 << 16];
    for _ in 0..size / chunk.len() {
        for b in chunk.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = b'a' + (x % 26) as u8;
        }
        gz.write_all(&chunk).expect("gz");
    }
    gz.write_all(&[0u8; 1024]).expect("gz");
    gz.finish().expect("gz")
}

/// A plugin upload of `component` as `name` version 1.0.0 (the caller's team).
fn plugin_upload(name: &str, component: Vec<u8>) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new()
        .text("name", name.to_string())
        .text("version", "1.0.0")
        .part(
            "component",
            reqwest::multipart::Part::bytes(component).file_name(format!("{name}.wasm")),
        )
}

/// A component whose one core module defines `n` empty functions.
fn many_functions(n: usize) -> Vec<u8> {
    let mut text = String::with_capacity(n * 7 + 64);
    text.push_str("(component (core module ");
    for _ in 0..n {
        text.push_str("(func)");
    }
    text.push_str("))");
    wat::parse_str(&text).expect("wat")
}

fn submission(spec: String, code: Vec<u8>, file_name: &str) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new()
        .part(
            "spec",
            reqwest::multipart::Part::text(spec)
                .mime_str("application/json")
                .expect("mime"),
        )
        .part(
            "code",
            reqwest::multipart::Part::bytes(code).file_name(file_name.to_string()),
        )
}

/// One attack: a request, and the status and code it must be answered with.
struct Attack {
    name: &'static str,
    request: reqwest::RequestBuilder,
    status: u16,
    code: &'static str,
    check: fn(&Value),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_requests_get_small_answers_and_bounded_memory() {
    let gw = Arc::new(DevGateway::start().await);
    let http = reqwest::Client::new();
    let review = format!("{}/v1/admission/review", gw.url);
    let jobs = format!("{}/v1/jobs", gw.url);
    let legit = {
        let http = http.clone();
        let review = review.clone();
        let token = gw.token.clone();
        move || {
            http.post(&review)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(good_spec().to_string())
        }
    };

    // Warm-up: the first review loads the policy chain's instances.
    for _ in 0..3 {
        let r = legit().send().await.expect("legit");
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    }
    // What is stored before the attacks, and must still be there after them.
    let plugins_url = format!("{}/v1/plugins", gw.url);
    let r = http
        .post(&plugins_url)
        .bearer_auth(&gw.token)
        .multipart(plugin_upload("kept", plugins::component("rwo-guard")))
        .send()
        .await
        .expect("upload");
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap_or_default());
    let r = http
        .post(&jobs)
        .bearer_auth(&gw.token)
        .multipart(submission(
            good_spec().to_string(),
            forge_tests::jobs::zip_of(&[("job.py", "print('kept')")]),
            "code.zip",
        ))
        .send()
        .await
        .expect("submit");
    let kept: Value = r.json().await.expect("job");
    let kept_job = kept["id"].as_str().expect("a job id").to_string();

    // A legitimate team, served throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let background = {
        let (stop, served, legit) = (stop.clone(), served.clone(), legit.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let r = legit().send().await.expect("legit request");
                assert_eq!(r.status(), 200, "a legitimate review failed");
                served.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let auth = |r: reqwest::RequestBuilder| r.bearer_auth(&gw.token);
    let upload = |name: &str, component: Vec<u8>| {
        auth(http.post(&plugins_url)).multipart(plugin_upload(name, component))
    };
    let nested = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let mut yaml = String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
    for (i, prev) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
        let name = (b'b' + i as u8) as char;
        yaml.push_str(&format!(
            "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
        ));
    }
    let attacks = vec![
        Attack {
            name: "label bomb, 15 MB, 1M keys (review)",
            request: auth(http.post(&review))
                .header("content-type", "application/json")
                .body(label_bomb(1_000_000)),
            status: 413,
            code: "body-too-large",
            check: |_| {},
        },
        Attack {
            name: "label bomb under the limit, 0.95 MB, 45k keys",
            request: auth(http.post(&review))
                .header("content-type", "application/json")
                .body(label_bomb(45_000)),
            status: 422,
            code: "invalid-spec",
            check: |b| {
                let d = &b["error"]["details"];
                assert_eq!(d["fields"].as_array().map(Vec::len), Some(20), "{b}");
                assert_eq!(d["total"], 65, "{b}");
                assert_eq!(d["omitted"], 45, "{b}");
            },
        },
        Attack {
            name: "JSON nested 200 000 deep",
            request: auth(http.post(&review))
                .header("content-type", "application/json")
                .body(nested),
            status: 422,
            code: "invalid-spec",
            check: |b| assert_eq!(b["error"]["details"]["fields"][0]["code"], "syntax", "{b}"),
        },
        Attack {
            name: "YAML alias bomb (9^9 expansions)",
            request: auth(http.post(&review))
                .header("content-type", "application/yaml")
                .body(yaml),
            status: 422,
            code: "invalid-spec",
            check: |b| assert_eq!(b["error"]["details"]["fields"][0]["code"], "syntax", "{b}"),
        },
        Attack {
            name: "submission spec part of 2.4 MB",
            request: auth(http.post(&jobs)).multipart(submission(
                label_bomb(110_000),
                vec![0; 16],
                "code.zip",
            )),
            status: 413,
            code: "body-too-large",
            check: |b| assert_eq!(b["error"]["details"]["field"], "spec", "{b}"),
        },
        Attack {
            name: "tar.gz GNU long name of 16 MiB",
            request: auth(http.post(&jobs)).multipart(submission(
                good_spec().to_string(),
                long_name_tar_gz(16 << 20),
                "code.tar.gz",
            )),
            status: 400,
            code: "capsule.header_too_large",
            check: |_| {},
        },
        Attack {
            name: "zip declaring 50M entries (Zip64)",
            request: auth(http.post(&jobs)).multipart(submission(
                good_spec().to_string(),
                forge_testkit::archives::zip64_entry_bomb(50_000_000),
                "code.zip",
            )),
            status: 400,
            code: "capsule.too_many_files",
            check: |_| {},
        },
        Attack {
            name: "plugin: a core module, not a component",
            request: upload("bad-a", plugins::wat_fixture("plugins/core-module.wat")),
            status: 422,
            code: "plugin.not-a-component",
            check: |_| {},
        },
        Attack {
            name: "plugin importing WASI",
            request: upload("bad-b", plugins::wat_fixture("plugins/imports-wasi.wat")),
            status: 422,
            code: "plugin.forbidden-import",
            check: |_| {},
        },
        Attack {
            name: "plugin of another world",
            request: upload("bad-c", plugins::wat_fixture("plugins/other-world.wat")),
            status: 422,
            code: "plugin.wrong-world",
            check: |_| {},
        },
        Attack {
            name: "plugin with 300 000 functions",
            request: upload("bad-d", many_functions(300_000)),
            status: 422,
            code: "plugin.too-complex",
            check: |b| {
                let m = b["error"]["message"].as_str().unwrap_or("");
                assert!(m.contains("functions"), "{b}");
            },
        },
        Attack {
            name: "plugin with 5 memories",
            request: upload(
                "bad-e",
                wat::parse_str(
                    "(component (core module (memory 1) (memory 1) (memory 1) (memory 1) \
                     (memory 1)))",
                )
                .expect("wat"),
            ),
            status: 422,
            code: "plugin.too-complex",
            check: |_| {},
        },
    ];

    let baseline = gw.peak_kib();
    let mut table = vec![format!(
        "| attack | answer | peak RSS growth | time |\n| --- | --- | --- | --- |"
    )];
    for attack in attacks {
        let started = Instant::now();
        let response = attack.request.send().await.expect(attack.name);
        let status = response.status().as_u16();
        let bytes = response.bytes().await.expect("answer");
        let elapsed = started.elapsed();
        let body: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {bytes:?}", attack.name));
        let growth = gw.peak_kib().saturating_sub(baseline);
        table.push(format!(
            "| {} | {status} `{}`, {} bytes | {:.1} MiB | {:.2} s |",
            attack.name,
            body["error"]["code"].as_str().unwrap_or("?"),
            bytes.len(),
            growth as f64 / 1024.0,
            elapsed.as_secs_f64()
        ));
        assert_eq!(status, attack.status, "{}: {body}", attack.name);
        assert_eq!(
            body["error"]["code"], attack.code,
            "{}: {body}",
            attack.name
        );
        assert!(
            bytes.len() <= MAX_ANSWER_BYTES,
            "{}: a {} byte answer",
            attack.name,
            bytes.len()
        );
        (attack.check)(&body);
        assert!(
            growth <= MAX_GROWTH_KIB,
            "{}: peak RSS grew {growth} KiB",
            attack.name
        );
    }

    // A flood of failed uploads: the team's failure budget (8 per hour here, 5 used
    // above) runs out, then its uploads are refused before they are read or compiled.
    let started = Instant::now();
    let mut answers = Vec::new();
    for i in 0..6 {
        let r = upload(&format!("flood-{i}"), b"\0asm\x0d\0\x01\0junk".to_vec())
            .send()
            .await
            .expect("flood");
        let retry_after = r.headers().get("retry-after").cloned();
        let status = r.status().as_u16();
        let body: Value = r.json().await.expect("JSON");
        answers.push((status, body, retry_after));
    }
    let growth = gw.peak_kib().saturating_sub(baseline);
    let statuses: Vec<u16> = answers.iter().map(|a| a.0).collect();
    assert_eq!(statuses, [422, 422, 422, 422, 429, 429], "{answers:?}");
    let (_, refused, retry_after) = &answers[5];
    assert_eq!(refused["error"]["code"], "rate-limited", "{refused}");
    let retry: u64 = retry_after
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=3600).contains(&retry), "Retry-After {retry}");
    table.push(format!(
        "| 6 failed plugin uploads after 5 (budget {FAILED_UPLOADS_PER_HOUR}/h) | 422 ×4, then 429 `rate-limited` (Retry-After {retry}) | {:.1} MiB | {:.2} s |",
        growth as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    ));
    // Refused uploads left nothing in the precompile cache: only accepted plugins'
    // compiled forms (the start-up chain's and the kept one, which is rwo-guard's
    // bytes) are there.
    let accepted: Vec<String> = ["pool-series", "team-quota", "rwo-guard"]
        .iter()
        .map(|p| forge_policy_host::digest_of(&plugins::component(p))[7..].to_string())
        .collect();
    let compiled: Vec<String> = std::fs::read_dir(gw._dir.path().join("data/plugin-cache"))
        .expect("plugin cache")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    assert!(!compiled.is_empty(), "the accepted plugins are cached");
    for name in &compiled {
        assert!(
            accepted.iter().any(|d| name.starts_with(d.as_str())),
            "only accepted plugins are cached, found {name} in {compiled:?}"
        );
    }

    stop.store(true, Ordering::Relaxed);
    background
        .await
        .expect("the legitimate team was served throughout");
    assert!(served.load(Ordering::Relaxed) > 0);
    let r = legit().send().await.expect("legit after");
    assert_eq!(r.status(), 200);
    // Nothing stored before the attacks was lost.
    let r = auth(http.get(format!("{jobs}/{kept_job}")))
        .send()
        .await
        .expect("job");
    assert_eq!(
        r.status(),
        200,
        "the job stored before the attacks is still there"
    );
    let listed: Value = auth(http.get(&plugins_url))
        .send()
        .await
        .expect("plugins")
        .json()
        .await
        .expect("JSON");
    assert!(
        listed.to_string().contains("\"kept\""),
        "the plugin stored before the attacks is still listed: {listed}"
    );
    eprintln!(
        "{}\nbaseline peak RSS {:.1} MiB; {} legitimate reviews served meanwhile",
        table.join("\n"),
        baseline as f64 / 1024.0,
        served.load(Ordering::Relaxed)
    );
}
