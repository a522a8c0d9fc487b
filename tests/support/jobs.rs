//! Job-API helpers shared by the fault and crash tests: code archives, specs, an HTTP
//! client bound to one gateway URL and token, terminal-state polling, and a RayJob
//! recorder that notices a second RayJob created for one job.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

/// The code archive of the trainer that follows the preemption contract
/// (`tests/fixtures/jobs/preemptible_train.py`, as `train.py`; its arguments are in its
/// docstring).
pub fn trainer_zip() -> Vec<u8> {
    let path = crate::plugins::workspace_root().join("tests/fixtures/jobs/preemptible_train.py");
    let code = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    zip_of(&[("train.py", code.as_str())])
}

/// A job of `nodes` 8-GPU machines at `priority` running the trainer with `args`,
/// with `grace` seconds to checkpoint once preempted.
pub fn trainer_spec(name: &str, priority: i32, nodes: u32, args: &str, grace: u32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": format!("python3 train.py {args}"),
        "priority": priority,
        "deadlines": {"checkpointGraceSeconds": grace},
        "pools": [{"name": "train", "nodes": nodes, "gpusPerNode": 8}]
    })
}

/// A job of one 8-GPU machine at `priority` that only holds its GPUs for a second (its
/// code archive: [`note_zip`]).
pub fn short_spec(name: &str, priority: i32) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": "python3 -c \"import time; time.sleep(1); print('short job ran', flush=True)\"",
        "priority": priority,
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    })
}

/// A code archive for a job whose entrypoint is inline (an archive may not be empty).
pub fn note_zip() -> Vec<u8> {
    zip_of(&[("README", "this job's code is its entrypoint\n")])
}

/// A zip archive of `files` (path, body).
pub fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, body) in files {
        zip.start_file(*path, zip::write::SimpleFileOptions::default())
            .expect("zip entry");
        zip.write_all(body.as_bytes()).expect("zip write");
    }
    zip.finish().expect("zip finish").into_inner()
}

/// A tiny job's code: prints a marker with its job id, appends one line per run to
/// `<runs_dir>/<job id>` (so a job that ran twice is visible), then sleeps `secs`.
pub fn marker_zip(runs_dir: &std::path::Path, secs: f64) -> Vec<u8> {
    let script = format!(
        "import os, time\n\
         jid = os.environ.get('FORGE_JOB_ID', 'unknown')\n\
         with open(os.path.join({dir:?}, jid), 'a') as f:\n    f.write('run\\n')\n\
         print('forge-marker ' + jid, flush=True)\n\
         time.sleep({secs})\n\
         print('forge-done ' + jid, flush=True)\n",
        dir = runs_dir.display().to_string(),
    );
    zip_of(&[("job.py", &script)])
}

/// A 1-GPU JobSpec running `entrypoint`.
pub fn one_gpu_spec(name: &str, entrypoint: &str) -> Value {
    json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": entrypoint,
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 1}]
    })
}

/// How many times each job's code ran (lines in its marker file).
pub fn runs_of(runs_dir: &std::path::Path, id: &str) -> usize {
    std::fs::read_to_string(runs_dir.join(id))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// The RayJob API of a namespace.
pub fn rayjobs(client: kube::Client, namespace: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayJob"),
        "rayjobs",
    );
    Api::namespaced_with(client, namespace, &ar)
}

