//! Every Ray pod's log, end to end through the gateway (dev composition, emulator in
//! process mode): a two-machine job's head and worker logs are listed and readable
//! per pod while it runs and archived per pod when it ends, each with its own lines;
//! a driver log over `FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD` is archived as its tail
//! after the marker line; another team gets 404 on the list and on a pod's log; a
//! crash-looping container is diagnosed as `CrashLoopBackOff`, naming its pod and
//! container and quoting its previous instance's last line.

use std::time::Duration;

use forge_tests::jobs::{JobClient, zip_of};
use forge_tests::policy::{self, ALICE, BOB};
use forge_tests::wait::{eventually, not_yet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// The per-pod bound the tests run with.
const BOUND: u64 = 4096;

fn two_machines(name: &str) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 train.py",
        "pools": [{"name": "train", "nodes": 2, "gpusPerNode": 8}]
    })
}

/// `GET path` as `client`: status and body text.
async fn get_text(client: &JobClient, path: &str) -> (u16, String, Option<String>) {
    let resp = client
        .http
        .get(format!("{}{path}", client.url))
        .bearer_auth(&client.token)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let offset = resp
        .headers()
        .get("x-forge-log-offset")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, resp.text().await.expect("body"), offset)
}

/// The job's Ray pods in the emulator with their IPs, once both have one.
async fn ray_pod_ips(gw: &forge_tests::gateway::TestGateway, id: &str) -> Vec<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(gw.sim.client().expect("client"), "starforge");
    let lp = ListParams::default().labels(&format!("forge.dev/job-id={id}"));
    eventually(
        "both Ray pods to have an IP",
        Duration::from_secs(60),
        || async {
            let list = match pods.list(&lp).await {
                Ok(l) => l,
                Err(e) => return Err(not_yet(e.to_string())),
            };
            let ips: Vec<(String, String)> = list
                .items
                .iter()
                .filter_map(|p| {
                    let ip = p.status.as_ref()?.pod_ip.clone()?;
                    Some((p.metadata.name.clone()?, ip))
                })
                .collect();
            if ips.len() == 2 {
                Ok(ips)
            } else {
                Err(not_yet(format!("{ips:?}")))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ray_pod_log_is_listed_archived_bounded_and_kept_from_other_teams() {
    let bound = BOUND.to_string();
    let gw = policy::gateway(
        "h100=2x8",
        &[("FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD", bound.as_str())],
    )
    .await;
    let alice = gw.client(ALICE);
    let bob = gw.client(BOB);
    let release = tempfile::tempdir().expect("dir");
    let go = release.path().join("go");
    // The driver prints ~20 KB (five times the bound), then waits for the test to
    // have looked at the live logs.
    let script = format!(
        "import os, time\n\
         for i in range(2000):\n    print(f'row {{i:04}} of the driver', flush=True)\n\
         while not os.path.exists({go:?}):\n    time.sleep(0.1)\n\
         print('forge sample: done', flush=True)\n",
        go = go.display().to_string()
    );
    let id = alice
        .submit_ok(&two_machines("pods"), zip_of(&[("train.py", &script)]))
        .await;

    // While it runs: the live pods are listed and each pod's log is its own.
    let ips = ray_pod_ips(&gw, &id).await;
    let live = eventually("the live pod list", Duration::from_secs(60), || async {
        let (status, list) = alice
            .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs/pods"))
            .await;
        let roles: Vec<&str> = list
            .as_array()
            .map(|l| l.iter().filter_map(|p| p["role"].as_str()).collect())
            .unwrap_or_default();
        if status == 200 && roles.contains(&"head") && roles.contains(&"worker") {
            Ok(list)
        } else {
            Err(not_yet(format!("{status} {list}")))
        }
    })
    .await;
    assert!(
        live.as_array()
            .expect("list")
            .iter()
            .all(|p| p["archived"] == false && p["bytes"].is_null()),
        "{live:#}"
    );
    for (pod, ip) in &ips {
        let line = format!("Local node IP: {ip}\n");
        let text = eventually("the live pod log", Duration::from_secs(30), || async {
            let (status, text, _) =
                get_text(&alice, &format!("/v1/jobs/{id}/logs?pod={pod}")).await;
            if status == 200 && text.contains(&line) {
                Ok(text)
            } else {
                Err(not_yet(format!("{status} {text}")))
            }
        })
        .await;
        for (other, other_ip) in &ips {
            if other != pod {
                assert!(
                    !text.contains(&format!("Local node IP: {other_ip}\n")),
                    "{pod} shows {other}'s log"
                );
            }
        }
    }
    std::fs::write(&go, b"").expect("release the driver");
    let done = alice
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);

    // Archived: every pod listed, each log archived under its own name.
    let list = eventually("the archived pod list", Duration::from_secs(60), || async {
        let (status, list) = alice
            .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs/pods"))
            .await;
        let all_archived = list
            .as_array()
            .is_some_and(|l| !l.is_empty() && l.iter().all(|p| p["archived"] == true));
        if status == 200 && all_archived {
            Ok(list)
        } else {
            Err(not_yet(format!("{status} {list}")))
        }
    })
    .await;
    let entries = list.as_array().expect("list");
    let roles: Vec<&str> = entries.iter().filter_map(|p| p["role"].as_str()).collect();
    assert_eq!(roles, ["head", "worker", "submitter"], "{list:#}");
    for (pod, ip) in &ips {
        let entry = entries
            .iter()
            .find(|p| p["pod"] == pod.as_str())
            .unwrap_or_else(|| panic!("{pod} listed: {list:#}"));
        assert_eq!(entry["truncated"], false, "{entry}");
        let (status, text, _) = get_text(&alice, &format!("/v1/jobs/{id}/logs?pod={pod}")).await;
        assert_eq!(status, 200, "{text}");
        assert!(
            text.contains(&format!("Local node IP: {ip}\n")),
            "{pod}'s archive: {text}"
        );
        assert_eq!(entry["bytes"].as_u64(), Some(text.len() as u64), "{entry}");
        for (other, other_ip) in &ips {
            if other != pod {
                assert!(
                    !text.contains(&format!("Local node IP: {other_ip}\n")),
                    "{pod} archived {other}'s log"
                );
            }
        }
    }

    // The driver's log was five times the bound: its tail after the marker.
    let submitter = entries
        .iter()
        .find(|p| p["role"] == "submitter")
        .expect("submitter");
    assert_eq!(submitter["truncated"], true, "{submitter}");
    assert_eq!(submitter["container"], "ray-job-submitter");
    let (status, driver, _) = get_text(&alice, &format!("/v1/jobs/{id}/logs")).await;
    assert_eq!(status, 200, "{driver}");
    let (marker, tail) = driver.split_once('\n').expect("a marker line");
    assert!(
        marker.starts_with("[forge: the first ") && marker.contains("bytes of this log were cut"),
        "{marker}"
    );
    assert_eq!(
        marker,
        format!(
            "[forge: the first {} bytes of this log were cut; the archive keeps its last {BOUND} bytes at most (FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD)]",
            submitter["cutBytes"]
        )
    );
    assert!(tail.len() as u64 <= BOUND, "{} bytes kept", tail.len());
    assert!(tail.len() as u64 > BOUND - 100, "{} bytes kept", tail.len());
    assert!(!driver.contains("row 0000 "), "the head of the log is cut");
    assert!(
        tail.contains("row 1999 of the driver\nforge sample: done\n"),
        "{tail}"
    );
    assert!(
        tail.starts_with("row "),
        "the tail starts at a whole line: {tail}"
    );
    assert!(
        tail.lines().next_back().is_some_and(
            |l| l.ends_with(&format!("Job '{id}' succeeded")) || l.contains("succeeded")
        ),
        "the submitter's last line is kept: {tail}"
    );
    let (status, by_pod, _) = get_text(
        &alice,
        &format!(
            "/v1/jobs/{id}/logs?pod={}",
            submitter["pod"].as_str().expect("pod")
        ),
    )
    .await;
    assert_eq!(
        (status, &by_pod),
        (200, &driver),
        "the driver is the submitter pod"
    );
    // The last lines of the archive, read backwards from storage.
    let (status, last, offset) = get_text(&alice, &format!("/v1/jobs/{id}/logs?tail=3")).await;
    assert_eq!(status, 200);
    assert!(
        last.starts_with("row 1999 of the driver\nforge sample: done\n")
            && last.lines().count() == 3,
        "{last}"
    );
    assert!(driver.ends_with(&last));
    assert_eq!(offset, Some((driver.len() - last.len()).to_string()));
    let at = driver.find("forge sample: done").expect("done line");
    let (status, rest, offset) = get_text(&alice, &format!("/v1/jobs/{id}/logs?offset={at}")).await;
    assert_eq!((status, rest.as_str()), (200, &driver[at..]));
    assert_eq!(offset, Some(at.to_string()));

    // Another team sees none of it; a pod that is not the job's is not found.
    let head = entries[0]["pod"].as_str().expect("head pod");
    let (status, body) = bob
        .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/logs/pods"))
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body, _) = get_text(&bob, &format!("/v1/jobs/{id}/logs?pod={head}")).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.contains("Local node IP"), "{body}");
    let (status, body, _) =
        get_text(&alice, &format!("/v1/jobs/{id}/logs?pod=not-a-pod-of-it")).await;
    assert_eq!(status, 404, "{body}");
    let (status, body, _) =
        get_text(&alice, &format!("/v1/jobs/{id}/logs?pod={head}&name=head")).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_container_is_named_with_its_last_line() {
    let gw = policy::gateway("h100=1x8", &[]).await;
    let alice = gw.client(ALICE);
    // A job holding the only machine, so the next one waits in the queue.
    let blocker = alice
        .submit_ok(
            &json!({"name": "blocker", "framework": "nemo-rl", "entrypoint": "python3 train.py",
                "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]}),
            zip_of(&[("train.py", "import time\ntime.sleep(600)\n")]),
        )
        .await;
    alice.wait_running(&blocker, Duration::from_secs(60)).await;
    let id = alice
        .submit_ok(
            &json!({"name": "crasher", "framework": "nemo-rl", "entrypoint": "python3 train.py",
                "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]}),
            zip_of(&[("train.py", "print('never runs')\n")]),
        )
        .await;
    let job = alice.job(&id).await;
    assert_eq!(job["state"], "queued", "{job:#}");
    // Its stored capsule goes bad while it waits: the init container that fetches
    // and verifies it fails at every start.
    let digest = job["capsuleSha256"].as_str().expect("digest").to_string();
    let capsule = gw
        .state
        .config
        .gateway
        .data_dir
        .join("objects/capsules")
        .join(format!("{digest}.zip"));
    assert!(capsule.is_file(), "{}", capsule.display());
    std::fs::write(&capsule, b"not the capsule").expect("corrupt the capsule");
    let (status, body) = alice
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{blocker}"))
        .await;
    assert_eq!(status, 200, "{body}");

    let pending = eventually(
        "a CrashLoopBackOff reason",
        Duration::from_secs(90),
        || async {
            let (status, d) = alice
                .call(reqwest::Method::GET, &format!("/v1/jobs/{id}/events"))
                .await;
            let p = &d["pending"];
            if status == 200 && p["code"] == "CrashLoopBackOff" && p["lastLines"].is_array() {
                Ok(p.clone())
            } else {
                Err(not_yet(format!("{status} {d}")))
            }
        },
    )
    .await;
    assert_eq!(pending["container"], "forge-capsule-fetch", "{pending:#}");
    assert!(
        pending["object"]
            .as_str()
            .is_some_and(|o| o.starts_with("Pod/")),
        "{pending:#}"
    );
    let expected = format!("capsule sha256 mismatch: expected {digest} got ");
    let lines = pending["lastLines"].as_array().expect("lines");
    assert!(!lines.is_empty() && lines.len() <= 10, "{pending:#}");
    assert!(
        lines
            .last()
            .and_then(Value::as_str)
            .is_some_and(|l| l.starts_with(&expected)),
        "{pending:#}"
    );
    let message = pending["message"].as_str().expect("message");
    assert!(
        message.contains("forge-capsule-fetch") && message.contains(&expected),
        "{message}"
    );
    assert!(message.contains("exited with code 1"), "{message}");
    println!("crash loop: {message}");
    let (status, _) = alice
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
        .await;
    assert_eq!(status, 200);
}
