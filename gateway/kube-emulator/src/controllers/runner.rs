//! Process mode of the simulated kubelet: what really runs on the host.
//!
//! * Init containers: `command` + `args` (with `$(VAR)` references expanded) run with
//!   `sh` and the container's environment as the kubelet built it, after every
//!   volumeMount path of the container (in command, args and env values) is replaced
//!   by the volume's host directory (`hostpaths`), so a capsule-fetch init container
//!   really downloads and checks its file.
//! * Every process gets only its container's environment plus `HOSTNAME` and the few
//!   host variables an image would provide (`container_command`): nothing of the
//!   emulator's (or its embedding process's) environment leaks into a job.
//! * The Ray driver of a submitted job: `runtimeEnvYAML` `working_dir` is fetched
//!   (`http(s)://`, or `file://` mapped through the HEAD pod's volumeMounts), its
//!   SHA-256 is checked against the `forge.dev/capsule-sha256` annotation when present,
//!   it is unpacked as Ray does (a single top-level directory is stripped, `__MACOSX`
//!   ignored), and the entrypoint runs there with `sh -c`, env = head container env +
//!   `env_vars` (+ `PYTHONPATH`), on top of the host environment (for `PATH`).

use std::collections::BTreeMap;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::container_env::expand;
use super::hostpaths::{create_dir_under, map_path, rewrite_mounts};
use super::memory_limit::exceeded;
use crate::logs::LogStore;

