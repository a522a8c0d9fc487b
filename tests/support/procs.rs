//! Real processes for the end-to-end tests that kill, freeze or restart things: the
//! emulator as its own process (`forge-kubesim`, so a gateway's death leaves the
//! cluster running) and `forge-gateway serve` processes against it, each on its own
//! port and log file, configured only through `FORGE_*` variables (a shared data
//! directory, or a PostgreSQL URL).
//!
//! The binaries are taken from the cargo target directory (`forge-gateway` is another
//! package, so `CARGO_BIN_EXE_*` is not available here): `tests/run.sh` builds every
//! binary first; when running these tests alone, run
//! `cargo build -p forge-gateway -p forge-kubesim` before.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::jobs::JobClient;
use crate::plugins;

/// The namespace the emulator creates and the gateways use.
pub const NAMESPACE: &str = "starforge";
/// The admin token every gateway started here accepts (team `team-a`).
pub const TOKEN: &str = "process-test-admin-token";
/// A member of team-b (in the same tokens file).
pub const TEAM_B_TOKEN: &str = "process-test-team-b-member-token";

/// A built binary of the workspace.
pub fn binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| plugins::workspace_root().join("target"));
    let path = target.join("debug").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (`cargo build --workspace --bins`)",
        path.display()
    );
    path
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A child process, killed (SIGKILL) and reaped on drop.
pub struct Proc(Child);

