//! Policy management: the plugin registry, versioned chains per scope (global and
//! per team) with optimistic concurrency, history and rollback, live swap with no
//! failed request, shadow mode, and replica pickup. The sandboxed host that runs the
//! plugins is [`crate::policy`]; this module decides *which* chain it runs.
//!
//! HTTP: `POST/GET /v1/plugins`, `GET/PUT /v1/policy`, `POST /v1/policy/rollback`,
//! `GET /v1/policy/history`, `GET/PUT/DELETE /v1/policy/shadow` ([`routes`]).

pub mod active;
pub mod error;
pub mod manager;
pub mod registry;
pub mod routes;
pub mod shadow;
pub mod store;

pub use active::{ActivePolicy, Scope};
pub use error::PolicyAdminError;
pub use manager::{BootLink, Evaluated, PolicyManager};
pub use registry::{Registry, RegistryLimits};
pub use store::PolicyStore;