/// Errors of the process runner; the message is what the driver/container log shows.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The working_dir URI scheme is not one the emulator can fetch.
    #[error(
        "unsupported working_dir URI {0:?} (the emulator fetches http://, https:// and file:// zips)"
    )]
    Unsupported(String),
    /// A `file://` path is not under an emptyDir volumeMount of the head container.
    #[error("{0} is not on an emptyDir volume mounted in the head container")]
    NotMounted(String),
    /// Download failed.
    #[error("failed to download {url}: {reason}")]
    Fetch {
        /// URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The capsule does not have the published SHA-256.
    #[error("capsule sha256 mismatch: expected {expected} got {got}")]
    Checksum {
        /// Published digest.
        expected: String,
        /// Digest of the fetched bytes.
        got: String,
    },
    /// The archive is not a valid zip.
    #[error("invalid zip archive: {0}")]
    Zip(#[from] zip::result::ZipError),
    /// Local I/O.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// runtimeEnvYAML did not parse.
    #[error("invalid runtimeEnvYAML: {0}")]
    RuntimeEnv(String),
}

/// Host variables a container process keeps: what an image would provide for finding
/// and running its tools (`PATH`, `HOME`, locale, temp dir, pyenv's root). Nothing
/// else of the emulator's environment reaches a container.
const HOST_ENV: [&str; 7] = [
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PYENV_ROOT",
    "PYENV_VERSION",
];

/// A command with a container's base environment: [`HOST_ENV`] from the host and
/// `HOSTNAME` (the pod's name); the container's own variables come on top.
pub fn container_command(program: &str, hostname: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_clear();
    for k in HOST_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd.env("HOSTNAME", hostname);
    cmd
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// How a process run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code (137 when a signal ended it).
    Code(i32),
    /// It was killed because the run was cancelled.
    Cancelled,
    /// It was killed for going over its memory limit, with this resident memory.
    OomKilled {
        /// Bytes resident when it was seen over the limit.
        rss: u64,
    },
}

impl Exit {
    /// The exit code a container status shows (`None`: cancelled).
    pub fn code(self) -> Option<i32> {
        match self {
            Exit::Code(c) => Some(c),
            Exit::Cancelled => None,
            Exit::OomKilled { .. } => Some(137),
        }
    }
}

/// Streams a child's stdout+stderr into a container log, line by line, until it exits,
/// `cancel` fires or its process group goes over `memory_limit` bytes
/// ([`memory_limit`](super::memory_limit)).
pub async fn run_logged(
    cmd: Command,
    logs: &Arc<LogStore>,
    log: (&str, &str, &str),
    cancel: &CancellationToken,
    tee: Option<&mut Vec<u8>>,
    memory_limit: Option<u64>,
) -> std::io::Result<Exit> {
    let never = Graceful {
        terminate: CancellationToken::new(),
        grace: std::time::Duration::ZERO,
    };
    run_logged_graceful(cmd, logs, log, cancel, &never, tee, memory_limit).await
}

/// A stop that lets the process end by itself first: once `terminate` fires, its
/// process group gets SIGTERM and, if it is still there `grace` later, SIGKILL (what
/// Ray's job supervisor does on `ray job stop`).
pub struct Graceful {
    /// Asks for the stop.
    pub terminate: CancellationToken,
    /// How long the group has between SIGTERM and SIGKILL.
    pub grace: std::time::Duration,
}

/// [`run_logged`], also stopped gracefully by `graceful`: a run it stopped ends
/// [`Exit::Cancelled`] whether the process exited on the signal or was killed.
pub async fn run_logged_graceful(
    mut cmd: Command,
    logs: &Arc<LogStore>,
    (ns, pod, container): (&str, &str, &str),
    cancel: &CancellationToken,
    graceful: &Graceful,
    mut tee: Option<&mut Vec<u8>>,
    memory_limit: Option<u64>,
) -> std::io::Result<Exit> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    fn pump(
        r: impl AsyncRead + Unpin + Send + 'static,
        tx: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
    ) {
        tokio::spawn(async move {
            let mut r = BufReader::new(r);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    if let Some(out) = child.stdout.take() {
        pump(out, tx.clone());
    }
    if let Some(err) = child.stderr.take() {
        pump(err, tx.clone());
    }
    drop(tx);
    let over = async {
        match (memory_limit, pid.and_then(|p| i32::try_from(p).ok())) {
            (Some(limit), Some(pgid)) => exceeded(pgid, limit).await,
            _ => std::future::pending().await,
        }
    };
    tokio::pin!(over);
    let hard_stop = tokio::time::sleep(std::time::Duration::MAX / 4);
    tokio::pin!(hard_stop);
    let mut terminated = false;
    let mut killed: Option<Exit> = None;
    let mut exited: Option<std::process::ExitStatus> = None;
    loop {
        tokio::select! {
            // The main process ended: what it left running in its group goes with it,
            // as a container runtime kills the container's cgroup — unless a graceful
            // stop runs: then, as Ray's supervisor does, every process it signalled
            // has its grace (a shell dies on SIGTERM; the program it runs may not).
            status = child.wait(), if exited.is_none() => {
                exited = Some(status?);
                if !terminated {
                    kill_group(pid);
                }
            }
            line = rx.recv() => match line {
                Some(mut l) => {
                    if !l.ends_with(b"\n") { l.push(b'\n'); }
                    logs.append(ns, pod, container, &l);
                    if let Some(t) = tee.as_deref_mut() { t.extend_from_slice(&l); }
                }
                None => break,
            },
            () = cancel.cancelled(), if killed.is_none() => {
                killed = Some(Exit::Cancelled);
                kill_group(pid);
                let _ = child.start_kill();
            }
            () = graceful.terminate.cancelled(), if !terminated && killed.is_none() && exited.is_none() => {
                terminated = true;
                signal_group(pid, "-TERM");
                hard_stop.as_mut().reset(tokio::time::Instant::now() + graceful.grace);
            }
            () = &mut hard_stop, if terminated && killed.is_none() => {
                killed = Some(Exit::Cancelled);
                kill_group(pid);
                let _ = child.start_kill();
            }
            rss = &mut over, if killed.is_none() => {
                killed = Some(Exit::OomKilled { rss });
                kill_group(pid);
                let _ = child.start_kill();
            }
        }
    }
    let status = match exited {
        Some(status) => status,
        None => child.wait().await?,
    };
    if terminated {
        kill_group(pid);
        return Ok(Exit::Cancelled);
    }
    Ok(killed.unwrap_or(Exit::Code(status.code().unwrap_or(137))))
}

fn kill_group(pid: Option<u32>) {
    signal_group(pid, "-KILL");
}

/// Sends `signal` (`-TERM`, `-KILL`) to the child's whole process group (it leads
/// its own: sh and its children).
fn signal_group(pid: Option<u32>, signal: &str) {
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args([signal, "--", &format!("-{pid}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs an init container's command on the host (process mode) and returns its exit
/// code (`None` when cancelled). Output goes to the container's log.
pub async fn run_init_container(
    root: &Path,
    logs: &Arc<LogStore>,
    pod: &Pod,
    c: &Container,
    env: &[(String, String)],
    cancel: &CancellationToken,
) -> std::io::Result<Exit> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let mounts = c.volume_mounts.clone().unwrap_or_default();
    let rw = |s: &str| rewrite_mounts(root, pod, &mounts, s);
    let argv: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .map(|s| rw(&expand(s, env)))
        .collect();
    let workdir = root
        .join("pods")
        .join(pod.uid().unwrap_or_default())
        .join("containers")
        .join(&c.name);
    create_dir_under(root, &workdir)?;
    let mut cmd = container_command("sh", &name);
    match argv.first().map(|a| {
        Path::new(a)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("")
    }) {
        Some("sh" | "bash" | "dash" | "ash") => {
            cmd.args(&argv[1..]);
        }
        Some(_) => {
            let joined: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
            cmd.arg("-c").arg(joined.join(" "));
        }
        None => {
            cmd.arg("-c").arg("true");
        }
    }
    cmd.current_dir(&workdir);
    for (k, v) in env {
        cmd.env(k, rw(v));
    }
    // Held to its `limits.memory` as a node's cgroup would (OOMKilled, exit 137).
    let limit = super::memory_limit::MemoryLimit::of(c).map(|l| l.bytes);
    run_logged(cmd, logs, (&ns, &name, &c.name), cancel, None, limit).await
}

/// Fetches `working_dir` bytes: `http(s)://` over the network, `file://` through the
/// head pod's volumeMounts (container 0).
pub async fn fetch_working_dir(
    root: &Path,
    head: Option<&Pod>,
    uri: &str,
) -> Result<Vec<u8>, RunnerError> {
    if uri.starts_with("http://") || uri.starts_with("https://") {
        let fetch_err = |e: reqwest::Error| RunnerError::Fetch {
            url: uri.to_owned(),
            reason: e.to_string(),
        };
        let resp = reqwest::get(uri)
            .await
            .map_err(fetch_err)?
            .error_for_status()
            .map_err(fetch_err)?;
        return Ok(resp.bytes().await.map_err(fetch_err)?.to_vec());
    }
    if let Some(path) = uri.strip_prefix("file://") {
        let head = head.ok_or_else(|| RunnerError::NotMounted(path.to_owned()))?;
        let mounts = head
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.volume_mounts.clone())
            .unwrap_or_default();
        let host = map_path(root, head, &mounts, path)
            .ok_or_else(|| RunnerError::NotMounted(path.to_owned()))?;
        return Ok(tokio::fs::read(&host).await?);
    }
    Err(RunnerError::Unsupported(uri.to_owned()))
}

/// Checks `bytes` against a hex SHA-256.
pub fn verify_sha256(bytes: &[u8], expected: &str) -> Result<(), RunnerError> {
    let got = hex::encode(Sha256::digest(bytes));
    if got.eq_ignore_ascii_case(expected.trim()) {
        Ok(())
    } else {
        Err(RunnerError::Checksum {
            expected: expected.trim().to_owned(),
            got,
        })
    }
}

/// Unpacks a zip like Ray's `unzip_package`: if the archive has a single top-level
/// directory (ignoring `__MACOSX`), its contents become the working dir. `dest` must
/// exist; nothing is made above it (a stopping simulator's removed scratch root stays
/// removed).
pub fn unpack_zip(bytes: &[u8], dest: &Path) -> Result<(), RunnerError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))?;
    let mut names: Vec<(PathBuf, bool)> = Vec::new();
    for i in 0..archive.len() {
        let f = archive.by_index(i)?;
        if let Some(p) = f.enclosed_name() {
            names.push((p, f.is_dir()));
        }
    }
    let top: std::collections::BTreeSet<String> = names
        .iter()
        .filter_map(|(p, _)| {
            p.components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
        })
        .filter(|c| c != "__MACOSX")
        .collect();
    let strip = top.len() == 1
        && names.iter().any(|(p, dir)| {
            let first = p
                .components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned());
            first.as_ref() == top.iter().next() && (p.components().count() > 1 || *dir)
        });
    for i in 0..archive.len() {
        let mut f = archive.by_index(i)?;
        let Some(p) = f.enclosed_name() else { continue };
        if p.components()
            .next()
            .is_some_and(|c| c.as_os_str() == "__MACOSX")
        {
            continue;
        }
        let rel: PathBuf = if strip {
            p.components().skip(1).collect()
        } else {
            p.clone()
        };
        if rel.as_os_str().is_empty() {
            continue;
        }
        let out = dest.join(&rel);
        if f.is_dir() {
            create_dir_under(dest, &out)?;
            continue;
        }
        if let Some(parent) = out.parent() {
            create_dir_under(dest, parent)?;
        }
        let mut buf = Vec::new();
        f.read_to_end(&mut buf)?;
        std::fs::write(&out, buf)?;
        #[cfg(unix)]
        if let Some(mode) = f.unix_mode() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode & 0o777))?;
        }
    }
    Ok(())
}

