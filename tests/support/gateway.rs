//! Start the real gateway app (the `dev` composition: emulator + reference chain) on a
//! port-0 listener with a temporary data directory.

use std::collections::HashMap;

use forge_gateway::compose::{Controllers, spawn_controllers};
use forge_gateway::dev::{self, DevOptions};
use forge_gateway::{AppState, router};

use crate::jobs::JobClient;
use crate::plugins;

/// Lists of this installation's RayJobs the lifecycle reconciled with (its watcher's
/// first list and every relist after).
pub const RELISTS: &str = "forge_rayjob_relists_total";
/// The lifecycle's resync rounds that ended (their list failed or every RayJob it
/// listed was looked at).
pub const RESYNCS: &str = "forge_rayjob_resyncs_total";

/// Log to the test's output at `default` level (the first call in a process wins).
/// `RUST_LOG=forge_gateway=debug cargo test …` overrides it.
pub fn init_tracing(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_test_writer()
        .try_init();
}

/// A running gateway for tests.
pub struct TestGateway {
    pub url: String,
    pub token: String,
    pub sim: forge_kubesim::Sim,
    /// The other fleets' emulated clusters (`DevOptions::fleets` > 1), in order.
    pub other_fleets: Vec<forge_kubesim::Sim>,
    pub http: reqwest::Client,
    /// The app's state (store, queue board, metrics) for assertions.
    pub state: AppState,
    _controllers: Controllers,
    _data: tempfile::TempDir,
}

impl TestGateway {
    /// Start with a node layout (e.g. `h100=2x8,h200=2x8`) and extra `FORGE_*` settings.
    pub async fn start(nodes: &str, env: &[(&str, &str)]) -> TestGateway {
        Self::start_with(nodes, env, &[]).await
    }

    /// Like [`TestGateway::start`], with images whose pulls fail in the cluster.
    pub async fn start_with(
        nodes: &str,
        env: &[(&str, &str)],
        failing_images: &[&str],
    ) -> TestGateway {
        Self::start_tweaked(nodes, env, |o| {
            o.failing_images = failing_images.iter().map(|s| s.to_string()).collect();
        })
        .await
    }

    /// [`TestGateway::start`] with the dev options adjusted by `tweak` (failing images,
    /// an old operator, …).
    pub async fn start_tweaked(
        nodes: &str,
        env: &[(&str, &str)],
        tweak: impl FnOnce(&mut DevOptions),
    ) -> TestGateway {
        // kube-rs logs every non-2xx answer as an ERROR (expected 404s and 409s, and
        // each fault the emulator injects): the gateway's own warnings say what matters.
        init_tracing("warn,kube_client=off");
        for name in ["pool-series", "team-quota", "rwo-guard"] {
            plugins::component(name);
        }
        let data = tempfile::tempdir().expect("temp dir");
        let mut vars: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // A caller-given data dir (a restart test) wins over the temporary one.
        vars.entry("FORGE_DATA_DIR".into())
            .or_insert_with(|| data.path().display().to_string());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let mut opts = DevOptions {
            nodes: nodes.into(),
            plugins_dir: plugins::workspace_root().join("target/plugins/components"),
            env: vars,
            sim: dev::SimMode::Process,
            policy_chain: None,
            failing_images: Vec::new(),
            old_operator: false,
            ray_venv: None,
            fleets: 1,
        };
        tweak(&mut opts);
        let dev = dev::start(&opts, &url.parse().expect("url"))
            .await
            .expect("dev gateway");
        let controllers = spawn_controllers(&dev.state);
        let state = dev.state.clone();
        let app = router(dev.state);
        tokio::spawn(async move {
            axum::serve(listener, app).await.expect("serve");
        });
        TestGateway {
            url,
            token: dev.token,
            sim: dev.sim,
            other_fleets: dev.other_fleets,
            http: reqwest::Client::new(),
            state,
            _controllers: controllers,
            _data: data,
        }
    }

    /// A job-API client for this gateway acting with `token` (another team's member,
    /// say).
    pub fn client(&self, token: &str) -> JobClient {
        JobClient::new(&self.url, token)
    }

