//! A throwaway PostgreSQL server for tests: Debian's `initdb` into a temporary
//! directory, then `postgres` on a free loopback port (and a Unix socket in that
//! directory), trusting local connections as user `forge`, without fsync. Stopped (fast
//! shutdown) and its directory removed on drop.
//!
//! PostgreSQL refuses to run as root, and tests here run as root: the server then runs
//! as the unprivileged `postgres` user the Debian package creates (or `nobody`), through
//! `setpriv`. `setpriv --pdeathsig` also stops the server when the thread that started
//! it exits, so a server whose test process died (a panic, a kill) does not outlive it.
//!
//! [`shared`] is one server per test process; [`database`] creates a fresh database on
//! it, so tests stay independent without paying for an `initdb` each. Without
//! PostgreSQL installed every start fails with a message saying how to install it
//! (`tests/run.sh` installs it): tests that need it never skip silently.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod standby;
pub use standby::Replicated;

/// How long a start may take before it is reported as failed.
const START_WITHIN: Duration = Duration::from_secs(60);

/// A running PostgreSQL server.
pub struct PostgresServer {
    /// The loopback port it listens on.
    pub port: u16,
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    pid: u32,
    waiter: Option<std::thread::JoinHandle<()>>,
    runs_as: Option<(u32, u32)>,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// The directory of Debian's PostgreSQL binaries (the newest version installed), or
/// the one holding `initdb` on `PATH`.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("FORGE_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .ok_or_else(|| {
            "PostgreSQL is not installed (no initdb): install Debian's server with \
             `apt-get install postgresql` (tests/run.sh does this), or point FORGE_PG_BIN \
             at a directory with initdb and postgres"
                .to_string()
        })
}

/// `(uid, gid)` of a user, from `id`.
fn ids_of(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        String::from_utf8(out.stdout).ok()?.trim().parse().ok()
    };
    Some((id("-u")?, id("-g")?))
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .is_some_and(|s| s.trim() == "0")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `bin/<program> args…`, as the unprivileged user when `runs_as` is set, dying with
/// the thread that spawns it.
fn command(bin: &Path, program: &str, runs_as: Option<(u32, u32)>, pdeathsig: bool) -> Command {
    let exe = bin.join(program);
    let setpriv = Path::new("/usr/bin/setpriv");
    if runs_as.is_none() && !(pdeathsig && setpriv.exists()) {
        return Command::new(exe);
    }
    let mut cmd = Command::new(setpriv);
    if let Some((uid, gid)) = runs_as {
        cmd.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups");
    }
    if pdeathsig {
        cmd.arg("--pdeathsig=INT");
    }
    cmd.arg("--").arg(exe);
    cmd
}

fn chown_tree(path: &Path, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    if path.is_dir() {
        for entry in std::fs::read_dir(path)? {
            chown_tree(&entry?.path(), (uid, gid))?;
        }
    }
    Ok(())
}

impl PostgresServer {
    /// Initialise a cluster in a fresh temporary directory and start it. Panics with
    /// how to install PostgreSQL when it is missing.
    pub fn start() -> PostgresServer {
        Self::try_start().unwrap_or_else(|e| panic!("starting PostgreSQL for the tests: {e}"))
    }

    /// Like [`PostgresServer::start`], reporting failures.
    pub fn try_start() -> Result<PostgresServer, String> {
        Self::try_start_with(&["synchronous_commit=off"])
    }

