//! The console's page shell (semantic HTML: header with navigation, `main`, one `h1`),
//! the shared bits of markup (a state badge that always carries its name in text, the
//! CSRF field) and the two static assets — a small stylesheet and the live-update
//! script — compiled into the binary and served from the same origin. Pages are sent
//! with a Content-Security-Policy that allows only same-origin scripts and styles.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::session::Viewer;
use crate::auth::Role;
use crate::domain::JobState;

/// The stylesheet (`/console/assets/console.css`).
pub const CSS: &str = include_str!("assets/console.css");
/// The live-update script (`/console/assets/console.js`).
pub const JS: &str = include_str!("assets/console.js");

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
                   img-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Jobs,
    Capacity,
    Policies,
    Plugins,
    Playgrounds,
    None,
}

/// A whole page with status 200.
pub fn page(title: &str, viewer: Option<&Viewer>, nav: Nav, body: Markup) -> Response {
    page_with(StatusCode::OK, title, viewer, nav, body)
}

/// A whole page.
pub fn page_with(
    status: StatusCode,
    title: &str,
    viewer: Option<&Viewer>,
    nav: Nav,
    body: Markup,
) -> Response {
    let link = |to: Nav, href: &str, label: &str| {
        html! {
            @if nav == to { a href=(href) aria-current="page" { (label) } }
            @else { a href=(href) { (label) } }
        }
    };
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Forge" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body {
                header {
                    nav aria-label="Console" {
                        strong { "Forge" }
                        @if let Some(v) = viewer {
                            (link(Nav::Jobs, "/console/jobs", "Jobs"))
                            (link(Nav::Capacity, "/console/capacity", "Capacity"))
                            (link(Nav::Policies, "/console/policies", "Policies"))
                            (link(Nav::Plugins, "/console/plugins", "Plugins"))
                            (link(Nav::Playgrounds, "/console/playgrounds", "Playgrounds"))
                            span.who {
                                (v.caller.team) " · "
                                (match v.caller.role { Role::Admin => "admin", Role::Member => "member" })
                            }
                            form method="post" action="/logout" {
                                (csrf_field(v))
                                button type="submit" id="logout" { "Log out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    };
    let mut response = (status, axum::response::Html(markup.into_string())).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The hidden CSRF field of a state-changing form.
pub fn csrf_field(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name="csrf" value=(viewer.csrf); }
}

/// A job state: its name in text, the colour only a hint.
pub fn state_badge(state: JobState) -> Markup {
    html! { span class={ "state state-" (state.as_str()) } data-state=(state.as_str()) { (state.as_str()) } }
}
