//! Shared helpers for the integration tests in this directory.

pub mod gateway;
pub mod jobs;
pub mod kubesim;
pub mod plugins;
pub mod policy;