    /// A fresh cluster started with `settings` (`name=value`).
    fn try_start_with(settings: &[&str]) -> Result<PostgresServer, String> {
        let bin = bin_dir()?;
        let runs_as = if is_root() {
            Some(
                ids_of("postgres")
                    .or_else(|| ids_of("nobody"))
                    .ok_or("running as root and neither user `postgres` nor `nobody` exists")?,
            )
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix("forge-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let data = dir.path().join("data");
        if let Some(ids) = runs_as {
            chown_tree(dir.path(), ids)
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
        }
        let out = command(&bin, "initdb", runs_as, false)
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "forge",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Self::spawn(bin, dir, runs_as, settings)
    }

    /// Starts `postgres` on the cluster in `dir/data` on a free port, with `settings`
    /// (`name=value`) on top of the tests' own, and waits until it answers.
    fn spawn(
        bin: PathBuf,
        dir: tempfile::TempDir,
        runs_as: Option<(u32, u32)>,
        settings: &[&str],
    ) -> Result<PostgresServer, String> {
        let data = dir.path().join("data");
        let log = std::fs::File::create(dir.path().join("postgres.log"))
            .map_err(|e| format!("postgres log: {e}"))?;
        if let Some(ids) = runs_as {
            chown_tree(&dir.path().join("postgres.log"), ids).map_err(|e| e.to_string())?;
        }
        let port = free_port();
        let mut cmd = command(&bin, "postgres", runs_as, true);
        cmd.arg("-D")
            .arg(&data)
            .arg("-p")
            .arg(port.to_string())
            .arg("-k")
            .arg(dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=300",
            ]);
        for setting in settings {
            cmd.args(["-c", setting]);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
        // The server is spawned and waited for by a thread of its own that lives as long
        // as the server: `--pdeathsig` ties the server to that thread, not to whichever
        // test thread happened to start it.
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = tx.send(Ok(child.id()));
                let _ = child.wait();
            }
            Err(e) => {
                let _ = tx.send(Err(format!("spawning postgres: {e}")));
            }
        });
        let pid = rx.recv().map_err(|e| format!("postgres waiter: {e}"))??;
        let server = PostgresServer {
            port,
            bin,
            dir: Some(dir),
            pid,
            waiter: Some(waiter),
            runs_as,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-h", "127.0.0.1", "-U", "forge", "-q", "-p"])
                .arg(self.port.to_string())
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return Ok(());
            }
            if self.waiter.as_ref().is_some_and(|w| w.is_finished()) || Instant::now() > deadline {
                return Err(format!("postgres did not start: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        self.dir
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.path().join("postgres.log")).ok())
            .unwrap_or_default()
    }

    /// Creates a fresh, empty database and returns its URL
    /// (`postgres://forge@127.0.0.1:<port>/<name>?sslmode=disable`).
    pub fn database(&self) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "forge_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let out = Command::new(self.bin.join("createdb"))
            .args(["-h", "127.0.0.1", "-U", "forge", "-p"])
            .arg(self.port.to_string())
            .arg(&name)
            .output()
            .expect("running createdb");
        assert!(
            out.status.success(),
            "createdb {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.url(&name)
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgres://forge@127.0.0.1:{}/{name}?sslmode=disable",
            self.port
        )
    }

    /// Runs SQL with `psql` against database `name` (test set-up and inspection).
    pub fn psql(&self, name: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "forge",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-p",
            ])
            .arg(self.port.to_string())
            .args(["-d", name, "-c", sql])
            .output()
            .expect("running psql");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The unprivileged user the server runs as (root only).
    pub fn runs_as(&self) -> Option<(u32, u32)> {
        self.runs_as
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Fast shutdown: disconnect clients, stop cleanly.
        let _ = Command::new("kill")
            .args(["-INT", &self.pid.to_string()])
            .status();
        if let Some(w) = self.waiter.take() {
            let _ = w.join();
        }
        drop(self.dir.take());
    }
}

/// The server shared by every test of this process (started on first use, stopped
/// when the process exits).
pub fn shared() -> &'static PostgresServer {
    static SHARED: OnceLock<PostgresServer> = OnceLock::new();
    SHARED.get_or_init(|| {
        remove_stale_clusters();
        PostgresServer::start()
    })
}

/// The shared server's directory is never dropped (statics are not): remove the
/// directories of earlier test processes whose server is gone, once they are old
/// enough not to be a cluster another process is still initialising.
fn remove_stale_clusters() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let stale_name = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("forge-pg-"));
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(600));
        let running = std::fs::read_to_string(path.join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned))
            .is_some_and(|pid| Path::new("/proc").join(pid.trim()).exists());
        if stale_name && old && !running {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// The URL of a fresh database on the [`shared`] server.
pub fn database() -> String {
    shared().database()
}
