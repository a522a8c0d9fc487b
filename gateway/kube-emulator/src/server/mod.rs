//! The HTTP front end: routes Kubernetes REST paths (`/api/...`, `/apis/...`) to the
//! store, streams watches and pod logs, serves discovery and the `/_sim/faults` admin
//! endpoint. With a configured token every request must carry it (`auth`); there is no
//! authorization (an authenticated caller may do anything).
//!
//! `router` maps paths to handlers (behind `auth`), `dispatch` applies fault injection and picks the
//! verb, `target` parses the resource path and query, `verbs` runs one verb against
//! the store, `watch` and `pod_log` stream; `state` is what the handlers share.

mod auth;
mod dispatch;
mod metadata_only;
mod pod_log;
mod pod_proxy;
mod router;
mod serve;
mod state;
mod target;
mod verbs;
mod watch;

pub use router::router;
pub use serve::serve;
pub use state::{AppState, Shared};
