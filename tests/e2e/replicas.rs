//! Replicas (issue 12): several `forge-gateway serve` processes on one PostgreSQL
//! database (the testkit's throwaway server) against the emulator as its own process
//! (process mode: job code really runs, and marks each run in a file), capsules in S3
//! so jobs keep running whatever happens to a gateway. Short leader timings
//! (lease 3 s, renew deadline 2 s, retry 250 ms) keep each test well under a minute.
//!
//! - the leader is killed (SIGKILL) under a stream of submissions: another replica
//!   leads within the lease; no acknowledged job is lost, none runs twice, no RayJob is
//!   created twice; the `coordination.k8s.io/v1` Lease names the new leader; the
//!   failover time and the submissions that needed a retry are printed;
//! - every replica is restarted in turn (SIGTERM, as Kubernetes does) while jobs run
//!   and a client holds an event stream open on it: the stream ends, the replica exits,
//!   nothing is lost and no job is dispatched twice;
//! - the leader is frozen (SIGSTOP) past its lease, another leads and dispatches, the
//!   old one is resumed (SIGCONT) with work waiting for it: it creates and deletes no
//!   RayJob and makes no transition — fenced — and becomes a follower;
//! - two installations (SQLite and PostgreSQL) share one cluster and never touch each
//!   other's RayJobs; restarted with empty stores they delete nothing and report the
//!   RayJobs they find as foreign;
//! - a gateway connects with `FORGE_K8S_API_SERVER` and `FORGE_K8S_TOKEN` alone;
//! - a queued job's position and fair-share standing read the same from the leader
//!   and a follower;
//! - a console session opened in a real Chromium through one replica keeps working
//!   through another after the first is killed;
//! - a 208 MiB `forge submit` begun on one replica (in S3 multipart parts), interrupted
//!   and that replica killed, is resumed and completed on another, and the job runs;
//! - `forge jobs -w` on a follower prints every transition the leader makes, in order,
//!   and a watcher resumes on another replica with `Last-Event-ID`;
//! - PostgreSQL's primary is killed (SIGKILL) under a stream of submissions and its
//!   synchronous standby promoted: no acknowledged submission is lost, no RayJob is
//!   created twice, and while it lasts the replicas answer 503 `store-unavailable`
//!   with `Retry-After`, never a 500 or a hang.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use forge_testkit::s3::S3Server;
use forge_tests::browser::Browser;
use forge_tests::cli::Forge;
use forge_tests::jobs::{
    JobClient, RayJobRecorder, history, marker_zip, note_zip, one_gpu_spec, rayjob_names, rayjobs,
    runs_of, short_spec, trainer_spec, trainer_zip,
};
use forge_tests::procs::{
    Emulator, Gateway, GatewayOptions, NAMESPACE, TEAM_B_TOKEN, TOKEN, log_excerpt,
    write_gateway_files,
};
use forge_tests::sse::next_event;
use forge_tests::wait::{eventually, not_yet};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Lease, renew deadline and retry (ms) of every replica here.
const LEASE_MS: u64 = 3000;
const RENEW_MS: u64 = 2000;
const RETRY_MS: u64 = 250;

/// An emulator, S3, one PostgreSQL database and the replicas sharing it.
struct Replicas {
    _s3: S3Server,
    emulator: Emulator,
    opts: Vec<GatewayOptions>,
    gateways: Vec<Option<Gateway>>,
    runs: std::path::PathBuf,
    /// Last, so a failing test's logs are still there when its processes report them.
    dir: tempfile::TempDir,
}

impl Drop for Replicas {
    /// A failing test shows what the replicas it stopped logged (running ones show
    /// theirs as they drop).
    fn drop(&mut self) {
        if std::thread::panicking() {
            for (opts, _) in self
                .opts
                .iter()
                .zip(&self.gateways)
                .filter(|(_, g)| g.is_none())
            {
                let log = self.dir.path().join(format!("{}.log", opts.name));
                eprintln!(
                    "{}",
                    log_excerpt(&format!("stopped gateway {}", opts.name), &log)
                );
            }
        }
    }
}

impl Replicas {
    /// `n` replicas on a fresh database, all ready.
    async fn start(n: usize, nodes: &str) -> Replicas {
        Self::start_on(n, nodes, forge_testkit::postgres::database()).await
    }

    /// `n` replicas on the database at `db`, all ready.
    async fn start_on(n: usize, nodes: &str, db: String) -> Replicas {
        let dir = tempfile::tempdir().expect("tempdir");
        write_gateway_files(dir.path());
        let emulator = Emulator::start(dir.path(), nodes).await;
        let s3 = S3Server::start();
        let opts: Vec<GatewayOptions> = (0..n)
            .map(|i| {
                GatewayOptions::new(&format!("replica-{i}"), dir.path(), &emulator)
                    .s3(&s3)
                    .env("FORGE_DATABASE_URL", db.clone())
                    .leader_timings(LEASE_MS, RENEW_MS, RETRY_MS)
            })
            .collect();
        let mut gateways: Vec<Gateway> = opts.iter().map(Gateway::spawn).collect();
        for g in &mut gateways {
            g.wait_ready(Duration::from_secs(60)).await;
        }
        let runs = dir.path().join("runs");
        std::fs::create_dir_all(&runs).expect("runs dir");
        Replicas {
            dir,
            _s3: s3,
            emulator,
            opts,
            gateways: gateways.into_iter().map(Some).collect(),
            runs,
        }
    }

    fn gateway(&self, i: usize) -> &Gateway {
        self.gateways[i].as_ref().expect("replica running")
    }

    /// The running replicas' indexes.
    fn running(&self) -> Vec<usize> {
        (0..self.gateways.len())
            .filter(|i| self.gateways[*i].is_some())
            .collect()
    }

    /// The one running replica that reports it leads (`except` excluded), awaited.
    async fn leader(&self, except: Option<usize>, within: Duration) -> usize {
        let candidates: Vec<usize> = self
            .running()
            .into_iter()
            .filter(|i| Some(*i) != except)
            .collect();
        eventually("a leader", within, || {
            let candidates = candidates.clone();
            async move {
                let mut leaders = Vec::new();
                for i in candidates {
                    if self.gateway(i).is_leader().await {
                        leaders.push(i);
                    }
                }
                match leaders[..] {
                    [one] => Ok(one),
                    _ => Err(not_yet(leaders)),
                }
            }
        })
        .await
    }

