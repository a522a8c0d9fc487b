//! A real OTLP/HTTP trace receiver for the observability tests: `tests/otlp/receiver.py`
//! (the official `opentelemetry-proto` messages from PyPI) in the venv `tests/run.sh`
//! makes (`FORGE_TEST_OTLP_PYTHON`, from `tests/otlp/install.sh`), read back as JSON.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::plugins;

/// The receiver's Python: `FORGE_TEST_OTLP_PYTHON`. `None` outside CI when it is not
/// set (the test says it is skipped); in CI a missing receiver is a failure.
pub fn python() -> Option<PathBuf> {
    match std::env::var_os("FORGE_TEST_OTLP_PYTHON") {
        Some(p) if PathBuf::from(&p).exists() => Some(PathBuf::from(p)),
        _ if std::env::var_os("CI").is_some() => panic!(
            "FORGE_TEST_OTLP_PYTHON must name the OTLP receiver's python (tests/run.sh makes \
             it with tests/otlp/install.sh)"
        ),
        _ => {
            eprintln!(
                "skipping: FORGE_TEST_OTLP_PYTHON is not set (FORGE_TEST_OTLP_PYTHON=$(bash \
                 tests/otlp/install.sh))"
            );
            None
        }
    }
}

/// A running receiver, stopped when dropped.
pub struct Receiver {
    child: Child,
    /// `http://127.0.0.1:<port>`: the exporter's `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Receiver {
    /// Starts it and waits until it listens.
    pub async fn start(python: &std::path::Path) -> Receiver {
        let dir = tempfile::tempdir().expect("tempdir");
        let port_file = dir.path().join("port");
        let child = Command::new(python)
            .arg(plugins::workspace_root().join("tests/otlp/receiver.py"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--parent-pid")
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the OTLP receiver");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().to_string();
            }
            assert!(Instant::now() < deadline, "the OTLP receiver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        Receiver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }

    /// What it received: `{"spans": [...], "errors": [...], "requests": n}`.
    pub async fn received(&self) -> Value {
        reqwest::get(format!("{}/spans", self.url))
            .await
            .expect("GET /spans")
            .json()
            .await
            .expect("spans JSON")
    }

    /// The spans of one trace.
    pub async fn trace(&self, trace_id: &str) -> Vec<Value> {
        let all = self.received().await;
        assert_eq!(
            all["errors"].as_array().map_or(0, Vec::len),
            0,
            "the receiver refused exports: {}",
            all["errors"]
        );
        all["spans"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|s| s["traceId"] == trace_id)
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new sampled W3C `traceparent` and its trace and span ids.
pub fn new_traceparent() -> (String, String, String) {
    let trace = format!("{:032x}", rand::random::<u128>().max(1));
    let span = format!("{:016x}", rand::random::<u64>().max(1));
    (format!("00-{trace}-{span}-01"), trace, span)
}
