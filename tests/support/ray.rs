//! Real Ray for the end-to-end tests: the Ray installation `tests/run.sh` provides
//! (`FORGE_TEST_RAY_VENV`, made by `deploy/install-ray.sh`), a lock that runs one
//! real-Ray cluster at a time (every one of them is a few hundred MiB of raylets, GCS
//! and workers on a 2-core machine), the Ray processes an emulator started (found by
//! the variable the kubelet gives each of them, and by the pod's `bin` under the
//! emulator's scratch root on their `PATH`, so another emulator's are not counted), and
//! the dev gateway as a process of its own (`forge-gateway dev --ray-venv`), to kill.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::jobs::JobClient;
use crate::plugins;
use crate::procs::{Proc, binary, free_port};

/// The variable every process of an emulated Ray node carries (the node's temp dir,
/// which its supervisor removes): `forge_kubesim::controllers::ray::temp_dir::CLEAN_ENV`.
const NODE_MARK: &str = "FORGE_KUBESIM_REMOVE_AFTER";

/// The Ray virtualenv: `FORGE_TEST_RAY_VENV`. `None` outside CI when it is not set
/// (the test says it is skipped); in CI a missing Ray is a failure.
pub fn venv() -> Option<PathBuf> {
    match std::env::var_os("FORGE_TEST_RAY_VENV") {
        Some(v) if Path::new(&v).join("bin/ray").exists() => Some(PathBuf::from(v)),
        _ if std::env::var_os("CI").is_some() => panic!(
            "FORGE_TEST_RAY_VENV must name a virtualenv with ray[default] (tests/run.sh \
             makes one with deploy/install-ray.sh)"
        ),
        _ => {
            eprintln!(
                "skipping: FORGE_TEST_RAY_VENV is not set (bash deploy/install-ray.sh, then \
                 FORGE_TEST_RAY_VENV=$PWD/target/ray)"
            );
            None
        }
    }
}

/// Held while a test runs a real-Ray cluster: one at a time.
pub async fn one_cluster_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// A process of an emulated Ray node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RayProcess {
    pub pid: u32,
    /// Its node's temp dir.
    pub node: String,
    pub cmdline: String,
}

/// Every live process of a Ray node of the emulator whose scratch root is `scope`
/// (zombies excluded).
pub fn ray_processes(scope: &Path) -> Vec<RayProcess> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mark = format!("{NODE_MARK}=");
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let vars: Vec<&str> = environ
            .split(|b| *b == 0)
            .filter_map(|v| std::str::from_utf8(v).ok())
            .collect();
        let Some(node) = vars.iter().find_map(|v| v.strip_prefix(&mark)) else {
            continue;
        };
        let in_scope = vars
            .iter()
            .filter_map(|v| v.strip_prefix("PATH="))
            .any(|p| std::env::split_paths(p).any(|d| d.starts_with(scope)));
        if !in_scope {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.starts_with('Z'));
        if state != Some(false) {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .unwrap_or_default();
        found.push(RayProcess {
            pid,
            node: node.to_owned(),
            cmdline,
        });
    }
    found
}

/// Waits (at most `within`) until no Ray node of the emulator with scratch root `scope`
/// has a process left; panics listing what is left.
pub async fn wait_no_ray_processes(scope: &Path, within: Duration, after: &str) {
    crate::wait::eventually(&format!("no Ray process left {after}"), within, || async {
        let left = ray_processes(scope);
        if left.is_empty() {
            Ok(())
        } else {
            Err(crate::wait::not_yet(left))
        }
    })
    .await;
}

/// Waits (at most `within`) until every one of `dirs` (Ray nodes' temp dirs) is removed.
pub async fn wait_removed(dirs: &[PathBuf], within: Duration) {
    crate::wait::eventually("the Ray nodes' temp dirs removed", within, || async {
        let left: Vec<&PathBuf> = dirs.iter().filter(|d| d.exists()).collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(crate::wait::not_yet(format!("{left:?}")))
        }
    })
    .await;
}

