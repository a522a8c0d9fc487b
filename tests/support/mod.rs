//! Shared helpers for the integration tests in this directory.

pub mod plugins;
pub mod capsule;
pub mod s3;
pub mod kubesim;
pub mod gateway;