impl Proc {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Sends a signal by name (`STOP`, `CONT`, `TERM`, `KILL`).
    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{name} {}", self.pid());
    }

    /// Whether it has exited (reaping it if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.try_wait().ok().flatten()
    }

    /// Waits for it to exit, at most `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "process {} did not exit",
                self.pid()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl From<Child> for Proc {
    fn from(child: Child) -> Self {
        Proc(child)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The emulator as its own process.
pub struct Emulator {
    _proc: Proc,
    /// Its log (`kubesim.log`), shown when a test fails.
    log: PathBuf,
    /// Its kubeconfig (for gateways started the kubeconfig way).
    pub kubeconfig: PathBuf,
    /// Its API server URL.
    pub url: String,
    /// A client for the test's own checks.
    pub kube: kube::Client,
}

impl Emulator {
    /// Starts `forge-kubesim` (process mode) with `nodes` and waits for its kubeconfig.
    pub async fn start(dir: &Path, nodes: &str) -> Emulator {
        Emulator::start_with(dir, nodes, &[]).await
    }

    /// [`Emulator::start`] with extra environment (`KUBESIM_*` settings).
    pub async fn start_with(dir: &Path, nodes: &str, env: &[(&str, &str)]) -> Emulator {
        let kubeconfig = dir.join("kubeconfig");
        let sim = Command::new(binary("forge-kubesim"))
            .envs(env.iter().copied())
            .args([
                "--nodes",
                nodes,
                "--mode",
                "process",
                "--namespaces",
                NAMESPACE,
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            // Inside the test's directory: a SIGKILLed emulator leaves nothing behind.
            .arg("--scratch-root")
            .arg(dir.join("cluster"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("kubesim.log")).expect("log"))
            .spawn()
            .expect("spawn forge-kubesim");
        let sim = Proc(sim);
        let deadline = Instant::now() + Duration::from_secs(30);
        let kcfg = loop {
            // The file may exist before it is completely written: parse until it does.
            if let Ok(k) = kube::config::Kubeconfig::read_from(&kubeconfig)
                && !k.clusters.is_empty()
            {
                break k;
            }
            assert!(
                Instant::now() < deadline,
                "forge-kubesim wrote no kubeconfig"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            dir.join("cluster").is_dir(),
            "forge-kubesim did not make its scratch root in the test's directory"
        );
        let url = kcfg.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .expect("kubeconfig server")
            .trim_end_matches('/')
            .to_string();
        let opts = kube::config::KubeConfigOptions::default();
        let cfg = kube::Config::from_custom_kubeconfig(kcfg, &opts)
            .await
            .expect("kube config");
        let kube = kube::Client::try_from(cfg).expect("kube client");
        Emulator {
            _proc: sim,
            log: dir.join("kubesim.log"),
            kubeconfig,
            url,
            kube,
        }
    }
}

/// Writes the tokens file (the admin [`TOKEN`]) and the reference chain file into `dir`.
pub fn write_gateway_files(dir: &Path) {
    for name in ["pool-series", "team-quota", "rwo-guard"] {
        plugins::component(name);
    }
    std::fs::write(
        dir.join("tokens.yaml"),
        format!(
            "tokens:\n  - team: team-a\n    role: admin\n    token_sha256: {}\n  \
             - team: team-b\n    role: member\n    token_sha256: {}\n",
            forge_gateway::auth::hash_token(TOKEN),
            forge_gateway::auth::hash_token(TEAM_B_TOKEN)
        ),
    )
    .expect("tokens file");
    let comp = plugins::workspace_root().join("target/plugins/components");
    std::fs::write(
        dir.join("chain.yaml"),
        format!(
            "plugins:\n  - name: pool-series\n    component: {0}/forge-policy-pool-series.wasm\n    settings: {{ default_series: h100, allowed: [h100] }}\n  - name: team-quota\n    component: {0}/forge-policy-team-quota.wasm\n    settings: {{ default: {{ \"*\": 1000 }} }}\n  - name: rwo-guard\n    component: {0}/forge-policy-rwo-guard.wasm\n",
            comp.display()
        ),
    )
    .expect("chain file");
}

/// A `forge-gateway serve` process.
pub struct Gateway {
    proc: Option<Proc>,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Its name (log file, replica identity).
    pub name: String,
    log: PathBuf,
}

/// How to start a gateway.
#[derive(Clone)]
pub struct GatewayOptions {
    /// Name: the log file (`<dir>/<name>.log`) and `FORGE_REPLICA`.
    pub name: String,
    /// Directory with `tokens.yaml` and `chain.yaml` ([`write_gateway_files`]).
    pub dir: PathBuf,
    /// The port to listen on.
    pub port: u16,
    /// `FORGE_*` (and other) variables beyond the common ones.
    pub env: Vec<(String, String)>,
}

impl GatewayOptions {
    /// Options for a gateway named `name` with the emulator's kubeconfig and its own
    /// data directory under `dir`.
    pub fn new(name: &str, dir: &Path, emulator: &Emulator) -> GatewayOptions {
        GatewayOptions {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            port: free_port(),
            env: vec![
                (
                    "KUBECONFIG".into(),
                    emulator.kubeconfig.display().to_string(),
                ),
                (
                    "FORGE_DATA_DIR".into(),
                    dir.join(format!("data-{name}")).display().to_string(),
                ),
            ],
        }
    }

    /// Adds (or replaces) a variable.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> GatewayOptions {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// Removes a variable.
    pub fn without(mut self, key: &str) -> GatewayOptions {
        self.env.retain(|(k, _)| k != key);
        self
    }

    /// Capsules and logs in `s3` (so Ray pods fetch capsules without the gateway: a
    /// job keeps running, and finishes, while its gateway is down).
    pub fn s3(self, s3: &forge_testkit::s3::S3Server) -> GatewayOptions {
        self.env("FORGE_S3_ENDPOINT", s3.endpoint.clone())
            .env("FORGE_S3_BUCKET", s3.bucket.clone())
            .env("FORGE_S3_ACCESS_KEY", s3.access_key.clone())
            .env("FORGE_S3_SECRET_KEY", s3.secret_key.clone())
    }

    /// Short leader-election timings (lease, renew deadline, retry in ms).
    pub fn leader_timings(self, lease: u64, renew: u64, retry: u64) -> GatewayOptions {
        self.env("FORGE_LEADER_LEASE_MS", lease.to_string())
            .env("FORGE_LEADER_RENEW_DEADLINE_MS", renew.to_string())
            .env("FORGE_LEADER_RETRY_MS", retry.to_string())
    }
}

/// What a failing test shows of a process's log: its last warnings and errors, then its
/// last lines (the log itself is in a temporary directory that goes with the test).
pub fn log_excerpt(what: &str, path: &Path) -> String {
    const PROBLEMS: usize = 30;
    const LAST: usize = 15;
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let problems: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("panicked"))
        .collect();
    let skip = problems.len().saturating_sub(PROBLEMS);
    let last = lines.len().saturating_sub(LAST);
    format!(
        "=== {what}: {} warnings/errors (the last {PROBLEMS}) ===\n{}\n=== {what}: its last {LAST} lines ===\n{}\n",
        problems.len(),
        problems[skip..].join("\n"),
        lines[last..].join("\n")
    )
}

impl Drop for Gateway {
    /// A failing test shows what the gateway logged (the process is stopped by [`Proc`]).
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{}",
                log_excerpt(&format!("gateway {}", self.name), &self.log)
            );
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", log_excerpt("forge-kubesim", &self.log));
        }
    }
}

impl Gateway {
    /// Starts the process (does not wait for it: see [`Gateway::wait_ready`]).
    pub fn spawn(opts: &GatewayOptions) -> Gateway {
        let url = format!("http://127.0.0.1:{}", opts.port);
        let log = opts.dir.join(format!("{}.log", opts.name));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("gateway log");
        let mut cmd = Command::new(binary("forge-gateway"));
        cmd.arg("serve")
            .arg("--policy-chain")
            .arg(opts.dir.join("chain.yaml"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &opts.dir)
            .env("FORGE_TOKENS_FILE", opts.dir.join("tokens.yaml"))
            .env("FORGE_LISTEN", format!("127.0.0.1:{}", opts.port))
            .env("FORGE_PUBLIC_URL", &url)
            .env("FORGE_REPLICA", &opts.name)
            .env("FORGE_DEFAULT_FLEET_KIND", "local")
            .env("FORGE_KUBERAY_RAY_VERSION", "2.55.1")
            .env("FORGE_IMAGE_NEMO_RL", "rayproject/ray:2.55.1")
            .env("FORGE_K8S_NAMESPACE", NAMESPACE)
            .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
            // Debug builds sharing two cores with the other tests, PostgreSQL and the
            // emulators: the default 50 ms per plugin call failed an admission with
            // `policy-failed` (deadline) under CI load. Plugin deadlines are tested
            // in-process (the host's and the hostile plugin's tests), not here.
            .env("FORGE_POLICY_DEADLINE_MS", "1000")
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn forge-gateway");
        Gateway {
            proc: Some(Proc(child)),
            url,
            name: opts.name.clone(),
            log,
        }
    }

    /// Starts the process and waits until `/readyz` answers 200.
    pub async fn start(opts: &GatewayOptions) -> Gateway {
        let mut g = Gateway::spawn(opts);
        g.wait_ready(Duration::from_secs(60)).await;
        g
    }

    /// Waits until `/readyz` answers 200 (panics with the log if it exits or times out).
    pub async fn wait_ready(&mut self, within: Duration) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(r) = http.get(format!("{}/readyz", self.url)).send().await
                && r.status() == 200
            {
                return;
            }
            if let Some(status) = self.proc.as_mut().and_then(Proc::exited) {
                panic!("gateway {} exited with {status}: {}", self.name, self.log());
            }
            assert!(
                Instant::now() < deadline,
                "gateway {} not ready: {}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A job client with the admin token.
    pub fn client(&self) -> JobClient {
        JobClient::new(&self.url, TOKEN)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process.
    pub fn proc(&self) -> &Proc {
        self.proc.as_ref().expect("gateway running")
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        let mut p = self.proc.take().expect("gateway running");
        p.0.kill().expect("SIGKILL the gateway");
        p.0.wait().expect("reap the gateway");
    }

    /// SIGTERM (what Kubernetes sends), and wait for a clean exit.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let mut p = self.proc.take().expect("gateway running");
        p.signal("TERM");
        p.wait_exit(Duration::from_secs(30)).await
    }

    /// `/readyz` as JSON (`None` when it does not answer within a second).
    pub async fn readyz(&self) -> Option<Value> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .expect("http");
        let r = http.get(format!("{}/readyz", self.url)).send().await.ok()?;
        r.json().await.ok()
    }

    /// Whether `/readyz` says this replica leads.
    pub async fn is_leader(&self) -> bool {
        self.readyz().await.is_some_and(|r| r["role"] == "leader")
    }

    /// One metric's value from `/metrics` (a line `<series> <value>`), 0 if absent.
    pub async fn metric(&self, series: &str) -> f64 {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .expect("http");
        let text = http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }
}
