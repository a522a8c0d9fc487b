//! Policy management: which chain the host runs. The plugin registry, versioned chains
//! per scope (global and per team) with optimistic concurrency, history and rollback,
//! live swap with no failed request, shadow mode, replay, and replica pickup. The
//! sandboxed host that runs the plugins is the `forge-policy-host` crate; the HTTP
//! handlers are in `http::policy` and `http::plugins`.

pub mod active;
pub mod bootstrap;
pub mod change;
pub mod error;
pub mod failed_uploads;
pub mod manager;
pub mod preemption_vote;
pub mod registry;
pub mod replay;
pub mod shadow;

pub use active::{ActivePolicy, Scope};
pub use bootstrap::{BootLink, boot_links, boot_links_from_file};
pub use change::{Activation, Change, LinkInput};
pub use error::{EvalError, Malformed, PolicyAdminError};
pub use manager::{Evaluated, PolicyManager};
pub use registry::{Registry, RegistryLimits};
pub use replay::ReplayReport;
