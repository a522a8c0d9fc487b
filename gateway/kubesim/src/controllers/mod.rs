//! PLACEHOLDER written by the API-server half of issue 3 so the crate builds; the
//! controllers teammate owns this directory and replaces this file with the simulated
//! KubeRay operator, scheduler and kubelet.
//!
//! Contract the API server relies on (keep these names and shapes):
//! - `ControllerConfig: Clone + Debug + Default`, with a pub field `mode: RunMode`;
//! - `RunMode::{Process, Timed(TimedModel)}`, `TimedModel: Default`;
//! - `ControllerError: std::error::Error + Send + Sync + 'static`;
//! - `run(client, cfg, logs, shutdown)` below, spawned by `Sim::start` as a task; it
//!   should return when `shutdown` is cancelled.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::logs::LogStore;

/// Parameters of the timed (no-process) run model.
#[derive(Clone, Debug, Default)]
pub struct TimedModel {}

/// How the simulated kubelet runs submitter pods.
#[derive(Clone, Debug, Default)]
pub enum RunMode {
    /// Really run the entrypoint.
    #[default]
    Process,
    /// No process: duration and outcome from a model.
    Timed(TimedModel),
}

/// Configuration of the simulated controllers.
#[derive(Clone, Debug, Default)]
pub struct ControllerConfig {
    /// Run mode of the kubelet.
    pub mode: RunMode,
}

/// Errors of the controllers.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// Kubernetes API error.
    #[error("kubernetes api: {0}")]
    Kube(#[from] kube::Error),
}

/// Runs the operator, scheduler and kubelet until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    cfg: ControllerConfig,
    logs: Arc<LogStore>,
    shutdown: CancellationToken,
) -> Result<(), ControllerError> {
    let _ = (client, cfg, logs);
    shutdown.cancelled().await;
    Ok(())
}
