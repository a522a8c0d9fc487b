//! Kubernetes + KubeRay emulator (see `README.md` in this crate).
//!
//! An in-memory Kubernetes API server speaking the real REST protocol, plus a
//! simulated KubeRay operator, scheduler and kubelet (in [`controllers`]) that talk
//! to it only through `kube::Client`, like real controllers do.

pub mod controllers;
pub mod logs;

pub use logs::{LogError, LogStore};