/// Names of the RayJobs that exist now (retrying transient API errors).
pub async fn rayjob_names(api: &Api<DynamicObject>) -> Vec<String> {
    for _ in 0..50 {
        if let Ok(list) = api.list(&ListParams::default()).await {
            return list
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("listing RayJobs kept failing");
}

/// Wait until no RayJob exists.
pub async fn wait_no_rayjobs(api: &Api<DynamicObject>, within: Duration) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let names = rayjob_names(api).await;
        if names.is_empty() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "RayJobs left behind: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Records every RayJob object (name → distinct UIDs) seen by a watcher: two UIDs
/// under one name mean the RayJob was created twice.
#[derive(Clone, Default)]
pub struct RayJobRecorder {
    seen: Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>,
    /// Set once the watcher's initial list is complete.
    listed: Arc<std::sync::atomic::AtomicBool>,
    /// Name → when the watch first showed it, first showed it terminal (KubeRay
    /// `jobDeploymentStatus` Complete or Failed) and showed its deletion (Unix ms).
    times: Arc<Mutex<BTreeMap<String, RayJobTimes>>>,
}

/// When a RayJob was seen created, terminal and deleted (Unix milliseconds).
#[derive(Clone, Copy, Debug, Default)]
pub struct RayJobTimes {
    pub created: Option<i64>,
    pub terminal: Option<i64>,
    pub deleted: Option<i64>,
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl RayJobRecorder {
    /// Start watching `api` in the background.
    pub fn start(api: Api<DynamicObject>) -> (RayJobRecorder, tokio::task::JoinHandle<()>) {
        let rec = RayJobRecorder::default();
        let seen = rec.seen.clone();
        let times = rec.times.clone();
        let listed = rec.listed.clone();
        let task = tokio::spawn(async move {
            let mut stream =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(ev) = stream.next().await {
                let now = unix_ms();
                let (obj, deleted) = match ev {
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, std::sync::atomic::Ordering::SeqCst);
                        continue;
                    }
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                    Ok(watcher::Event::Delete(o)) => (o, true),
                    _ => continue,
                };
                if let Some(name) = &obj.metadata.name {
                    let terminal = matches!(
                        obj.data["status"]["jobDeploymentStatus"].as_str(),
                        Some("Complete" | "Failed")
                    );
                    let mut t = times.lock().expect("recorder lock");
                    let entry = t.entry(name.clone()).or_default();
                    entry.created.get_or_insert(now);
                    if terminal {
                        entry.terminal.get_or_insert(now);
                    }
                    if deleted {
                        entry.deleted.get_or_insert(now);
                    }
                }
                if let (Some(name), Some(uid)) = (obj.metadata.name, obj.metadata.uid) {
                    seen.lock()
                        .expect("recorder lock")
                        .entry(name)
                        .or_default()
                        .insert(uid);
                }
            }
        });
        (rec, task)
    }

    /// Waits until the watch has listed what exists (later events are changes).
    pub async fn wait_listed(&self) {
        let listed = self.listed.clone();
        crate::wait::eventually(
            "the RayJob watch's initial list",
            Duration::from_secs(30),
            || {
                let listed = listed.clone();
                async move {
                    if listed.load(std::sync::atomic::Ordering::SeqCst) {
                        Ok(())
                    } else {
                        Err(crate::wait::not_yet("not listed"))
                    }
                }
            },
        )
        .await;
    }

    /// RayJob name → the distinct UIDs seen.
    pub fn seen(&self) -> BTreeMap<String, BTreeSet<String>> {
        self.seen.lock().expect("recorder lock").clone()
    }

    /// RayJob name → when the watch showed it created, terminal and deleted.
    pub fn times(&self) -> BTreeMap<String, RayJobTimes> {
        self.times.lock().expect("recorder lock").clone()
    }
}

/// An HTTP client for one gateway URL and token.
#[derive(Clone)]
pub struct JobClient {
    pub url: String,
    pub token: String,
    pub http: reqwest::Client,
}

impl JobClient {
    pub fn new(url: &str, token: &str) -> JobClient {
        JobClient {
            url: url.to_string(),
            token: token.to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("http client"),
        }
    }

    /// Submit a job (multipart spec + code zip); returns the status and JSON body.
    pub async fn submit(&self, spec: &Value, code: Vec<u8>) -> (u16, Value) {
        self.submit_form(submission_form(spec, code)).await
    }

    /// Submit a multipart form as is (for malformed submissions); returns the status
    /// and JSON body.
    pub async fn submit_form(&self, form: reqwest::multipart::Form) -> (u16, Value) {
        let resp = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(&self.token)
            .multipart(form)
            .send()
            .await
            .expect("submit");
        let status = resp.status().as_u16();
        (status, resp.json().await.expect("submit JSON"))
    }

    /// Submit; the status and JSON body, or why no answer came (a gateway killed or
    /// frozen mid-request).
    pub async fn try_submit(&self, spec: &Value, code: Vec<u8>) -> Result<(u16, Value), String> {
        let resp = self
            .http
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(&self.token)
            .multipart(submission_form(spec, code))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.json().await.map_err(|e| e.to_string())?;
        Ok((status, body))
    }

    /// Submit and expect 202 — after a 503 `not-ready` (a gateway whose cluster
    /// view is still syncing, an API server failing its lists) submitted again as its
    /// `Retry-After` says, for at most a minute, as a client should; returns the job id.
    pub async fn submit_ok(&self, spec: &Value, code: Vec<u8>) -> String {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = self.submit(spec, code.clone()).await;
            if status == 503
                && body["error"]["code"] == "not-ready"
                && std::time::Instant::now() < until
            {
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
            assert_eq!(status, 202, "{body:#}");
            return body["id"].as_str().expect("job id").to_string();
        }
    }

    /// The job's JSON view, or `None` when the gateway does not answer.
    pub async fn try_job(&self, id: &str) -> Option<Value> {
        let resp = self
            .http
            .get(format!("{}/v1/jobs/{id}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .ok()?;
        if resp.status() != 200 {
            return None;
        }
        resp.json().await.ok()
    }

    /// The job's JSON view.
    pub async fn job(&self, id: &str) -> Value {
        self.try_job(id).await.expect("get job")
    }

    /// Poll until the job is running, at most `within`; panics with its last view.
    pub async fn wait_running(&self, id: &str, within: Duration) {
        crate::wait::eventually(&format!("job {id} running"), within, || async {
            let j = self.job(id).await;
            if j["state"] == "running" {
                Ok(())
            } else {
                Err(crate::wait::not_yet(j))
            }
        })
        .await;
    }

    /// Poll until the job is in `state`, at most `within`; its view then. Panics with
    /// its state, reason and standing in the queue.
    pub async fn wait_state(&self, id: &str, state: &str, within: Duration) -> Value {
        crate::wait::eventually(&format!("job {id} {state}"), within, || async {
            let j = self.job(id).await;
            if j["state"] == state {
                Ok(j)
            } else {
                Err(crate::wait::not_yet(
                    json!({"state": j["state"], "reason": j["reason"], "queue": j["queue"]}),
                ))
            }
        })
        .await
    }

    /// Poll until the job's current log has `line` (e.g. its program's first line:
    /// only then has it installed its signal handlers), at most a minute.
    pub async fn wait_log(&self, id: &str, line: &str) {
        crate::wait::eventually(
            &format!("{line:?} in {id}'s log"),
            Duration::from_secs(60),
            || async {
                let (_, log) = self.logs(id).await;
                if log.contains(line) {
                    Ok(())
                } else {
                    Err(crate::wait::not_yet(log))
                }
            },
        )
        .await;
    }

    /// The archived log of one attempt of a job (`GET /v1/jobs/{id}/logs?attempt=N`,
    /// expected to answer 200).
    pub async fn attempt_log(&self, id: &str, attempt: u32) -> String {
        let (status, body) = self
            .call(
                reqwest::Method::GET,
                &format!("/v1/jobs/{id}/logs?attempt={attempt}"),
            )
            .await;
        assert_eq!(status, 200, "attempt {attempt} of {id}: {body}");
        body.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| body.to_string())
    }

    /// Poll until every job is terminal; returns id → final view. Panics with
    /// [`JobClient::stuck_report`] of the jobs that were not.
    pub async fn wait_terminal(&self, ids: &[String], within: Duration) -> BTreeMap<String, Value> {
        self.try_wait_terminal(ids, within)
            .await
            .unwrap_or_else(|report| panic!("{report}"))
    }

    /// Poll until every job is terminal; returns id → final view, or the report of the
    /// jobs still not terminal after `within`.
    pub async fn try_wait_terminal(
        &self,
        ids: &[String],
        within: Duration,
    ) -> Result<BTreeMap<String, Value>, String> {
        let deadline = tokio::time::Instant::now() + within;
        let mut done = BTreeMap::new();
        loop {
            for id in ids {
                if done.contains_key(id) {
                    continue;
                }
                if let Some(j) = self.try_job(id).await
                    && is_terminal(&j)
                {
                    done.insert(id.clone(), j);
                }
            }
            if done.len() == ids.len() {
                return Ok(done);
            }
            if tokio::time::Instant::now() > deadline {
                let mut report = format!(
                    "{} of {} jobs not terminal within {within:?}:",
                    ids.len() - done.len(),
                    ids.len()
                );
                for id in ids.iter().filter(|i| !done.contains_key(*i)) {
                    report.push('\n');
                    report.push_str(&self.stuck_report(id).await);
                }
                return Err(report);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// What a job that did not end shows: its state, reason and history first (a CI
    /// log shows the start of a long message), then its view without the decision
    /// traces, then the last lines of its log.
    pub async fn stuck_report(&self, id: &str) -> String {
        const TAIL: usize = 60;
        let Some(mut job) = self.try_job(id).await else {
            return format!("job {id}: its view could not be read");
        };
        let decisions = job
            .as_object_mut()
            .and_then(|o| o.remove("decisions"))
            .and_then(|d| d.as_array().map(Vec::len))
            .unwrap_or(0);
        let (status, log) = self.logs(id).await;
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(TAIL)..].join("\n");
        format!(
            "job {id}: state {}, reason {}, history {:?}\n\
             --- its view ({decisions} decision traces left out) ---\n{job:#}\n\
             --- the last {TAIL} lines of its log (HTTP {status}) ---\n{tail}",
            job["state"],
            job["reason"],
            history(&job),
        )
    }

    /// `method path` with this client's token; returns the status and the body as
    /// JSON (a JSON string holding the text when the body is not JSON, e.g. a log).
    pub async fn call(&self, method: reqwest::Method, path: &str) -> (u16, Value) {
        let resp = self
            .http
            .request(method.clone(), format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    /// The archived driver log (status, body).
    pub async fn logs(&self, id: &str) -> (u16, String) {
        let resp = self
            .http
            .get(format!("{}/v1/jobs/{id}/logs", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("logs");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("log text"))
    }

    /// Every job the token sees (ids), following the list's cursor.
    pub async fn list_ids(&self) -> BTreeSet<String> {
        let mut ids = BTreeSet::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{}/v1/jobs?limit=100", self.url);
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let body: Value = self
                .http
                .get(url)
                .bearer_auth(&self.token)
                .send()
                .await
                .expect("list")
                .json()
                .await
                .expect("list JSON");
            for j in body["jobs"].as_array().expect("jobs array") {
                ids.insert(j["id"].as_str().expect("id").to_string());
            }
            match body["next"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return ids,
            }
        }
    }
}

/// The multipart body of a submission: a JSON `spec` part and a `code` part
/// (`code.zip`). Add parts to it to build malformed submissions.
pub fn submission_form(spec: &Value, code: Vec<u8>) -> reqwest::multipart::Form {
    reqwest::multipart::Form::new()
        .part(
            "spec",
            reqwest::multipart::Part::text(spec.to_string())
                .mime_str("application/json")
                .expect("mime"),
        )
        .part(
            "code",
            reqwest::multipart::Part::bytes(code).file_name("code.zip"),
        )
}

/// Whether a job view is in a terminal state.
pub fn is_terminal(job: &Value) -> bool {
    matches!(
        job["state"].as_str(),
        Some("succeeded" | "failed" | "cancelled" | "timed-out" | "rejected")
    )
}

/// The `to` states of a job's history.
pub fn history(job: &Value) -> Vec<String> {
    job["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .filter_map(|t| t["to"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