    /// Submits `spec` to frozen replica `i` (the request waits in its socket, as the
    /// kernel holds it for a stopped process), then resumes it (SIGCONT): the job it
    /// stored, once it answers. On resume the submission wakes that process's
    /// dispatcher at once, before it learns it no longer leads.
    async fn submit_then_resume(&self, i: usize, spec: Value, code: Vec<u8>) -> String {
        let client = self.gateway(i).client();
        let pending = tokio::spawn(async move { client.try_submit(&spec, code).await });
        let port = self.opts[i].port;
        eventually(
            "the submission waiting in the frozen process's socket",
            Duration::from_secs(10),
            || async {
                let n = unread_bytes(port);
                if n > 0 { Ok(()) } else { Err(not_yet(n)) }
            },
        )
        .await;
        self.gateway(i).proc().signal("CONT");
        let (status, body) = pending
            .await
            .expect("task")
            .expect("an answer after resuming");
        assert_eq!(status, 202, "{body:#}");
        body["id"].as_str().expect("id").to_string()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for o in &self.opts {
            let log = std::fs::read_to_string(self.dir.path().join(format!("{}.log", o.name)))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            out.push_str(&format!("--- {} (last lines)\n", o.name));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// Every job succeeded, ran exactly once and got exactly one RayJob (one UID under
    /// its name); no RayJob is left. After clean stops (`Stops::Clean`) every job went
    /// through `dispatched` once; after a crash a job may be dispatched again, but only
    /// after its stored intent was found without a RayJob and queued again.
    async fn assert_exactly_once(&self, ids: &[String], recorder: &RayJobRecorder, stops: Stops) {
        let i = self.running()[0];
        let client = self.gateway(i).client();
        // A bound on liveness only (what is asserted is exactly once): one CI run on a
        // machine compiling beside the test took 70 s from a job's `initializing` to
        // its `running`, and 12 of 40 jobs ended just after a 120 s bound.
        let done = client.wait_terminal(ids, Duration::from_secs(300)).await;
        for id in ids {
            let j = &done[id];
            assert_eq!(j["state"], "succeeded", "{j:#}\n{}", self.logs());
            let dispatched = history(j).iter().filter(|s| *s == "dispatched").count();
            let retried = j["history"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| {
                    t["from"] == "dispatched"
                        && t["to"] == "queued"
                        && t["reason"]
                            .as_str()
                            .is_some_and(|r| r.starts_with("dispatch.retry"))
                })
                .count();
            let allowed = match stops {
                Stops::Clean => 1,
                Stops::Crash => 1 + retried,
            };
            assert!(
                dispatched >= 1 && dispatched <= allowed,
                "job {id} dispatched {dispatched} times ({retried} retries; {stops:?} stops): \
                 {:#}",
                j["history"]
            );
            assert_eq!(
                runs_of(&self.runs, id),
                1,
                "job {id} ran {} times",
                runs_of(&self.runs, id)
            );
        }
        let api = rayjobs(self.emulator.kube.clone(), NAMESPACE);
        eventually("no RayJob left", Duration::from_secs(60), || {
            let api = api.clone();
            async move {
                let names = rayjob_names(&api).await;
                if names.is_empty() {
                    Ok(())
                } else {
                    Err(not_yet(names))
                }
            }
        })
        .await;
        let seen = recorder.seen();
        for id in ids {
            let uids = seen.get(&format!("forge-{id}")).map_or(0, |u| u.len());
            assert_eq!(uids, 1, "job {id}: {uids} RayJobs created");
        }
        assert!(seen.len() >= ids.len());
    }
}

/// How the replicas of a test were stopped.
#[derive(Debug, Clone, Copy)]
enum Stops {
    /// SIGTERM: the dispatcher finishes what it started.
    Clean,
    /// SIGKILL or SIGSTOP: a stored dispatch intent may be left without its RayJob.
    Crash,
}

fn spec(tag: &str, i: usize) -> Value {
    one_gpu_spec(&format!("{tag}-{i}"), "python3 job.py")
}

/// What a submission stream saw.
#[derive(Debug, Default)]
struct Stream {
    /// Acknowledged job ids.
    acked: Vec<String>,
    /// Submissions that needed another attempt (the replica that failed, why).
    retried: Vec<(String, String)>,
}

/// Submits `count` jobs, one every `every`, round-robin over `clients`; a failed attempt
/// (no answer, or a 5xx) is retried on the next replica, as a client behind a load
/// balancer would.
async fn stream(
    clients: Vec<(String, JobClient)>,
    runs: std::path::PathBuf,
    count: usize,
    every: Duration,
    secs: f64,
) -> Stream {
    let mut out = Stream::default();
    let mut next = 0usize;
    for i in 0..count {
        let started = Instant::now();
        let mut attempts = 0;
        loop {
            let (name, client) = &clients[next % clients.len()];
            next += 1;
            attempts += 1;
            assert!(attempts < 200, "submission {i} never acknowledged");
            match client
                .try_submit(&spec("stream", i), marker_zip(&runs, secs))
                .await
            {
                Ok((202, body)) => {
                    out.acked.push(body["id"].as_str().expect("id").to_string());
                    break;
                }
                Ok((status, body)) if status >= 500 => {
                    out.retried
                        .push((name.clone(), format!("{status} {}", body["error"]["code"])));
                }
                Ok((status, body)) => panic!("submission {i}: {status} {body:#}"),
                Err(e) => out.retried.push((name.clone(), e)),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(rest) = every.checked_sub(started.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    out
}

/// A client per running replica with a short timeout (a frozen or dead replica must
/// not hold a submission for long).
fn clients(r: &Replicas) -> Vec<(String, JobClient)> {
    r.running()
        .into_iter()
        .map(|i| {
            let g = r.gateway(i);
            let mut c = g.client();
            c.http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("http");
            (g.name.clone(), c)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_leader_under_load_loses_and_duplicates_nothing() {
    let started = Instant::now();
    let mut r = Replicas::start(3, "h100=4x8").await;
    let (recorder, recorder_task) =
        RayJobRecorder::start(rayjobs(r.emulator.kube.clone(), NAMESPACE));
    recorder.wait_listed().await;
    let old = r.leader(None, Duration::from_secs(20)).await;

    let feed = tokio::spawn(stream(
        clients(&r),
        r.runs.clone(),
        30,
        Duration::from_millis(150),
        0.5,
    ));
    // Kill the leader once the stream is well under way (and some jobs run).
    some_rayjobs_created(&recorder, 5).await;
    let killed_at = Instant::now();
    r.gateways[old].take().expect("leader").kill();
    let new = r
        .leader(Some(old), Duration::from_millis(LEASE_MS + 5000))
        .await;
    let failover = killed_at.elapsed();
    // `kubectl get lease` shows the new leader (the mirror of the store's lease).
    let new_name = r.opts[new].name.clone();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(r.emulator.kube.clone(), NAMESPACE);
    eventually(
        "the Lease to name the new leader",
        Duration::from_secs(10),
        || async {
            let holder = leases
                .get_opt("forge-gateway-leader")
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity);
            if holder.as_deref() == Some(new_name.as_str()) {
                Ok(())
            } else {
                Err(not_yet(holder))
            }
        },
    )
    .await;
    let out = feed.await.expect("stream");

    r.assert_exactly_once(&out.acked, &recorder, Stops::Crash)
        .await;
    // Every acknowledged job is stored; an unacknowledged attempt may have been stored
    // too (the answer lost with the process): it ran exactly once as well.
    let listed = r.gateway(new).client().list_ids().await;
    let extra: Vec<&String> = listed.iter().filter(|id| !out.acked.contains(id)).collect();
    for id in &extra {
        assert!(
            runs_of(&r.runs, id) <= 1,
            "unacknowledged job {id} ran twice"
        );
    }
    recorder_task.abort();
    assert!(
        failover <= Duration::from_millis(LEASE_MS + RETRY_MS * 2 + 1000),
        "failover took {failover:?}, lease is {LEASE_MS} ms"
    );
    println!(
        "leader killed: replica-{new} leads {failover:?} later (lease {LEASE_MS} ms); {} \
         submissions acknowledged, {} attempts failed and were retried on another replica \
         {:?}, {} stored but unacknowledged; 0 lost, 0 duplicate RayJobs, 0 runs twice; \
         test took {:?}",
        out.acked.len(),
        out.retried.len(),
        out.retried,
        extra.len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_loses_nothing() {
    let started = Instant::now();
    let mut r = Replicas::start(3, "h100=4x8").await;
    let (recorder, recorder_task) =
        RayJobRecorder::start(rayjobs(r.emulator.kube.clone(), NAMESPACE));
    recorder.wait_listed().await;
    // A browser logged in before the roll, and a watcher that follows every replica in
    // turn: when its replica stops, it resumes on the next with `Last-Event-ID`.
    let browser = Browser::start("console-rolling-restart").await;
    browser_log_in(&browser, &r.gateway(0).url, TOKEN).await;
    let urls: Vec<String> = (0..3).map(|i| r.gateway(i).url.clone()).collect();
    let roaming = RoamingWatch::start(urls);
    let mut ids = Vec::new();
    let client = r.gateway(0).client();
    for i in 0..6 {
        ids.push(
            client
                .submit_ok(&spec("roll", i), marker_zip(&r.runs, 3.0))
                .await,
        );
    }
    let mut pauses = Vec::new();
    for i in 0..3 {
        // An open event stream (a `forge jobs watch`, a console tab) must not hold the
        // stop: it ends when the replica begins to stop.
        let watcher = open_watch(&r.gateway(i).client()).await;
        // As a Deployment rolls: SIGTERM one, start its replacement, wait until Ready.
        let status = r.gateways[i].take().expect("replica").terminate().await;
        assert!(status.success(), "replica-{i} exited with {status}");
        let (_, clean) = watcher.await.expect("watch reader");
        assert!(clean, "the watch stream of replica-{i} was cut, not ended");
        let stopped = Instant::now();
        let mut g = Gateway::spawn(&r.opts[i]);
        g.wait_ready(Duration::from_secs(60)).await;
        pauses.push(stopped.elapsed());
        r.gateways[i] = Some(g);
        // Submissions keep going to whichever replica is up.
        let c = r.gateway((i + 1) % 3).client();
        ids.push(
            c.submit_ok(&spec("roll", 10 + i), marker_zip(&r.runs, 1.0))
                .await,
        );
    }
    r.leader(None, Duration::from_secs(20)).await;
    r.assert_exactly_once(&ids, &recorder, Stops::Clean).await;
    recorder_task.abort();
    // Every replica was restarted: the browser is still logged in, on any of them.
    browser
        .goto(&format!("{}/console/jobs", r.gateway(2).url))
        .await;
    assert_eq!(
        browser.path().await,
        "/console/jobs",
        "logged out by the roll"
    );
    // The roaming watcher saw every transition of every job, in order, once.
    let client = r.gateway(1).client();
    let mut stored = BTreeMap::new();
    for id in &ids {
        stored.insert(id.clone(), history(&client.job(id).await));
    }
    let seen = eventually(
        "the roaming watcher to see every job end",
        Duration::from_secs(30),
        || async {
            let seen = roaming.seen();
            if stored.iter().all(|(id, h)| seen.get(id) == Some(h)) {
                Ok(seen)
            } else {
                Err(not_yet(serde_json::json!({"seen": seen, "stored": stored})))
            }
        },
    )
    .await;
    let (resumes, resyncs) = roaming.stop();
    assert_eq!(
        resyncs, 0,
        "the watcher was told to re-read {resyncs} times"
    );
    println!(
        "rolling restart of 3 replicas while {} jobs ran: all succeeded once; replacement \
         ready after {pauses:?}; a browser stayed logged in; a watcher resumed {resumes} \
         times across replicas and saw all {} transitions; test took {:?}",
        ids.len(),
        seen.values().map(Vec::len).sum::<usize>(),
        started.elapsed()
    );
}

/// A `GET /v1/jobs/watch` client that goes to the next replica whenever its stream
/// ends or cannot be opened, resuming with the last event id it saw.
struct RoamingWatch {
    /// Per job, the states it was seen reaching, in order.
    seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>>,
    resumes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    resyncs: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl RoamingWatch {
    fn start(urls: Vec<String>) -> RoamingWatch {
        let seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<String>>>> =
            std::sync::Arc::default();
        let resumes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let resyncs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (seen2, resumes2, resyncs2) = (seen.clone(), resumes.clone(), resyncs.clone());
        let task = tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut last: Option<u64> = None;
            let mut next = 0usize;
            loop {
                let url = &urls[next % urls.len()];
                next += 1;
                let mut req = http.get(format!("{url}/v1/jobs/watch")).bearer_auth(TOKEN);
                if let Some(id) = last {
                    req = req.header("last-event-id", id.to_string());
                }
                let Ok(mut resp) = req.send().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                if resp.status() != 200 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                if last.is_some() {
                    resumes2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let mut buf = String::new();
                while let Ok(Some(chunk)) = resp.chunk().await {
                    buf.push_str(&String::from_utf8_lossy(&chunk));
                    while let Some(end) = buf.find("\n\n") {
                        let block: String = buf.drain(..end + 2).collect();
                        let (mut name, mut id, mut data) = ("", None, Value::Null);
                        for line in block.lines() {
                            if let Some(v) = line.strip_prefix("event:") {
                                name = if v.trim() == "state" {
                                    "state"
                                } else if v.trim() == "resync" {
                                    "resync"
                                } else {
                                    "other"
                                };
                            } else if let Some(v) = line.strip_prefix("id:") {
                                id = v.trim().parse().ok();
                            } else if let Some(v) = line.strip_prefix("data:") {
                                data = serde_json::from_str(v.trim()).unwrap_or(Value::Null);
                            }
                        }
                        if name == "resync" {
                            resyncs2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        if let Some(id) = id {
                            last = Some(id);
                        }
                        if name == "state"
                            && let (Some(job), Some(to)) =
                                (data["jobId"].as_str(), data["to"].as_str())
                        {
                            let mut seen = seen2.lock().expect("seen");
                            seen.entry(job.to_string())
                                .or_default()
                                .push(to.to_string());
                        }
                    }
                }
            }
        });
        RoamingWatch {
            seen,
            resumes,
            resyncs,
            task,
        }
    }

    fn seen(&self) -> BTreeMap<String, Vec<String>> {
        self.seen.lock().expect("seen").clone()
    }

    /// Stops it: how many times it resumed on another replica, and how many `resync`s
    /// it was sent.
    fn stop(self) -> (usize, usize) {
        self.task.abort();
        (
            self.resumes.load(std::sync::atomic::Ordering::Relaxed),
            self.resyncs.load(std::sync::atomic::Ordering::Relaxed),
        )
    }
}

/// Opens `GET /v1/jobs/watch` and reads it in the background until it ends: returns
/// how many bytes came and whether it ended cleanly (the server closed the body) rather
/// than with a broken connection.
async fn open_watch(client: &JobClient) -> tokio::task::JoinHandle<(usize, bool)> {
    let mut resp = reqwest::Client::new()
        .get(format!("{}/v1/jobs/watch", client.url))
        .bearer_auth(&client.token)
        .send()
        .await
        .expect("GET /v1/jobs/watch");
    assert_eq!(resp.status(), 200, "GET /v1/jobs/watch");
    tokio::spawn(async move {
        let mut bytes = 0;
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => bytes += c.len(),
                Ok(None) => return (bytes, true),
                Err(_) => return (bytes, false),
            }
        }
    })
}

/// Side effects a gateway counts: RayJob creates and deletes sent, transitions made.
async fn side_effects(g: &Gateway) -> (f64, f64, f64) {
    let transitions = {
        let mut sum = 0.0;
        for state in [
            "dispatched",
            "initializing",
            "running",
            "succeeded",
            "failed",
            "queued",
        ] {
            sum += g
                .metric(&format!("forge_job_transitions_total{{state=\"{state}\"}}"))
                .await;
        }
        sum
    };
    (
        g.metric("forge_rayjob_writes_total{verb=\"create\"}").await,
        g.metric("forge_rayjob_writes_total{verb=\"delete\"}").await,
        transitions,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_leader_resumed_after_its_lease_acts_no_more() {
    let started = Instant::now();
    let r = Replicas::start(3, "h100=4x8").await;
    let (recorder, recorder_task) =
        RayJobRecorder::start(rayjobs(r.emulator.kube.clone(), NAMESPACE));
    recorder.wait_listed().await;
    let old = r.leader(None, Duration::from_secs(20)).await;
    let follower = (old + 1) % 3;
    let j1 = r
        .gateway(old)
        .client()
        .submit_ok(&spec("frozen", 1), marker_zip(&r.runs, 3.0))
        .await;
    let fclient = r.gateway(follower).client();
    fclient.wait_running(&j1, Duration::from_secs(60)).await;
    let before = side_effects(r.gateway(old)).await;

    let frozen = r.gateway(old).proc().pid();
    r.gateway(old).proc().signal("STOP");
    let stopped = Instant::now();
    let new = r
        .leader(Some(old), Duration::from_millis(LEASE_MS + 5000))
        .await;
    let elected = stopped.elapsed();
    // The new leader dispatches, and finishes j1 (its RayJob completes meanwhile): work
    // the frozen leader's watch and dispatcher will find waiting when it resumes.
    let j2 = fclient
        .submit_ok(&spec("frozen", 2), marker_zip(&r.runs, 0.5))
        .await;
    fclient
        .wait_terminal(&[j1.clone(), j2.clone()], Duration::from_secs(60))
        .await;
    // A submission to the frozen leader waits in its socket: on resume it is stored and
    // wakes that process's dispatcher at once.
    let j3 = r
        .submit_then_resume(old, spec("frozen", 3), marker_zip(&r.runs, 0.5))
        .await;
    let frozen_for = stopped.elapsed();
    eventually(
        "the old leader to follow",
        Duration::from_secs(10),
        || async {
            match r.gateway(old).readyz().await {
                Some(v) if v["role"] == "follower" => Ok(()),
                other => Err(not_yet(other)),
            }
        },
    )
    .await;
    let after = side_effects(r.gateway(old)).await;
    let fenced = r
        .gateway(old)
        .metric("forge_fenced_total{action=\"transition\"}")
        .await
        + r.gateway(old)
            .metric("forge_fenced_total{action=\"create\"}")
            .await
        + r.gateway(old)
            .metric("forge_fenced_total{action=\"delete\"}")
            .await;
    assert_eq!(
        before,
        after,
        "the resumed leader made side effects (creates, deletes, transitions before → after)\n{}",
        r.logs()
    );
    // j3 (stored by the resumed replica) is dispatched by the new leader.
    r.assert_exactly_once(&[j1, j2, j3], &recorder, Stops::Crash)
        .await;
    recorder_task.abort();
    println!(
        "leader (pid {frozen}) frozen for {frozen_for:?}: replica-{new} elected after \
         {elected:?} and dispatched; after SIGCONT the old leader made 0 RayJob creates, 0 \
         deletes, 0 transitions ({fenced} attempts refused by the fence) and follows; test \
         took {:?}",
        started.elapsed()
    );
}

/// What a gateway counts of preemption's side effects: notices given, RayJob deletes,
/// and moves into and out of `preempting`.
async fn preemption_effects(g: &Gateway) -> (f64, f64, f64) {
    (
        g.metric("forge_preemptions_total{series=\"h100\",reason=\"priority\"}")
            .await,
        g.metric("forge_rayjob_writes_total{verb=\"delete\"}").await,
        g.metric("forge_job_transitions_total{state=\"preempting\"}")
            .await
            + g.metric("forge_job_transitions_total{state=\"queued\"}")
                .await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_leader_resumed_during_a_preemption_performs_none_of_it() {
    let r = Replicas::start(3, "h100=1x8").await;
    let old = r.leader(None, Duration::from_secs(20)).await;
    let follower = (old + 1) % 3;
    let fclient = r.gateway(follower).client();
    // A low-priority job holds the only machine (it never checkpoints: it restarts
    // from 0 after the preemption, and exits at once on SIGTERM).
    let victim = fclient
        .submit_ok(
            &trainer_spec("victim", 0, 1, "steps=100 step_s=0.05 on_term=exit", 5),
            trainer_zip(),
        )
        .await;
    eventually(
        "the victim's program started",
        Duration::from_secs(60),
        || async {
            let (_, log) = fclient.logs(&victim).await;
            if log.contains("attempt 0 starting") {
                Ok(())
            } else {
                Err(not_yet(log))
            }
        },
    )
    .await;
    let before = preemption_effects(r.gateway(old)).await;

    // Frozen past its lease; the preemptor's submission waits in its socket, so on
    // resume the old leader's dispatcher wakes to it before it learns it was deposed.
    r.gateway(old).proc().signal("STOP");
    let new = r
        .leader(Some(old), Duration::from_millis(LEASE_MS + 5000))
        .await;
    let preemptor = r
        .submit_then_resume(old, short_spec("preemptor", 50), note_zip())
        .await;

    // The new leader preempts, once; both jobs end well.
    let done = fclient
        .wait_terminal(
            &[preemptor.clone(), victim.clone()],
            Duration::from_secs(120),
        )
        .await;
    for id in [&preemptor, &victim] {
        assert_eq!(
            done[id]["state"],
            "succeeded",
            "{:#}\n{}",
            done[id],
            r.logs()
        );
    }
    let v = fclient.job(&victim).await;
    let preemptions = v["preemptions"].as_array().cloned().unwrap_or_default();
    assert_eq!(preemptions.len(), 1, "{v:#}");
    assert_eq!(preemptions[0]["byJob"], preemptor.as_str());
    assert_eq!(v["attempt"], 1);
    let after = preemption_effects(r.gateway(old)).await;
    assert_eq!(
        before,
        after,
        "the resumed old leader gave notices, deleted RayJobs or moved jobs (before → after)\n{}",
        r.logs()
    );
    let by_new = preemption_effects(r.gateway(new)).await;
    assert!(
        by_new.0 >= 1.0,
        "the new leader gave the notice: {by_new:?}"
    );
    println!(
        "old leader frozen during the preemption: replica-{new} gave the notice; after SIGCONT replica-{old} made none of it ({before:?} → {after:?})"
    );
}

/// Bytes received but not yet read on the established TCP connections to local `port`
/// (Linux `/proc/net/tcp{,6}`: the kernel holds a stopped process's incoming requests).
fn unread_bytes(port: u16) -> u64 {
    let local = format!(":{port:04X}");
    let mut total = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx_queue:rx_queue …; st 01 = ESTABLISHED.
            if f.len() > 4 && f[1].ends_with(&local) && f[3] == "01" {
                let rx = f[4].split(':').nth(1).unwrap_or("0");
                total += u64::from_str_radix(rx, 16).unwrap_or(0);
            }
        }
    }
    total
}

/// Starts a gateway of its own installation (its own store) against `emulator`.
async fn installation(
    name: &str,
    dir: &Path,
    emulator: &Emulator,
    s3: &S3Server,
    database: Option<String>,
) -> Gateway {
    let mut o = GatewayOptions::new(name, dir, emulator)
        .s3(s3)
        .leader_timings(LEASE_MS, RENEW_MS, RETRY_MS);
    if let Some(url) = database {
        o = o.env("FORGE_DATABASE_URL", url);
    }
    Gateway::start(&o).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn installations_sharing_a_cluster_never_touch_each_others_rayjobs() {
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("tempdir");
    write_gateway_files(dir.path());
    let emulator = Emulator::start(dir.path(), "h100=4x8").await;
    let s3 = S3Server::start();
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).expect("runs");
    let api = rayjobs(emulator.kube.clone(), NAMESPACE);
    // Installation A on SQLite, B on PostgreSQL.
    let mut a = installation("install-a", dir.path(), &emulator, &s3, None).await;
    let mut b = installation(
        "install-b",
        dir.path(),
        &emulator,
        &s3,
        Some(forge_testkit::postgres::database()),
    )
    .await;
    let (ca, cb) = (a.client(), b.client());
    let mut short = BTreeMap::new();
    for i in 0..3 {
        short.insert(
            ca.submit_ok(&spec("a", i), marker_zip(&runs, 0.3)).await,
            "a",
        );
        short.insert(
            cb.submit_ok(&spec("b", i), marker_zip(&runs, 0.3)).await,
            "b",
        );
    }
    let long_a = ca
        .submit_ok(&spec("a-long", 0), marker_zip(&runs, 30.0))
        .await;
    let long_b = cb
        .submit_ok(&spec("b-long", 0), marker_zip(&runs, 30.0))
        .await;
    // Each runs its own jobs to the end and deletes only its own RayJobs.
    let a_ids: Vec<String> = short
        .iter()
        .filter(|(_, w)| **w == "a")
        .map(|(i, _)| i.clone())
        .collect();
    let b_ids: Vec<String> = short
        .iter()
        .filter(|(_, w)| **w == "b")
        .map(|(i, _)| i.clone())
        .collect();
    for (client, ids) in [(&ca, &a_ids), (&cb, &b_ids)] {
        for (id, j) in client.wait_terminal(ids, Duration::from_secs(60)).await {
            assert_eq!(j["state"], "succeeded", "{id}: {j:#}");
            assert_eq!(runs_of(&runs, &id), 1);
        }
    }
    for (client, id) in [(&ca, &long_a), (&cb, &long_b)] {
        client.wait_running(id, Duration::from_secs(60)).await;
    }
    let mut longs = vec![format!("forge-{long_a}"), format!("forge-{long_b}")];
    longs.sort();
    eventually(
        "only the long jobs' RayJobs left",
        Duration::from_secs(60),
        || async {
            let mut names = rayjob_names(&api).await;
            names.sort();
            if names == longs {
                Ok(())
            } else {
                Err(not_yet(names))
            }
        },
    )
    .await;
    let (_, report_a) = ca.call(reqwest::Method::GET, "/v1/admin/orphans").await;
    let instance_a = report_a["instance"].as_str().expect("instance").to_string();
    let names_a: Vec<&str> = report_a["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(
        names_a,
        vec![format!("forge-{long_b}")],
        "A sees B's RayJob as foreign: {report_a:#}"
    );
    assert_eq!(report_a["orphans"][0]["reason"], "other-instance");
    let deletes = "forge_rayjob_writes_total{verb=\"delete\"}";
    assert_eq!(
        a.metric(deletes).await,
        3.0,
        "A deleted exactly its 3 finished RayJobs"
    );
    assert_eq!(
        b.metric(deletes).await,
        3.0,
        "B deleted exactly its 3 finished RayJobs"
    );

    // Both restart with empty stores (a new data directory, a new database): new
    // identities. The running RayJobs are now foreign to both: reported, not deleted.
    a.kill();
    b.kill();
    let a2 = installation("install-a2", dir.path(), &emulator, &s3, None).await;
    let b2 = installation(
        "install-b2",
        dir.path(),
        &emulator,
        &s3,
        Some(forge_testkit::postgres::database()),
    )
    .await;
    let (_, r2) = a2
        .client()
        .call(reqwest::Method::GET, "/v1/admin/orphans")
        .await;
    assert_ne!(
        r2["instance"], instance_a,
        "an empty store has a new identity"
    );
    for (g, who) in [(&a2, "A"), (&b2, "B")] {
        // Wait for the periodic scan (the gauge), so the controllers have looked.
        eventually(
            "the foreign-RayJob scan",
            Duration::from_secs(30),
            || async {
                let n = g
                    .metric("forge_foreign_rayjobs{reason=\"other-instance\"}")
                    .await;
                if n >= 2.0 { Ok(()) } else { Err(not_yet(n)) }
            },
        )
        .await;
        let (_, report) = g
            .client()
            .call(reqwest::Method::GET, "/v1/admin/orphans")
            .await;
        let mut names: Vec<String> = report["orphans"]
            .as_array()
            .expect("orphans")
            .iter()
            .filter_map(|o| o["name"].as_str().map(str::to_string))
            .collect();
        names.sort();
        assert_eq!(
            names, longs,
            "{who} after an empty-store restart: {report:#}"
        );
        assert_eq!(g.metric(deletes).await, 0.0);
    }
    let mut left = rayjob_names(&api).await;
    left.sort();
    assert_eq!(left, longs, "nothing was deleted");
    println!(
        "two installations on one cluster: each ran and deleted only its own RayJobs; after \
         empty-store restarts both reported the 2 running RayJobs as foreign and deleted \
         none; test took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_with_the_api_server_and_token_variables_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    write_gateway_files(dir.path());
    let emulator = Emulator::start(dir.path(), "h100=1x8").await;
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).expect("runs");
    // No kubeconfig anywhere (HOME is the test directory), not in a pod.
    let opts = GatewayOptions::new("env-only", dir.path(), &emulator)
        .without("KUBECONFIG")
        .env("FORGE_K8S_API_SERVER", emulator.url.clone())
        .env("FORGE_K8S_TOKEN", "a-service-account-token");
    let g = Gateway::start(&opts).await;
    assert!(
        g.log().contains("Kubernetes API: FORGE_K8S_API_SERVER"),
        "{}",
        g.log()
    );
    let client = g.client();
    let id = client
        .submit_ok(&spec("env", 0), marker_zip(&runs, 0.1))
        .await;
    let done = client
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(60))
        .await;
    assert_eq!(done[&id]["state"], "succeeded", "{:#}", done[&id]);
}

/// A job of the one 8-GPU machine that holds it for `seconds`.
fn machine(name: &str, seconds: u32) -> Value {
    serde_json::json!({
        "name": name,
        "framework": "nemo-rl",
        "entrypoint": format!("python3 -c \"import time; time.sleep({seconds})\""),
        "pools": [{"name": "train", "nodes": 1, "gpusPerNode": 8}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_jobs_standing_reads_the_same_from_every_replica() {
    let r = Replicas::start(2, "h100=1x8").await;
    let leader = r.leader(None, Duration::from_secs(30)).await;
    let follower = 1 - leader;
    // team-a holds the machine and queued two more; team-b queues one after them. In
    // fair order team-b's goes first — on the leader, and on the follower too.
    let a = r.gateway(leader).client();
    let running = a.submit_ok(&machine("a-run", 60), note_zip()).await;
    a.wait_running(&running, Duration::from_secs(60)).await;
    let a2 = a.submit_ok(&machine("a2", 1), note_zip()).await;
    let a3 = a.submit_ok(&machine("a3", 1), note_zip()).await;
    let b = JobClient::new(&r.gateway(follower).url, TEAM_B_TOKEN);
    let b1 = b.submit_ok(&machine("b1", 1), note_zip()).await;
    let view = |g: &Gateway, token: &str, id: &str| {
        let client = JobClient::new(&g.url, token);
        let id = id.to_string();
        async move {
            let j = client.job(&id).await;
            let q = &j["queue"];
            (
                q["position"].clone(),
                q.pointer("/standing/sentence").cloned(),
                q.pointer("/standing/othersAhead").cloned(),
            )
        }
    };
    let (lead, follow) = (r.gateway(leader), r.gateway(follower));
    let agreed = eventually("the same standings", Duration::from_secs(20), || async {
        let mut both = Vec::new();
        for (id, token) in [(&b1, TEAM_B_TOKEN), (&a2, TOKEN), (&a3, TOKEN)] {
            let (l, f) = (view(lead, token, id).await, view(follow, token, id).await);
            if l != f || l.1.is_none() {
                return Err(not_yet(serde_json::json!({"job": id, "leader": format!("{l:?}"), "follower": format!("{f:?}")})));
            }
            both.push(l);
        }
        Ok(both)
    })
    .await;
    let positions: Vec<&Value> = agreed.iter().map(|(p, _, _)| p).collect();
    assert_eq!(
        positions,
        [
            &serde_json::json!(1),
            &serde_json::json!(2),
            &serde_json::json!(3)
        ],
        "team-b's job first, then team-a's in order: {agreed:?}"
    );
    assert_eq!(
        agreed[2].2,
        Some(serde_json::json!({"jobs": 1, "gpus": 8})),
        "{agreed:?}"
    );
}

/// Logs the browser in through the gateway at `url` with `token`.
async fn browser_log_in(b: &Browser, url: &str, token: &str) {
    b.goto(&format!("{url}/")).await;
    b.fill("#token", token).await;
    b.click("#login").await;
    eventually(
        "the jobs page after login",
        Duration::from_secs(30),
        || async {
            match b.path().await.as_str() {
                "/console/jobs" => Ok(()),
                other => Err(not_yet(other.to_string())),
            }
        },
    )
    .await;
}

/// Issue 40 §2: a console session lives in the store, so a browser logged in through
/// one replica keeps working through another after the first is killed: no login page,
/// the same viewer, and its forms (CSRF-checked against the stored session) work there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_session_outlives_the_replica_that_opened_it() {
    let mut r = Replicas::start(2, "h100=1x8").await;
    let b_job = JobClient::new(&r.gateway(1).url, TEAM_B_TOKEN)
        .submit_ok(&machine("b-visible", 1), note_zip())
        .await;
    let (a_url, b_url) = (r.gateway(0).url.clone(), r.gateway(1).url.clone());
    let browser = Browser::start("console-replicas").await;
    browser_log_in(&browser, &a_url, TEAM_B_TOKEN).await;
    browser
        .wait_text(
            &format!("#job-{b_job}"),
            "b-visible",
            Duration::from_secs(30),
        )
        .await;
    r.gateways[0].take().expect("replica 0").kill();
    // The same cookie (cookies are per host, not per port) reaches replica 1.
    browser.goto(&format!("{b_url}/console/jobs")).await;
    assert_eq!(
        browser.path().await,
        "/console/jobs",
        "logged out by another replica: {}",
        r.logs()
    );
    browser
        .wait_text(
            &format!("#job-{b_job}"),
            "b-visible",
            Duration::from_secs(30),
        )
        .await;
    browser.screenshot("jobs-on-the-other-replica").await;
    // A CSRF-checked form: logging out through replica 1 ends the session everywhere.
    browser.click("#logout").await;
    browser
        .wait_text("h1", "Log in", Duration::from_secs(30))
        .await;
    browser.goto(&format!("{b_url}/console/jobs")).await;
    assert_eq!(browser.path().await, "/login");
}

/// A 208 MiB capsule (4 × 52 MiB of incompressible bytes) in 8 MiB parts.
const UPLOAD_FILES: usize = 4;
const UPLOAD_FILE_MIB: usize = 52;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_begun_on_one_replica_is_resumed_and_completed_on_another() {
    let mut r = Replicas::start(2, "h100=1x8").await;
    let work = tempfile::tempdir().expect("tmp");
    let big = forge_tests::trees::BigJob::write(work.path(), UPLOAD_FILES, UPLOAD_FILE_MIB);
    let owned = big.submit_args(8);
    let args: Vec<&str> = owned.iter().map(String::as_str).collect();
    let on = |g: &Gateway| Forge {
        url: g.url.clone(),
        token: TOKEN.into(),
        home: tempfile::tempdir().expect("config home"),
    };

    // Begun on replica 0, interrupted after a few parts, and replica 0 killed.
    let forge_a = on(r.gateway(0));
    let mut first = forge_a.command(&args, false).spawn().expect("spawn");
    let a = r.gateway(0);
    eventually(
        "a few parts on replica 0",
        Duration::from_secs(300),
        || async {
            let got = a.metric("forge_upload_bytes_total").await;
            if got >= f64::from(24u32 << 20) {
                Ok(got)
            } else {
                Err(not_yet(got))
            }
        },
    )
    .await;
    first.start_kill().expect("kill the client");
    let _ = first.wait().await;
    let sent_to_a = a.metric("forge_upload_bytes_total").await;
    r.gateways[0].take().expect("replica 0").kill();

    // Run again against replica 1: it resumes the session, sends only what is
    // missing, completes it, and the job runs on the capsule.
    let b = r.gateway(1);
    let run = on(b)
        .run(&[&args[..], &["-o", "json"]].concat())
        .await
        .expect(0);
    assert!(run.stderr.contains("resuming upload"), "{}", run.stderr);
    let sent_to_b = b.metric("forge_upload_bytes_total").await;
    let capsule = u64::try_from(UPLOAD_FILES * UPLOAD_FILE_MIB).expect("size") << 20;
    assert!(
        sent_to_b < capsule as f64 && sent_to_a + sent_to_b >= capsule as f64,
        "replica 0 got {sent_to_a} bytes, replica 1 {sent_to_b}, of a capsule of more than {capsule}"
    );
    // The capsule is stored before the session is removed and counted, and a CLI
    // whose completion request outlived the request timeout returns as soon as the
    // capsule appears: the count follows shortly after.
    eventually(
        "the session counted as completed on replica 1",
        Duration::from_secs(120),
        || async {
            let got = b
                .metric(r#"forge_upload_sessions_total{outcome="completed"}"#)
                .await;
            if (got - 1.0).abs() < f64::EPSILON {
                Ok(got)
            } else {
                Err(not_yet(got))
            }
        },
    )
    .await;
    let id = run.json()["id"].as_str().expect("job id").to_string();
    let client = b.client();
    let done = client
        .wait_state(&id, "succeeded", Duration::from_secs(180))
        .await;
    assert_eq!(done["state"], "succeeded", "{done:#}");
    let (status, log) = client.logs(&id).await;
    assert_eq!(status, 200, "{log}");
    assert!(
        log.contains(&capsule.to_string()),
        "the job read every byte: {log}"
    );
}

/// The job changes a watcher is sent, in order, until `id` reaches a terminal state:
/// `(event id, to)` per state change of `id`.
async fn changes_until_done(resp: &mut reqwest::Response, id: &str) -> Vec<(Option<u64>, String)> {
    let mut buf = String::new();
    let mut seen = Vec::new();
    loop {
        let (name, seq, data) = next_event(resp, &mut buf, Duration::from_secs(60)).await;
        assert_ne!(name, "resync", "the feed lost its place after {seen:?}");
        if name != "state" || data["jobId"] != id {
            continue;
        }
        let to = data["to"].as_str().expect("to").to_string();
        let done = matches!(to.as_str(), "succeeded" | "failed" | "cancelled");
        seen.push((seq, to));
        if done {
            return seen;
        }
    }
}

/// `GET /v1/jobs/watch` on `g` as the admin, resuming after `last` if given.
async fn watch_on(g: &Gateway, last: Option<u64>) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .get(format!("{}/v1/jobs/watch", g.url))
        .bearer_auth(TOKEN);
    if let Some(last) = last {
        req = req.header("last-event-id", last.to_string());
    }
    let resp = req.send().await.expect("GET /v1/jobs/watch");
    assert_eq!(resp.status(), 200);
    resp
}

/// Issue 40 §3: one job feed for all replicas. `forge jobs -w` connected to a follower
/// prints every transition of a job the leader runs, in order; a watcher that
/// disconnects from one replica resumes on another with `Last-Event-ID` and gets what
/// it missed, without a resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_feeds_every_transition_in_order() {
    let r = Replicas::start(2, "h100=1x8").await;
    let leader = r.leader(None, Duration::from_secs(30)).await;
    let (lead, follow) = (r.gateway(leader), r.gateway(1 - leader));
    let forge = Forge {
        url: follow.url.clone(),
        token: TOKEN.into(),
        home: tempfile::tempdir().expect("config home"),
    };
    let mut watcher = forge
        .command(&["jobs", "-w", "-o", "json"], false)
        .spawn()
        .expect("forge jobs -w");
    let mut lines = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let mut next_change = async move || -> Value {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .expect("a change in time")
                .expect("read")
                .expect("forge jobs -w still running");
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v.get("event").is_some()
            {
                return v;
            }
        }
    };
    // The watcher is connected once it prints a change of a job submitted after it
    // started.
    let sentinel = lead
        .client()
        .submit_ok(&machine("sentinel", 0), note_zip())
        .await;
    while next_change().await["data"]["jobId"] != sentinel.as_str() {}
    let job = lead
        .client()
        .submit_ok(&machine("watched", 1), note_zip())
        .await;
    let mut printed = Vec::new();
    loop {
        let change = next_change().await;
        if change["event"] != "state" || change["data"]["jobId"] != job.as_str() {
            continue;
        }
        let to = change["data"]["to"].as_str().expect("to").to_string();
        printed.push(to.clone());
        if to == "succeeded" || to == "failed" {
            break;
        }
    }
    let stored = history(&lead.client().job(&job).await);
    assert_eq!(
        printed, stored,
        "the follower's watcher printed the job's history"
    );
    watcher.start_kill().expect("stop the watcher");

    // Resuming on another replica: the first change seen on the leader, then the rest
    // from the follower.
    let mut on_leader = watch_on(lead, None).await;
    let resumed = follow
        .client()
        .submit_ok(&machine("resumed", 1), note_zip())
        .await;
    let mut buf = String::new();
    let first = loop {
        let (name, seq, data) = next_event(&mut on_leader, &mut buf, Duration::from_secs(60)).await;
        if name == "state" && data["jobId"] == resumed.as_str() {
            break seq.expect("changes carry ids");
        }
    };
    drop(on_leader);
    lead.client()
        .wait_terminal(std::slice::from_ref(&resumed), Duration::from_secs(60))
        .await;
    let mut on_follower = watch_on(follow, Some(first)).await;
    let rest = changes_until_done(&mut on_follower, &resumed).await;
    let ids: Vec<u64> = rest.iter().filter_map(|(seq, _)| *seq).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]) && ids.iter().all(|s| *s > first),
        "ids increase after {first}: {ids:?}"
    );
    let rest: Vec<String> = rest.into_iter().map(|(_, to)| to).collect();
    let stored = history(&follow.client().job(&resumed).await);
    assert_eq!(
        rest,
        stored[1..],
        "resumed on the follower after the submission"
    );
    // An id no replica issued (past the store's newest change) is told to re-read.
    let never = ids.iter().copied().max().unwrap_or(first) + (1 << 40);
    let mut unknown = watch_on(follow, Some(never)).await;
    let mut buf = String::new();
    let (name, _, _) = next_event(&mut unknown, &mut buf, Duration::from_secs(10)).await;
    assert_eq!(
        name, "resync",
        "a Last-Event-ID of {never} that no replica gave"
    );
}

/// What a replica answered a read while the database failed over.
#[derive(Debug)]
struct ProbeAnswer {
    replica: String,
    at: Duration,
    status: Result<u16, String>,
    retry_after: bool,
    code: Value,
}

/// Reads `GET /v1/jobs?limit=1` on every replica every 100 ms until `stop` is set:
/// what each answered, and when (from `since`).
fn probe(
    r: &Replicas,
    since: Instant,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<ProbeAnswer>> {
    let targets: Vec<(String, String)> = r
        .running()
        .into_iter()
        .map(|i| (r.gateway(i).name.clone(), r.gateway(i).url.clone()))
        .collect();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http");
    tokio::spawn(async move {
        let mut answers = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for (replica, url) in &targets {
                let sent = http
                    .get(format!("{url}/v1/jobs?limit=1"))
                    .bearer_auth(TOKEN)
                    .send()
                    .await;
                let at = since.elapsed();
                let answer = match sent {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let retry_after = resp.headers().contains_key("retry-after");
                        let body: Value = resp.json().await.unwrap_or(Value::Null);
                        ProbeAnswer {
                            replica: replica.clone(),
                            at,
                            status: Ok(status),
                            retry_after,
                            code: body["error"]["code"].clone(),
                        }
                    }
                    Err(e) => ProbeAnswer {
                        replica: replica.clone(),
                        at,
                        status: Err(e.to_string()),
                        retry_after: false,
                        code: Value::Null,
                    },
                };
                answers.push(answer);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answers
    })
}

/// Waits until `n` RayJobs were created (a stream of submissions is well under way).
async fn some_rayjobs_created(recorder: &RayJobRecorder, n: usize) {
    eventually("some jobs dispatched", Duration::from_secs(30), || async {
        let seen = recorder.seen().len();
        if seen >= n {
            Ok(())
        } else {
            Err(not_yet(seen))
        }
    })
    .await;
}

/// How long PostgreSQL has no primary in the failover test.
const OUTAGE: Duration = Duration::from_secs(4);

/// Issue 40 §4: PostgreSQL's primary is killed with SIGKILL under a steady stream of
/// submissions to two replicas, and its synchronous standby is promoted (as an
/// operator or a failover manager would). The replicas name both hosts with
/// `target_session_attrs=read-write` and reconnect by themselves. Every acknowledged
/// submission is kept and runs exactly once with one RayJob (the lease's epoch is in
/// the same database, so the leader stays fenced across the switch); while it lasts,
/// every failed answer is a 503 `store-unavailable` with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgresql_failover_loses_no_acknowledged_submission() {
    let pg = forge_testkit::postgres::Replicated::start();
    let r = Replicas::start_on(2, "h100=4x8", pg.url()).await;
    let (recorder, recorder_task) =
        RayJobRecorder::start(rayjobs(r.emulator.kube.clone(), NAMESPACE));
    recorder.wait_listed().await;
    r.leader(None, Duration::from_secs(20)).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let began = Instant::now();
    let probing = probe(&r, began, stop.clone());
    let feed = tokio::spawn(stream(
        clients(&r),
        r.runs.clone(),
        40,
        Duration::from_millis(150),
        0.5,
    ));
    some_rayjobs_created(&recorder, 5).await;
    let killed_at = began.elapsed();
    pg.kill_primary();
    // The database is down for a while, as a failover manager takes to notice and
    // promote; long enough for the leader's lease to run out.
    tokio::time::sleep(OUTAGE).await;
    pg.promote_standby();
    let promoted_at = began.elapsed();
    let out = feed.await.expect("stream");
    r.assert_exactly_once(&out.acked, &recorder, Stops::Crash)
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = probing.await.expect("probe");
    recorder_task.abort();

    let failed: Vec<&ProbeAnswer> = answers.iter().filter(|a| a.status != Ok(200)).collect();
    for a in &failed {
        assert!(
            a.status == Ok(503) && a.retry_after && a.code == "store-unavailable",
            "during the failover a replica answered {a:?}\n{}",
            r.logs()
        );
    }
    for (replica, why) in &out.retried {
        assert_eq!(
            why,
            "503 \"store-unavailable\"",
            "a submission to {replica} failed otherwise\n{}",
            r.logs()
        );
    }
    let window = |replica: &str| {
        let mine: Vec<&&ProbeAnswer> = failed.iter().filter(|a| a.replica == replica).collect();
        match (mine.first(), mine.last()) {
            (Some(first), Some(last)) => format!("{:?}..{:?}", first.at, last.at),
            _ => "none".into(),
        }
    };
    println!(
        "PostgreSQL failover: primary killed at {killed_at:?}, standby promoted at \
         {promoted_at:?}; 503 store-unavailable windows: replica-0 {}, replica-1 {}; {} \
         probe answers ({} failed, all 503 with Retry-After); {} submissions acknowledged, \
         {} attempts answered 503 and were retried; 0 lost, 0 duplicate RayJobs",
        window("replica-0"),
        window("replica-1"),
        answers.len(),
        failed.len(),
        out.acked.len(),
        out.retried.len()
    );
}
