//! Capsule links end to end (dev composition, emulator in process mode): a job's
//! RayJob carries a link to the gateway as the fallback of its init container's
//! store URL (a pod recreated after that URL expired fetches through it); the link,
//! fetched without any token, redirects to the capsule's bytes while the job runs; a
//! signature altered or moved to another job is 403 `bad-signature`; once the job has
//! ended the link is 410 `job-ended`. (The script's fallback itself is tested in
//! `forge-capsule`'s `init_container` tests.)

use std::time::Duration;

use forge_tests::gateway::TestGateway;
use forge_tests::jobs::{one_gpu_spec, rayjobs, zip_of};
use forge_tests::wait::{eventually, not_yet};
use serde_json::Value;
use sha2::Digest as _;

/// The value of the init container's `name` variable in a RayJob manifest's head.
fn init_env(manifest: &Value, name: &str) -> Option<String> {
    manifest["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["initContainers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
}

/// The capsule link in a RayJob manifest (the init container's fallback).
fn link_in(manifest: &Value, base: &str) -> Option<String> {
    let text = manifest.to_string();
    let start = text.find(&format!("{base}/v1/job-capsules/"))?;
    let rest = &text[start..];
    let end = rest.find(['\'', '"', ' ', '\\'])?;
    Some(rest[..end].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_capsule_link_serves_its_code_while_it_runs_and_never_after() {
    let gw = TestGateway::start("h100=1x8", &[]).await;
    let client = gw.client(&gw.token);
    let id = client
        .submit_ok(
            &one_gpu_spec("linked", "python3 train.py"),
            zip_of(&[(
                "train.py",
                "print('linked code ran', flush=True)\nimport time\ntime.sleep(600)\n",
            )]),
        )
        .await;
    let digest = client.job(&id).await["capsuleSha256"]
        .as_str()
        .expect("digest")
        .to_string();
    let api = rayjobs(
        gw.sim.client().expect("client"),
        &gw.state.config.k8s.namespace,
    );
    let base = gw.url.trim_end_matches('/').to_string();
    let link = eventually(
        "the RayJob and its capsule link",
        Duration::from_secs(60),
        || async {
            let list = api
                .list(&Default::default())
                .await
                .map_err(|e| not_yet(e.to_string()))?;
            list.items
                .iter()
                .find(|o| o.metadata.name.as_deref().is_some_and(|n| n.contains(&id)))
                .and_then(|o| link_in(&serde_json::to_value(o).expect("json"), &base))
                .ok_or_else(|| not_yet(list.items.len()))
        },
    )
    .await;
    assert!(
        link.starts_with(&format!("{base}/v1/job-capsules/{id}/{digest}.zip?sig=")),
        "{link}"
    );
    let rj = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .find(|o| o.metadata.name.as_deref().is_some_and(|n| n.contains(&id)))
        .expect("the RayJob");
    let manifest = serde_json::to_value(&rj).expect("json");
    assert_eq!(
        init_env(&manifest, "FORGE_CAPSULE_FALLBACK_URL").as_deref(),
        Some(link.as_str()),
        "the link is the init container's fallback"
    );
    let first = init_env(&manifest, "FORGE_CAPSULE_URL").expect("the store URL");
    assert!(
        !first.contains("/v1/job-capsules/"),
        "pods fetch from the store first: {first}"
    );
    // The job's pods got its code.
    eventually(
        "the driver to run the code",
        Duration::from_secs(90),
        || async {
            let (status, log) = client.logs(&id).await;
            if status == 200 && log.contains("linked code ran") {
                Ok(())
            } else {
                Err(not_yet((status, log)))
            }
        },
    )
    .await;

    // No token: the signature authorizes it. A redirect to the bytes.
    let raw = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let resp = raw.get(&link).send().await.expect("fetch the link");
    assert_eq!(resp.status().as_u16(), 302, "{:?}", resp.text().await);
    let location = resp.headers()["location"]
        .to_str()
        .expect("location")
        .to_string();
    let bytes = reqwest::get(&location)
        .await
        .expect("follow")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&bytes)),
        digest,
        "the capsule's bytes"
    );

    // An altered signature, or this job's signature on another job: 403.
    let mut altered = link.clone();
    let last = altered.pop().expect("a signature");
    altered.push(if last == '0' { '1' } else { '0' });
    let other_job = link.replace(&format!("/{id}/"), "/job-someone-else/");
    for bad in [
        altered,
        other_job,
        link.split('?').next().expect("path").to_string(),
    ] {
        let resp = raw.get(&bad).send().await.expect("fetch");
        let status = resp.status().as_u16();
        let body: Value = resp.json().await.expect("json");
        assert_eq!(status, 403, "{bad}: {body:#}");
        assert_eq!(body["error"]["code"], "bad-signature", "{body:#}");
    }

    // The job ends: the link authorizes nothing any more.
    let (status, body) = client
        .call(reqwest::Method::DELETE, &format!("/v1/jobs/{id}"))
        .await;
    assert!(status < 300, "cancel: {status} {body:#}");
    client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    let resp = raw.get(&link).send().await.expect("fetch");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("json");
    assert_eq!(status, 410, "{body:#}");
    assert_eq!(body["error"]["code"], "job-ended", "{body:#}");
    assert_eq!(body["error"]["details"]["state"], "cancelled", "{body:#}");
}
