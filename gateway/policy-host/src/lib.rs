//! `forge-policy-host`: the WebAssembly policy host.
//!
//! Admission asks a chain of sandboxed policy plugins (components targeting
//! `forge:policy/policy@0.3.0` or the older `@0.2.0` and `@0.1.0`, side by side in one
//! chain, see `wit/`) whether and where a job may run. This crate
//! runs them and knows nothing of HTTP, jobs or storage, so the gateway, the `forge`
//! command-line client (`forge plugin run`) and the tests all use the same host with the
//! same checks and limits.
//!
//! - [`PolicyEngine`]: the shared wasmtime engine (pooling allocator, epoch deadline,
//!   memory cap, the compile pool and the verified precompile cache).
//! - [`precheck`]: what is refused before compiling (imports, exports, shape).
//! - [`EngineLimits`], [`PluginLimits`]: the operator's defaults and maxima, and one
//!   plugin's own deadline and memory cap.
//! - [`Plugin`]: a checked, compiled component, instantiated into one store per
//!   instance.
//! - [`Isolation`]: fresh instance per call, or warm instances reused per (plugin,
//!   settings, scope) and discarded on any failure; [`Verify`] re-runs
//!   sampled warm decisions on a fresh instance and fails closed on a mismatch.
//! - [`Chain`]: ordered (plugin, settings) links and the chain semantics; the team
//!   links of a composed chain may only narrow the placement ([`narrowing`]).
//! - [`PolicyRunner`]: runs evaluations on its own bounded threads, fairly between
//!   scopes.
//! - [`model`]: the host's version-independent request and decision types;
//!   [`preemption`]: a planned preemption and its verdicts.
//! - [`chain_file`]: chain files (ordered plugins and settings, YAML or JSON).

mod cache;
pub mod chain;
pub mod chain_file;
mod chain_plan;
pub mod compile;
mod contract_check;
pub mod engine;
pub mod error;
mod fair_queue;
mod instance;
pub mod isolation;
pub mod limits;
mod link_input;
pub mod model;
pub mod narrowing;
mod narrowing_scheduling;
pub mod plugin;
pub mod precheck;
pub mod preemption;
pub mod runner;
mod sandbox;
pub mod scheduling;
mod trace_entry;
mod warm;
mod wit_convert;
mod wit_maps;
mod wit_v0_1_0;
mod wit_v0_2_0;
mod wit_v0_3_0;

pub use chain::{Chain, ChainLink, ChainOutcome};
pub use compile::CompileLimits;
pub use engine::PolicyEngine;
pub use error::{ChainError, LoadError, PluginError};
pub use isolation::{Isolation, UnknownIsolation, Verify};
pub use limits::{EngineLimits, PluginLimits};
pub use plugin::{Plugin, Unsaved, digest_of};
pub use precheck::{Shape, ShapeLimits};
pub use runner::{PolicyRunner, RunError};
pub use trace_entry::TraceEntry;
