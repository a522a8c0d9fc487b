//! Shared helpers for the integration tests in this directory.

pub mod plugins;
pub mod kubesim;
