//! Test support for the emulator's own integration tests and for other crates that
//! test against it (cargo feature `testing`): emulators on port 0 with the presets
//! those tests share. Helpers panic with a clear message instead of returning errors.

use std::path::Path;
use std::time::Duration;

use crate::{ControllerConfig, NodeSpec, RunMode, Sim, SimConfig};

/// Starts an emulator with `cfg`.
pub async fn start_with(cfg: SimConfig) -> Sim {
    Sim::start(cfg).await.expect("kubesim starts")
}

/// Starts a bare API server (no simulated controllers) with two h100 nodes
/// (`h100-0`, `h100-1`, 8 GPUs) and one a100 node (`a100-0`).
pub async fn start_bare() -> Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout("h100=2x8,a100=1x8").expect("valid layout"),
        run_controllers: false,
        ..SimConfig::default()
    })
    .await
}

/// Controllers in process mode (jobs really run on the host) with image pulls of
/// 20 ms and a 500 ms back-off base (and a fresh scratch root of their own).
pub fn process_controllers() -> ControllerConfig {
    ControllerConfig {
        mode: RunMode::Process,
        image_pull: Duration::from_millis(20),
        backoff_base: Duration::from_millis(500),
        ..ControllerConfig::default()
    }
}

/// Starts an emulator with [`process_controllers`] on `layout`
/// (`series=COUNTxGPUS,...`), keeping the kubelet's scratch space (emptyDir volumes,
/// unpacked working dirs) under `scratch`.
pub async fn start_process(layout: &str, scratch: &Path) -> Sim {
    start_with(SimConfig {
        nodes: NodeSpec::parse_layout(layout).expect("valid layout"),
        controllers: ControllerConfig {
            scratch_root: scratch.to_path_buf(),
            ..process_controllers()
        },
        ..SimConfig::default()
    })
    .await
}
