//! The HTTP edge: `router(state)` (so tests drive the real app), one file per resource,
//! the `Caller` extractor and [`error::ApiError`], the only place domain errors become
//! statuses.
//!
//! Every `/v1` endpoint is authenticated (bearer tokens, see [`crate::auth`]);
//! `/livez` (alias `/healthz`), `/readyz` and `/metrics` are open for probes and
//! scrapers and reveal no job data; `/v1/capsules/{sha}.zip` (local object store only) is authorized by its
//! HMAC-signed, expiring URL instead of a token, so Ray pods can fetch it, and so is a
//! job's capsule link `/v1/job-capsules/{job}/{sha}.zip` (by its signature, while the
//! job has not ended: [`capsule_links`]).
//! The web console (`/`, `/login`, `/console/…`, see [`console`]) is served by the same
//! router, authenticated by its session cookie.
//! Middleware: request ids (`x-request-id`, generated when absent and echoed back),
//! tracing, the log of failures that are not the client's ([`error::log_failures`]), body-size limits by route (413, see [`body_limit`]) and a request timeout.

pub mod admin;
mod auth;
pub mod body_limit;
pub mod capacity;
pub mod capsule_links;
pub mod capsules;
pub mod console;
pub mod deadline;
pub mod error;
pub mod health;
pub mod jobs;
pub mod openapi;
pub mod openapi_policy;
pub mod openapi_shared;
pub mod playground_proxy;
pub mod playgrounds;
pub mod plugins;
pub mod policy;
pub mod query;
pub mod review;
pub mod shadow;
pub mod submission;
pub mod uploads;
pub mod watch;
pub mod whoami;

use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use error::ApiError;

use crate::state::AppState;

/// Declares the API's routes once: the router is built from the table, and the table
/// is public so tests can hold it against the OpenAPI document and check that every
/// `/v1` route refuses a request without a token.
macro_rules! api_routes {
    ($( $method:ident $path:literal => $handler:path ),* $(,)?) => {
        /// Every `(method, path)` the API router serves.
        pub const ROUTES: &[(&str, &str)] = &[ $( (stringify!($method), $path) ),* ];

        fn api_router() -> Router<AppState> {
            Router::new()
                $( .route($path, axum::routing::$method($handler)) )*
        }
    };
}

api_routes! {
    get "/livez" => health::livez,
    get "/healthz" => health::livez,
    get "/readyz" => health::readyz,
    get "/metrics" => health::metrics,
    get "/v1/openapi.json" => openapi::serve,
    get "/v1/whoami" => whoami::whoami,
    get "/v1/schemas/jobspec" => openapi::jobspec_schema,
    get "/v1/capacity" => capacity::capacity,
    post "/v1/admission/review" => review::review,
    post "/v1/jobs" => jobs::create,
    get "/v1/jobs" => jobs::list,
    get "/v1/jobs/watch" => watch::watch_jobs,
    get "/v1/jobs/{id}" => jobs::get,
    delete "/v1/jobs/{id}" => jobs::delete,
    get "/v1/jobs/{id}/logs" => jobs::logs,
    get "/v1/jobs/{id}/logs/pods" => jobs::log_pods,
    get "/v1/jobs/{id}/events" => jobs::events,
    get "/v1/jobs/{id}/watch" => watch::watch,
    post "/v1/playgrounds" => playgrounds::create,
    get "/v1/playgrounds" => playgrounds::list,
    get "/v1/playgrounds/{id}" => playgrounds::get,
    delete "/v1/playgrounds/{id}" => playgrounds::delete,
    post "/v1/playgrounds/{id}/extend" => playgrounds::extend,
    get "/v1/playgrounds/{id}/v1/{*rest}" => playground_proxy::call,
    post "/v1/playgrounds/{id}/v1/{*rest}" => playground_proxy::call,
    get "/v1/team-capsules/{digest}" => capsules::get,
    post "/v1/uploads" => uploads::start,
    get "/v1/uploads/{id}" => uploads::status,
    put "/v1/uploads/{id}" => uploads::put_chunk,
    delete "/v1/uploads/{id}" => uploads::abort,
    post "/v1/uploads/{id}/complete" => uploads::complete,
    post "/v1/plugins" => plugins::upload,
    get "/v1/plugins" => plugins::list_plugins,
    get "/v1/policy" => policy::get_policy,
    put "/v1/policy" => policy::put_policy,
    post "/v1/policy/rollback" => policy::rollback,
    get "/v1/policy/history" => policy::history,
    get "/v1/policy/shadow" => shadow::get_shadow,
    put "/v1/policy/shadow" => shadow::put_shadow,
    delete "/v1/policy/shadow" => shadow::delete_shadow,
    get "/v1/admin/orphans" => admin::orphans,
}

/// The gateway's HTTP API.
pub fn router(state: AppState) -> Router {
    let limits = body_limit::BodyLimits {
        document: state.config.gateway.max_document_bytes(),
        bulk: state.config.gateway.max_body_bytes(),
    };
    let body_idle = Duration::from_secs(state.config.gateway.body_idle_timeout_s);
    let local = state.local_objects.clone();
    let console = console::routes(state.clone());
    let links = state
        .jobs
        .links
        .is_some()
        .then(|| capsule_links::routes(state.clone()));
    let mut app = api_router().with_state(state).merge(console);
    if let Some(links) = links {
        app = app.merge(links);
    }
    if let Some(local) = local {
        app = app.merge(crate::objects::local_routes(local));
    }
    // The body limits are enforced once, for every extractor, by the middleware; axum's
    // own 2 MB default (which would cap multipart code and plugin uploads) is off.
    app.layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            limits,
            body_limit::limit_body,
        ))
        .layer(axum::middleware::from_fn_with_state(
            body_idle,
            deadline::deadline,
        ))
        .layer(axum::middleware::from_fn(error::log_failures))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}
