//! A primary with a synchronous streaming standby, for failover tests: the primary
//! runs with `synchronous_commit=on` and, once the standby (a `pg_basebackup -R` of
//! it) streams, `synchronous_standby_names='*'`, so a commit the primary acknowledges
//! is flushed on the standby too. A test kills the primary with SIGKILL (the
//! postmaster and its backends, as a machine that dies) and promotes the standby; the
//! gateway names both hosts with `target_session_attrs=read-write`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{PostgresServer, START_WITHIN, chown_tree, command};

/// A primary, its standby and one database on them.
pub struct Replicated {
    pub primary: PostgresServer,
    pub standby: PostgresServer,
    /// The database's name.
    pub name: String,
}

impl Replicated {
    /// A primary with one database, and a synchronous standby streaming from it.
    pub fn start() -> Replicated {
        Self::try_start().unwrap_or_else(|e| panic!("starting a replicated PostgreSQL: {e}"))
    }

    fn try_start() -> Result<Replicated, String> {
        let primary = PostgresServer::try_start_with(&[
            "synchronous_commit=on",
            "wal_level=replica",
            "max_wal_senders=4",
            "wal_keep_size=64MB",
        ])?;
        let url = primary.database();
        let name = url
            .rsplit_once('/')
            .and_then(|(_, rest)| rest.split_once('?'))
            .map(|(name, _)| name.to_string())
            .ok_or("the database's name")?;
        let dir = tempfile::Builder::new()
            .prefix("forge-pg-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        if let Some(ids) = primary.runs_as {
            chown_tree(dir.path(), ids).map_err(|e| e.to_string())?;
        }
        let out = command(&primary.bin, "pg_basebackup", primary.runs_as, false)
            .args(["-h", "127.0.0.1", "-U", "forge", "-p"])
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "--no-sync", "--checkpoint=fast"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running pg_basebackup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "pg_basebackup failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let standby = PostgresServer::spawn(
            primary.bin.clone(),
            dir,
            primary.runs_as,
            &["hot_standby=on"],
        )?;
        let pair = Replicated {
            primary,
            standby,
            name,
        };
        pair.wait_replication("streaming")?;
        pair.primary.psql(
            &pair.name,
            "ALTER SYSTEM SET synchronous_standby_names = '*'",
        );
        pair.primary.psql(&pair.name, "SELECT pg_reload_conf()");
        pair.wait_replication("sync")?;
        Ok(pair)
    }

    /// Waits until the primary reports its standby `streaming`, or `sync`.
    fn wait_replication(&self, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + START_WITHIN;
        let column = if what == "sync" {
            "sync_state"
        } else {
            "state"
        };
        loop {
            let states = self.primary.psql(
                &self.name,
                &format!("SELECT {column} FROM pg_stat_replication"),
            );
            if states.lines().any(|l| l.trim() == what) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby is not {what} ({states:?}): {}",
                    self.standby.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The URL of the database naming both servers: the gateway connects to the one
    /// that accepts writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://forge@127.0.0.1:{},127.0.0.1:{}/{}?sslmode=disable&target_session_attrs=read-write",
            self.primary.port, self.standby.port, self.name
        )
    }

    /// SIGKILL to the primary's postmaster and every backend it started: the
    /// connections drop as when its machine dies.
    pub fn kill_primary(&self) {
        let pid = self.primary.pid.to_string();
        let _ = Command::new("kill").args(["-STOP", &pid]).status();
        let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
        let _ = Command::new("kill").args(["-KILL", &pid]).status();
        let gone = Instant::now() + Duration::from_secs(10);
        while Path::new("/proc").join(&pid).exists() && Instant::now() < gone {
            // A zombie until its waiter thread reaps it.
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.split_whitespace().nth(2) == Some("Z") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes the standby to primary and waits until it accepts writes.
    pub fn promote_standby(&self) {
        let promoted = self.standby.psql(&self.name, "SELECT pg_promote(true, 60)");
        assert_eq!(promoted.trim(), "t", "pg_promote: {}", self.standby.log());
    }
}
