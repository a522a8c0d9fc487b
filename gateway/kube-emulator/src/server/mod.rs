//! The HTTP front end: routes Kubernetes REST paths (`/api/...`, `/apis/...`) to the
//! store, streams watches and pod logs, serves discovery and the `/_sim/faults` admin
//! endpoint. With a configured token (`auth`) only requests carrying it are served;
//! without one any request is (the emulator does no authorization).
//!
//! `router` maps paths to handlers, `dispatch` applies fault injection and picks the
//! verb, `target` parses the resource path and query, `verbs` runs one verb against
//! the store, `watch` and `pod_log` stream; `state` is what the handlers share.

mod auth;
mod dispatch;
mod pod_log;
mod router;
mod state;
mod target;
mod verbs;
mod watch;

pub use auth::require_token;
pub use router::router;
pub use state::AppState;
