//! The web console: server-rendered HTML (maud templates, compiled into the binary)
//! served by the gateway itself on the API's origin, with one small same-origin script
//! that applies live changes from server-sent events. No build step, no CDN, a few KB
//! per page.
//!
//! - `GET /`: the login page, or (logged in) the jobs page.
//! - `GET /login`, `POST /login` (form field `token`), `POST /logout` ([`login`]).
//! - `GET /console/jobs` ([`jobs`]), `GET /console/jobs/{id}` and its cancel form
//!   ([`job`]), `GET /console/capacity` ([`capacity`]), `GET /console/policies` and its
//!   settings and rollback forms ([`policies`]), `GET /console/plugins` ([`plugins`]),
//!   `GET /console/playgrounds[/{id}]` and their start, chat, extend and end forms
//!   ([`playgrounds`]).
//! - `GET /console/live/jobs`, `GET /console/live/jobs/{id}`: the job feed as
//!   server-sent events for the logged-in viewer; `GET /console/live/playgrounds/{id}`,
//!   one playground's changes ([`live`]).
//!
//! Every console route but the login page and the assets needs a session ([`session`]);
//! every state-changing form is checked against the session's CSRF token. A viewer sees
//! exactly what the API would show the token they logged in with: the same
//! [`crate::auth::Caller`], the same domain checks (`Jobs::visible`, the jobs API's
//! team filter, the policy scopes). These routes are not part of the `/v1` API (they
//! answer with pages and redirects, not JSON), so they are not in `api_routes!`.

pub mod capacity;
pub mod day_cache;
pub mod draw;
pub mod job;
pub mod jobs;
pub mod layout;
pub mod live;
pub mod login;
mod login_origin;
pub mod playgrounds;
pub mod plugins;
pub mod policies;
pub mod present;
mod quota;
pub mod session;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::html;

use super::ApiError;
use super::error::Failure;
use crate::state::AppState;
use layout::Nav;
use session::Sessions;

/// The console's state: the app's, plus the session table (in the store).
#[derive(Debug, Clone)]
pub struct Console {
    pub app: AppState,
    pub sessions: Sessions,
    /// The capacity page's last day (admins), read at most once a minute.
    pub day: std::sync::Arc<day_cache::DayCache>,
}

/// The console's routes.
pub fn routes(app: AppState) -> Router {
    let console = Console {
        sessions: Sessions::new(app.database.sessions.clone()),
        day: std::sync::Arc::default(),
        app,
    };
    Router::new()
        .route("/", get(login::home))
        .route("/login", get(login::form).post(login::login))
        .route("/logout", post(login::logout))
        .route("/console/assets/console.css", get(css))
        .route("/console/assets/console.js", get(js))
        .route("/console/jobs", get(jobs::list))
        .route("/console/jobs/{id}", get(job::detail))
        .route("/console/jobs/{id}/cancel", post(job::cancel))
        .route("/console/jobs/{id}/log", get(job::log))
        .route("/console/capacity", get(capacity::page))
        .route("/console/policies", get(policies::page))
        .route("/console/policies/settings", post(policies::settings))
        .route("/console/policies/rollback", post(policies::rollback))
        .route("/console/plugins", get(plugins::page))
        .route(
            "/console/playgrounds",
            get(playgrounds::list).post(playgrounds::start),
        )
        .route("/console/playgrounds/{id}", get(playgrounds::detail))
        .route("/console/playgrounds/{id}/chat", post(playgrounds::chat))
        .route(
            "/console/playgrounds/{id}/extend",
            post(playgrounds::extend),
        )
        .route("/console/playgrounds/{id}/end", post(playgrounds::end))
        .route("/console/live/playgrounds/{id}", get(live::playground))
        .route("/console/live/jobs", get(live::jobs))
        .route("/console/live/jobs/{id}", get(live::job))
        .with_state(console)
}

async fn css() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        layout::CSS,
    )
}

async fn js() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        layout::JS,
    )
}

/// A failed console request: the API's status and message for the same domain error,
/// as a page (and its cause for the logging middleware, when the API would log it).
#[derive(Debug)]
pub struct PageError(pub StatusCode, pub String, pub Option<Failure>);

impl<E: Into<ApiError>> From<E> for PageError {
    fn from(e: E) -> Self {
        let e = e.into();
        let answer = e.answer();
        let failure = e.failure(&answer);
        PageError(answer.status, answer.message, failure)
    }
}

impl PageError {
    /// A refusal of the console's own (not a domain error's).
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        PageError(status, message.into(), None)
    }

    /// A refused form (a missing or wrong CSRF token).
    pub fn csrf() -> Self {
        PageError(
            StatusCode::FORBIDDEN,
            "this form was not issued to your session (CSRF check failed); nothing was changed"
                .into(),
            None,
        )
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let PageError(status, message, failure) = self;
        let mut page = layout::page_with(
            status,
            status.canonical_reason().unwrap_or("Error"),
            None,
            Nav::None,
            html! {
                h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("Error")) }
                p.error role="alert" { (message) }
                p { a href="/" { "Back to the console" } }
            },
        );
        if let Some(f) = failure {
            page.extensions_mut().insert(f);
        }
        page
    }
}