/// The temp dirs of the Ray nodes running now (their processes' marks) of the emulator
/// with scratch root `scope`.
pub fn node_dirs(scope: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ray_processes(scope)
        .into_iter()
        .map(|p| PathBuf::from(p.node))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The last lines of every Ray log of every node of the emulator with scratch root
/// `scope` (the files under each node's `session_latest/logs`: GCS, raylet, agents,
/// drivers, workers' errors): what a test that timed out on a Ray program prints.
pub fn node_log_tails(scope: &Path, lines: usize) -> String {
    let mut out = String::new();
    for dir in node_dirs(scope) {
        let logs = dir.join("session_latest/logs");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&logs)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.retain(|f| f.is_file() && std::fs::metadata(f).is_ok_and(|m| m.len() > 0));
        files.sort();
        out.push_str(&format!(
            "=== Ray node {} ({} logs)\n",
            dir.display(),
            files.len()
        ));
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            out.push_str(&format!("--- {}\n{}\n", file.display(), tail.join("\n")));
        }
    }
    if out.is_empty() {
        out.push_str("(no Ray node is running)\n");
    }
    out
}

/// `forge-gateway dev` on real Ray as a process of its own, on a free port, with its
/// data directory and its emulator's scratch root (`TMPDIR`) under `dir`; killed on drop.
pub struct DevProcess {
    pub proc: Proc,
    /// Its emulator's scratch root is under this directory (see [`ray_processes`]).
    pub scope: PathBuf,
    pub url: String,
    pub token: String,
    pub log: PathBuf,
}

impl DevProcess {
    /// Starts it (`nodes`: its `--nodes` layout) and waits until it printed its token
    /// and answers `/readyz`.
    pub async fn start(dir: &Path, venv: &Path, nodes: &str) -> DevProcess {
        for name in ["pool-series", "team-quota", "rwo-guard"] {
            plugins::component(name);
        }
        let port = free_port();
        let log = dir.join("dev.log");
        let file = std::fs::File::create(&log).expect("dev log");
        let child = Command::new(binary("forge-gateway"))
            .arg("dev")
            .arg("--nodes")
            .arg(nodes)
            .arg("--plugins-dir")
            .arg(plugins::workspace_root().join("target/plugins/components"))
            .arg("--ray-venv")
            .arg(venv)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", dir)
            .env("TMPDIR", dir)
            .env("FORGE_LISTEN", format!("127.0.0.1:{port}"))
            .env("FORGE_DATA_DIR", dir.join("data"))
            .env("RUST_LOG", "info,kube_client=warn,kube_runtime=warn")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log handle"))
            .stderr(file)
            .spawn()
            .expect("spawn forge-gateway dev");
        let proc = Proc::from(child);
        let url = format!("http://127.0.0.1:{port}");
        let token = crate::wait::eventually(
            "forge-gateway dev to print its token",
            Duration::from_secs(60),
            || async {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let token = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("token:"))
                    .and_then(|rest| rest.split_whitespace().next());
                match token {
                    Some(t) => Ok(t.to_owned()),
                    None => Err(crate::wait::not_yet(text)),
                }
            },
        )
        .await;
        let http = reqwest::Client::new();
        crate::wait::eventually(
            "forge-gateway dev ready",
            Duration::from_secs(60),
            || async {
                match http.get(format!("{url}/readyz")).send().await {
                    Ok(r) if r.status() == 200 => Ok(()),
                    other => Err(crate::wait::not_yet(format!("{other:?}"))),
                }
            },
        )
        .await;
        DevProcess {
            proc,
            scope: dir.to_path_buf(),
            url,
            token,
            log,
        }
    }

    /// A job-API client with its admin token.
    pub fn client(&self) -> JobClient {
        JobClient::new(&self.url, &self.token)
    }
}
