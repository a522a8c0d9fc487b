//! Forge gateway: admits GPU training jobs through a chain of sandboxed WebAssembly
//! policy plugins, distributes their code as content-addressed capsules and runs them
//! as ephemeral KubeRay RayJobs.
//!
//! The crate is a library so that tests drive the real application; the
//! `forge-gateway` binary is a thin wrapper (config → build → run). Layers, from the
//! edge inwards (a module only uses the ones below it):
//!
//! - [`http`]: the router, one file per resource, the one error → status mapping;
//! - [`compose`], [`controllers`], `dev` (feature `dev`): composition roots (build the
//!   state, start the controllers and decide which run on this replica; `dev` runs it
//!   on the in-process emulator);
//! - [`state`]: what the handlers share;
//! - [`jobs`], [`playground`], [`admission`], [`policy`], [`uploads`], [`leader`],
//!   [`retention`]: the domain — a job's life, playgrounds (inference servers), how it
//!   meets the policy, which policy is active, resumable capsule uploads, which replica
//!   acts (and the fencing that stops a deposed one), what is kept and for how long;
//! - [`cluster`], [`store`], [`objects`], [`manifests`]: adapters — the Kubernetes API,
//!   the database, object storage, the objects a job's RayJob is built of;
//! - [`config`], [`auth`], [`live_tokens`], [`jobspec`], [`domain`], [`metrics`],
//!   [`answer`]: shared vocabulary (an error's answer is declared beside the error).

pub mod admission;
pub mod answer;
pub mod auth;
pub mod cluster;
pub mod compose;
pub mod config;
pub mod controllers;
#[cfg(feature = "dev")]
pub mod dev;
pub mod domain;
pub mod http;
pub mod jobs;
pub mod jobspec;
pub mod leader;
pub mod live_tokens;
pub mod manifests;
pub mod metrics;
pub mod objects;
pub mod playground;
pub mod policy;
pub mod retention;
pub mod shutdown;
pub mod spool;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod uploads;

pub use http::router;
pub use state::AppState;