    /// The Prometheus text of `GET /metrics`, the detailed view (scraped with the
    /// admin token).
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .bearer_auth(&self.token)
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// An authenticated request builder.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// An authenticated DELETE.
    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .delete(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
    }

    /// Submit a job as a multipart upload (spec JSON + code zip bytes) with `token`.
    pub fn submit(
        &self,
        token: &str,
        spec: &serde_json::Value,
        code_zip: Vec<u8>,
    ) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/v1/jobs", self.url))
            .bearer_auth(token)
            .multipart(crate::jobs::submission_form(spec, code_zip))
    }

    /// An authenticated POST with a JSON body.
    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(body)
    }

    /// Waits until the lifecycle has listed this installation's RayJobs once
    /// (`forge_rayjob_relists_total` ≥ 1): a fault armed after this meets only later
    /// calls (a resync's list, a relist, the jobs' own calls). Returns `self`.
    pub async fn listed(self) -> TestGateway {
        self.counter_reaches(RELISTS, 1, "the lifecycle's first RayJob list")
            .await;
        self
    }

    /// The value of the unlabelled counter (or histogram count) `series`, 0 when absent.
    pub async fn counter(&self, series: &str) -> u64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits (at most 30 s) until the unlabelled counter `series` is at least `n`
    /// (`what` names the wait in a failure), and returns it.
    pub async fn counter_reaches(&self, series: &str, n: u64, what: &str) -> u64 {
        crate::wait::eventually(what, std::time::Duration::from_secs(30), || async {
            let seen = self.counter(series).await;
            if seen >= n {
                Ok(seen)
            } else {
                Err(crate::wait::not_yet(seen))
            }
        })
        .await
    }

    /// Waits (at most 30 s) until the API server holds exactly `n` requests (see
    /// `HoldRule`); `what` names the wait in a failure.
    pub async fn held_reaches(&self, n: u32, what: &str) {
        crate::wait::eventually(what, std::time::Duration::from_secs(30), || async {
            let held = self.sim.faults().state().held;
            if held == n {
                Ok(())
            } else {
                Err(crate::wait::not_yet(held))
            }
        })
        .await;
    }

    /// A console page, read over a session opened with the gateway's admin token
    /// (its status must be 200).
    pub async fn console_page(&self, path: &str) -> String {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client");
        let login = http
            .post(format!("{}/login", self.url))
            .header("sec-fetch-site", "same-origin")
            .form(&[("token", self.token.as_str())])
            .send()
            .await
            .expect("login");
        assert_eq!(login.status(), 303, "login");
        let cookie = login.headers()["set-cookie"]
            .to_str()
            .expect("ascii")
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        let page = http
            .get(format!("{}{path}", self.url))
            .header("cookie", cookie)
            .send()
            .await
            .expect("page");
        assert_eq!(page.status(), 200, "{path}");
        page.text().await.expect("page text")
    }

    /// Completed dispatcher passes (`forge_dispatch_pass_seconds_count`).
    pub async fn dispatcher_passes(&self) -> u64 {
        self.counter("forge_dispatch_pass_seconds_count").await
    }

    /// Wakes the dispatcher and waits until a whole pass that started after this call
    /// has completed: whatever it would do about the jobs submitted so far is done (a
    /// RayJob created, a queue standing published), so "nothing happened" can be
    /// asserted without guessing a delay.
    pub async fn dispatcher_settled(&self) {
        let before = self.dispatcher_passes().await;
        self.state.jobs.queue().wake();
        // A pass may be running already (it started before the wake): wait for it and
        // for the one the wake caused.
        crate::wait::eventually(
            "two dispatcher passes",
            std::time::Duration::from_secs(30),
            || async {
                let now = self.dispatcher_passes().await;
                if now >= before + 2 {
                    Ok(())
                } else {
                    self.state.jobs.queue().wake();
                    Err(crate::wait::not_yet(now))
                }
            },
        )
        .await;
    }
}
