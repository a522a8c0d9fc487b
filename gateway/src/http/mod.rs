//! The HTTP edge: `router(state)` (so tests drive the real app), one file per resource,
//! the `Caller` extractor and [`error::ApiError`], the only place domain errors become
//! statuses.
//!
//! Every `/v1` endpoint is authenticated (bearer tokens, see [`crate::auth`]);
//! `/livez` (alias `/healthz`), `/readyz` and `/metrics` are open for probes and
//! scrapers and reveal no job data; `/v1/capsules/{sha}.zip` (local object store only) is authorized by its
//! HMAC-signed, expiring URL instead of a token, so Ray pods can fetch it, and so is a
//! job's capsule link `/v1/job-capsules/{job}/{sha}.zip` (by its signature, while the
//! job has not ended: [`job_capsules`]).
//! The web console (`/`, `/login`, `/console/…`, see [`console`]) is served by the same
//! router, authenticated by its session cookie.
//! Middleware: request ids (`x-request-id`, generated when absent and echoed back),
//! tracing, the log of failures that are not the client's ([`error::log_failures`]);
//! each route's body limit and deadline come with it in the table ([`route_class`]).

pub mod admin;
mod auth;
pub mod body;
pub mod body_limit;
pub mod capacity;
pub mod capsules;
pub mod console;
pub mod deadline;
pub mod error;
pub mod fair_share;
pub mod health;
pub mod job_capsules;
pub mod job_checkpoints;
pub mod job_streams;
pub mod jobs;
pub mod openapi;
pub mod playground_proxy;
pub mod playgrounds;
pub mod plugins;
pub mod policy;
pub mod query;
pub mod review;
pub mod route_class;
pub mod shadow;
pub mod submission;
pub mod uploads;
pub mod whoami;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use route_class::{Route, RouteClass};

use route_class::ClassLimits;

use crate::state::AppState;

/// Declares the API's routes once, each with its class (its body limit and deadline:
/// [`route_class`]): the router is built from the table, and the table is public so
/// tests can hold it against the OpenAPI document and check that every `/v1` route
/// refuses a request without a token.
macro_rules! api_routes {
    ($( $class:ident $method:ident $path:literal => $handler:path ),* $(,)?) => {
        /// Every route the API router serves.
        pub const ROUTES: &[Route] = &[
            $( Route { method: stringify!($method), path: $path, class: RouteClass::$class } ),*
        ];

        fn api_router(limits: &ClassLimits) -> Router<AppState> {
            Router::new()
                $( .route($path, limits.apply(RouteClass::$class, axum::routing::$method($handler))) )*
        }
    };
}

api_routes! {
    Document get "/livez" => health::livez,
    Document get "/healthz" => health::livez,
    Document get "/readyz" => health::readyz,
    Document get "/metrics" => health::metrics,
    Document get "/v1/openapi.json" => openapi::serve,
    Document get "/v1/whoami" => whoami::whoami,
    Document get "/v1/schemas/jobspec" => openapi::jobspec_schema,
    Document get "/v1/capacity" => capacity::capacity,
    Document get "/v1/fair-share" => fair_share::fair_share,
    Document post "/v1/fair-share/replay" => fair_share::replay,
    Document post "/v1/admission/review" => review::review,
    Bulk post "/v1/jobs" => jobs::create,
    Document get "/v1/jobs" => jobs::list,
    Document get "/v1/jobs/watch" => job_streams::watch_jobs,
    Document get "/v1/jobs/{id}" => jobs::get,
    Document delete "/v1/jobs/{id}" => jobs::delete,
    Document get "/v1/jobs/{id}/logs" => jobs::logs,
    Document get "/v1/jobs/{id}/logs/pods" => jobs::log_pods,
    Document get "/v1/jobs/{id}/events" => jobs::events,
    Document get "/v1/jobs/{id}/watch" => job_streams::watch,
    Document post "/v1/jobs/{id}/checkpoints" => job_checkpoints::acknowledge,
    Document post "/v1/playgrounds" => playgrounds::create,
    Document get "/v1/playgrounds" => playgrounds::list,
    Document get "/v1/playgrounds/{id}" => playgrounds::get,
    Document delete "/v1/playgrounds/{id}" => playgrounds::delete,
    Document post "/v1/playgrounds/{id}/extend" => playgrounds::extend,
    Relay get "/v1/playgrounds/{id}/v1/{*rest}" => playground_proxy::call,
    Relay post "/v1/playgrounds/{id}/v1/{*rest}" => playground_proxy::call,
    Document get "/v1/team-capsules/{digest}" => capsules::get,
    Document post "/v1/uploads" => uploads::start,
    Document get "/v1/uploads/{id}" => uploads::status,
    Bulk put "/v1/uploads/{id}" => uploads::put_chunk,
    Document delete "/v1/uploads/{id}" => uploads::abort,
    Document post "/v1/uploads/{id}/complete" => uploads::complete,
    Bulk post "/v1/plugins" => plugins::upload,
    Document get "/v1/plugins" => plugins::list_plugins,
    Document get "/v1/policy" => policy::get_policy,
    Document put "/v1/policy" => policy::put_policy,
    Document post "/v1/policy/rollback" => policy::rollback,
    Document get "/v1/policy/history" => policy::history,
    Document get "/v1/policy/shadow" => shadow::get_shadow,
    Document put "/v1/policy/shadow" => shadow::put_shadow,
    Document delete "/v1/policy/shadow" => shadow::delete_shadow,
    Document get "/v1/admin/orphans" => admin::orphans,
}

/// The gateway's HTTP API.
pub fn router(state: AppState) -> Router {
    let limits = ClassLimits::of(&state);
    let metrics = state.metrics.clone();
    let local = state.local_objects.clone();
    let console = console::routes(state.clone());
    let links = state
        .jobs
        .capsule_links()
        .is_some()
        .then(|| job_capsules::routes(state.clone()));
    // The console, capsule links and the local store's signed URLs take documents.
    let mut documents = console;
    if let Some(links) = links {
        documents = documents.merge(links);
    }
    if let Some(local) = local {
        documents = documents.merge(crate::objects::local_routes(local));
    }
    let documents = documents
        .layer(axum::middleware::from_fn(deadline::document_deadline))
        .layer(axum::middleware::from_fn_with_state(
            limits.document,
            body_limit::limit_body,
        ));
    // Each route enforces its own limit (its class); axum's own 2 MB default (which
    // would cap multipart code and plugin uploads) is off.
    api_router(&limits)
        .with_state(state)
        .merge(documents)
        .layer(DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            metrics,
            error::log_failures,
        ))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}
