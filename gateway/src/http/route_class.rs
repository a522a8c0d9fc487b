//! What a route's request may be, declared with the route in the table (`http::ROUTES`):
//! its body limit and its deadline, as per-route layers rather than a middleware that
//! matches paths.
//!
//! - [`RouteClass::Document`]: a JobSpec to review, a policy, a JSON request, a listing
//!   — a body of at most `FORGE_MAX_DOCUMENT_KIB`, answered within
//!   [`super::deadline::DOCUMENT_DEADLINE`] (or `408 request-timeout`), so no request can
//!   make the gateway parse hundreds of MiB or hold a worker for ever;
//! - [`RouteClass::Bulk`]: a submission's code archive, an upload chunk, a plugin
//!   component — up to `FORGE_MAX_BODY_MIB`, with no total deadline (a 256 MiB archive
//!   on a slow link takes longer than any fixed one) but a body that may pause at most
//!   `FORGE_BODY_IDLE_TIMEOUT_S` between two pieces (a stalled client is cut then, and
//!   nothing it sent is kept). Their document parts (the `spec` part, a JSON
//!   submission) are bounded by the document limit when they are read;
//! - [`RouteClass::Relay`]: a playground's own server (`/v1/playgrounds/{id}/v1/…`): a
//!   document-sized body and no deadline (a long generation answers late; the relay
//!   bounds silence itself, `playground::relay`).

use std::time::Duration;

use axum::routing::MethodRouter;

use super::body_limit::{BodyLimit, limit_body};
use super::deadline::{document_deadline, idle_body};
use crate::state::AppState;

/// The kind of request a route takes (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteClass {
    Document,
    Bulk,
    Relay,
}

/// One route of the API: its method, path and class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub method: &'static str,
    pub path: &'static str,
    pub class: RouteClass,
}

/// The limits the classes apply, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct ClassLimits {
    /// `FORGE_MAX_DOCUMENT_KIB`.
    pub document: BodyLimit,
    /// `FORGE_MAX_BODY_MIB`.
    pub bulk: BodyLimit,
    /// `FORGE_BODY_IDLE_TIMEOUT_S`.
    pub body_idle: Duration,
}

impl ClassLimits {
    /// The limits of `state`'s configuration.
    pub fn of(state: &AppState) -> Self {
        let g = &state.config.gateway;
        ClassLimits {
            document: BodyLimit {
                bytes: g.max_document_bytes(),
                setting: "FORGE_MAX_DOCUMENT_KIB",
                drain: g.max_body_bytes(),
            },
            bulk: BodyLimit {
                bytes: g.max_body_bytes(),
                setting: "FORGE_MAX_BODY_MIB",
                drain: g.max_body_bytes(),
            },
            body_idle: Duration::from_secs(g.body_idle_timeout_s),
        }
    }

    /// `route` with the body limit and the deadline of `class`.
    pub fn apply<S>(&self, class: RouteClass, route: MethodRouter<S>) -> MethodRouter<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        use axum::middleware::{from_fn, from_fn_with_state};
        // The body limit is outermost: a body declared too large is refused (and
        // drained) before anything else runs.
        match class {
            RouteClass::Document => route
                .layer(from_fn(document_deadline))
                .layer(from_fn_with_state(self.document, limit_body)),
            RouteClass::Bulk => route
                .layer(from_fn_with_state(self.body_idle, idle_body))
                .layer(from_fn_with_state(self.bulk, limit_body)),
            RouteClass::Relay => route.layer(from_fn_with_state(self.document, limit_body)),
        }
    }
}
