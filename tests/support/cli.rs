//! Running the real `forge` binary against a test gateway: the binaries built into
//! the target directory (`forge` is another package's binary, so `CARGO_BIN_EXE_*`
//! is not available here; `cargo test --workspace` builds every binary first, and a
//! lone run needs `cargo build -p forge-cli` before), an isolated config directory
//! per client, and the output captured through pipes (so never a terminal).

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::gateway::TestGateway;

pub use crate::procs::binary;

/// What a `forge` run printed, and how it exited.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as JSON (`-o json`).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:#?}"))
    }

    /// Asserts exit code `code`; returns self.
    pub fn expect(self, code: i32) -> Self {
        assert_eq!(
            self.code, code,
            "forge exited {} (want {code}): {self:#?}",
            self.code
        );
        self
    }
}

/// A `forge` user: the gateway's URL and a token in the environment, and a config
/// directory of its own.
pub struct Forge {
    pub url: String,
    pub token: String,
    pub home: tempfile::TempDir,
}

impl Forge {
    /// A client of `gw` with its admin token.
    pub fn new(gw: &TestGateway) -> Forge {
        Forge {
            url: gw.url.clone(),
            token: gw.token.clone(),
            home: tempfile::tempdir().expect("config home"),
        }
    }

    /// The command, with `FORGE_URL`/`FORGE_TOKEN` set unless `logged_in` (then the
    /// stored login is used). `RUST_BACKTRACE=1` is set on purpose: errors must still
    /// be one line.
    pub fn command(&self, args: &[&str], logged_in: bool) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(binary("forge"));
        cmd.args(args)
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("HOME", self.home.path())
            .env("XDG_CACHE_HOME", self.home.path().join(".cache"))
            .env("RUST_BACKTRACE", "1")
            .env_remove("FORGE_URL")
            .env_remove("FORGE_TOKEN")
            .env_remove("FORGE_DEBUG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if !logged_in {
            cmd.env("FORGE_URL", &self.url)
                .env("FORGE_TOKEN", &self.token);
        }
        cmd
    }

    /// Runs `forge args…` to the end.
    pub async fn run(&self, args: &[&str]) -> Run {
        output(self.command(args, false)).await
    }

    /// Runs `forge args…` in `dir`.
    pub async fn run_in(&self, dir: &Path, args: &[&str]) -> Run {
        let mut cmd = self.command(args, false);
        cmd.current_dir(dir);
        output(cmd).await
    }
}

/// Longest one `forge` run may take in a test: a command that waits on a job that never
/// ends fails the test, naming the command, instead of hanging the suite.
pub const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Runs a command to the end (at most [`RUN_LIMIT`]; the process is killed after it)
/// and captures its output.
pub async fn output(mut cmd: tokio::process::Command) -> Run {
    let shown = format!("{:?}", cmd.as_std());
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{shown} did not end within {RUN_LIMIT:?}"))
        .expect("running forge");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A counter's value in the Prometheus text (`name{labels} value`), 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