/// The parts of `runtimeEnvYAML` the emulator uses.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RuntimeEnv {
    /// `working_dir`.
    pub working_dir: Option<String>,
    /// `env_vars`.
    pub env_vars: BTreeMap<String, String>,
    /// `pip`: a list, or `{packages: [...]}`.
    pub pip: Vec<String>,
}

/// Parses `runtimeEnvYAML`.
pub fn parse_runtime_env(yaml: Option<&str>) -> Result<RuntimeEnv, RunnerError> {
    let Some(yaml) = yaml.filter(|y| !y.trim().is_empty()) else {
        return Ok(RuntimeEnv::default());
    };
    let v: serde_yaml::Value =
        serde_yaml::from_str(yaml).map_err(|e| RunnerError::RuntimeEnv(e.to_string()))?;
    let working_dir = v
        .get("working_dir")
        .and_then(serde_yaml::Value::as_str)
        .map(str::to_owned);
    let env_vars = v
        .get("env_vars")
        .and_then(serde_yaml::Value::as_mapping)
        .map(|m| {
            m.iter()
                .filter_map(|(k, val)| {
                    let k = k.as_str()?.to_owned();
                    let val = match val {
                        serde_yaml::Value::String(s) => s.clone(),
                        other => serde_yaml::to_string(other).ok()?.trim().to_owned(),
                    };
                    Some((k, val))
                })
                .collect()
        })
        .unwrap_or_default();
    let pip_list = v.get("pip").map(|p| p.get("packages").unwrap_or(p));
    let pip = pip_list
        .and_then(serde_yaml::Value::as_sequence)
        .map(|s| {
            s.iter()
                .filter_map(serde_yaml::Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(RuntimeEnv {
        working_dir,
        env_vars,
        pip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn zip_of(entries: &[(&str, &str)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, body) in entries {
            if name.ends_with('/') {
                w.add_directory(*name, zip::write::SimpleFileOptions::default())
                    .expect("dir");
            } else {
                w.start_file(*name, zip::write::SimpleFileOptions::default())
                    .expect("file");
                w.write_all(body.as_bytes()).expect("write");
            }
        }
        w.finish().expect("finish").into_inner()
    }

    #[test]
    fn single_top_level_dir_is_stripped() {
        let dir = std::env::temp_dir().join(format!("kubesim-unzip-{}", std::process::id()));
        let bytes = zip_of(&[
            ("proj/", ""),
            ("proj/main.py", "print(1)"),
            ("__MACOSX/._main.py", "x"),
        ]);
        std::fs::create_dir_all(dir.join("a")).expect("dest a");
        unpack_zip(&bytes, &dir.join("a")).expect("unpack");
        assert!(dir.join("a/main.py").exists());
        assert!(!dir.join("a/__MACOSX").exists());
        let bytes = zip_of(&[("a.py", "1"), ("b/c.py", "2")]);
        std::fs::create_dir_all(dir.join("b")).expect("dest b");
        unpack_zip(&bytes, &dir.join("b")).expect("unpack");
        assert!(dir.join("b/a.py").exists() && dir.join("b/b/c.py").exists());
        assert!(
            unpack_zip(&bytes, &dir.join("gone")).is_err(),
            "a missing destination is not made"
        );
        assert!(!dir.join("gone").exists());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn checksum_mismatch_reads_clearly() {
        let e = verify_sha256(b"abc", "00").expect_err("mismatch");
        assert_eq!(
            e.to_string(),
            "capsule sha256 mismatch: expected 00 got ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(
            verify_sha256(
                b"abc",
                "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
            )
            .is_ok()
        );
    }

    #[test]
    fn runtime_env_parses() {
        let env = parse_runtime_env(Some(
            "working_dir: file:///forge/capsule/x.zip\nenv_vars:\n  A: b\n  N: 3\n",
        ))
        .expect("parse");
        assert_eq!(
            env.working_dir.as_deref(),
            Some("file:///forge/capsule/x.zip")
        );
        assert_eq!(env.env_vars.get("A").map(String::as_str), Some("b"));
        assert_eq!(env.env_vars.get("N").map(String::as_str), Some("3"));
        assert!(parse_runtime_env(Some("a: [")).is_err());
        assert!(env.pip.is_empty());
        let list = parse_runtime_env(Some("pip:\n  - requests==2.26.0\n  - pendulum==2.1.2\n"))
            .expect("pip list");
        assert_eq!(list.pip, ["requests==2.26.0", "pendulum==2.1.2"]);
        let dict = parse_runtime_env(Some("pip:\n  packages: [einops]\n  pip_check: false\n"))
            .expect("pip dict");
        assert_eq!(dict.pip, ["einops"]);
    }

    #[tokio::test]
    async fn run_logged_streams_and_reports_exit() {
        let logs = Arc::new(LogStore::new());
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo out; echo err >&2; exit 3");
        let code = run_logged(
            cmd,
            &logs,
            ("ns", "p", "c"),
            &CancellationToken::new(),
            None,
            None,
        )
        .await
        .expect("spawn");
        assert_eq!(code, Exit::Code(3));
        let log = String::from_utf8(logs.read("ns", "p", "c", None).expect("log")).expect("utf8");
        assert!(log.contains("out\n") && log.contains("err\n"), "{log}");
        let cancel = CancellationToken::new();
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("sleep 30");
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            c2.cancel();
        });
        let start = std::time::Instant::now();
        assert_eq!(
            run_logged(cmd, &logs, ("ns", "p", "d"), &cancel, None, None)
                .await
                .expect("spawn"),
            Exit::Cancelled
        );
        assert!(start.elapsed() < std::time::Duration::from_secs(5));
    }

    /// `sh -c` running a Python program that handles SIGTERM as `on_term` says, stopped
    /// gracefully with `grace` once it printed its first line: the exit, how long the
    /// stop took, and the log.
    async fn stopped_gracefully(
        on_term: &str,
        grace_ms: u64,
    ) -> (Exit, std::time::Duration, String) {
        let logs = Arc::new(LogStore::new());
        let program = format!(
            "import signal, sys, time\n\
             def term(*_):\n    print('SIGTERM', flush=True)\n    {on_term}\n\
             signal.signal(signal.SIGTERM, term)\n\
             print('ready', flush=True)\n\
             while True:\n    time.sleep(0.02)\n"
        );
        let mut cmd = Command::new("sh");
        // Not `exec`: the shell is the main process, as with an entrypoint, and dies on
        // the signal while the program it runs handles it.
        cmd.arg("-c")
            .arg("python3 -c \"$P\"; echo never-reached")
            .env("P", program);
        let graceful = Graceful {
            terminate: CancellationToken::new(),
            grace: std::time::Duration::from_millis(grace_ms),
        };
        let (logs2, terminate) = (logs.clone(), graceful.terminate.clone());
        let stop = tokio::spawn(async move {
            while !String::from_utf8_lossy(&logs2.read("ns", "p", "g", None).unwrap_or_default())
                .contains("ready")
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            terminate.cancel();
            std::time::Instant::now()
        });
        let never = CancellationToken::new();
        let exit = run_logged_graceful(cmd, &logs, ("ns", "p", "g"), &never, &graceful, None, None)
            .await
            .expect("spawn");
        let asked = stop.await.expect("stopper");
        let log = String::from_utf8(logs.read("ns", "p", "g", None).expect("log")).expect("utf8");
        (exit, asked.elapsed(), log)
    }

    #[tokio::test]
    async fn a_graceful_stop_signals_then_kills_at_the_end_of_the_grace() {
        // It exits on the signal: the stop is over at once.
        let (exit, took, log) =
            stopped_gracefully("print('saved', flush=True); sys.exit(0)", 5_000).await;
        assert_eq!(exit, Exit::Cancelled);
        assert!(took < std::time::Duration::from_secs(4), "{took:?}");
        assert!(log.contains("SIGTERM\nsaved\n"), "{log}");
        assert!(!log.contains("never-reached"), "{log}");
        // It ignores the signal: killed when the grace ends, not before.
        let (exit, took, log) = stopped_gracefully("pass", 600).await;
        assert_eq!(exit, Exit::Cancelled);
        assert!(took >= std::time::Duration::from_millis(600), "{took:?}");
        assert!(took < std::time::Duration::from_secs(5), "{took:?}");
        assert!(log.contains("SIGTERM"), "{log}");
    }

    #[tokio::test]
    async fn a_run_over_its_memory_limit_is_killed() {
        let logs = Arc::new(LogStore::new());
        let mut cmd = Command::new("python3");
        cmd.arg("-c").arg(
            "print('allocating', flush=True)\nb = b'x' * (256 << 20)\nimport time\ntime.sleep(30)",
        );
        let start = std::time::Instant::now();
        let exit = run_logged(
            cmd,
            &logs,
            ("ns", "p", "m"),
            &CancellationToken::new(),
            None,
            Some(128 << 20),
        )
        .await
        .expect("spawn");
        assert!(
            matches!(exit, Exit::OomKilled { rss } if rss > 128 << 20),
            "{exit:?}"
        );
        assert_eq!(exit.code(), Some(137));
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "killed, not slept"
        );
        let log = String::from_utf8(logs.read("ns", "p", "m", None).expect("log")).expect("utf8");
        assert!(log.contains("allocating"), "{log}");
    }
}
