//! Kubernetes + KubeRay emulator (see `README.md` in this crate).
//!
//! An in-memory Kubernetes API server speaking the real REST protocol (`server`,
//! `store`), with CRD validation/defaulting from the real KubeRay CRDs (`schema`),
//! discovery good enough for `kubectl`, fault injection (`faults`), plus a simulated
//! KubeRay operator, scheduler and kubelet (in [`controllers`]) that talk to it only
//! through `kube::Client`, like real controllers do; in process mode pods of the
//! inference image run an OpenAI-compatible stand-in ([`inference`]) the pod proxy
//! reaches through [`endpoints`]. With the cargo feature `testing`,
//! `testing` has the emulator presets integration tests share.

pub mod controllers;
pub mod discovery;
pub mod endpoints;
pub mod error;
pub mod faults;
pub mod inference;
pub mod logs;
pub mod network;
pub mod nodes;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod sim;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod tls;

pub use controllers::{ControllerConfig, RunMode, TimedModel};
pub use error::{ApiError, Cause};
pub use faults::{CrashRule, FailRule, FaultRequest, Faults, HoldRule, LoseAnswerRule, Matching};
pub use logs::{LogError, LogStore};
pub use nodes::{LayoutError, NodeSpec, NodeTaint};
pub use sim::{Sim, SimConfig, SimError, TOKEN};
