//! Forge gateway: admits GPU training jobs through a chain of sandboxed WebAssembly
//! policy plugins, distributes their code as content-addressed capsules and runs them
//! as ephemeral KubeRay RayJobs.
//!
//! The crate is a library so that tests drive the real application; the
//! `forge-gateway` binary is a thin wrapper (config → build → run).

pub mod api_error;
pub mod app;
pub mod auth;
pub mod capacity;
pub mod compose;
pub mod config;
pub mod dev;
pub mod jobs;
pub mod jobspec;
pub mod metrics;
pub mod openapi;
pub mod policies;
pub mod policy;
pub mod rayjob;
pub mod store;
