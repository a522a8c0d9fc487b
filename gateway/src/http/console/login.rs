//! Logging in and out: `GET /` (the login page, or the jobs page when logged in),
//! `GET /login`, `POST /login` (form field `token`: checked like a bearer token, then
//! a session cookie is set and the browser is sent to the jobs page; a wrong token is
//! answered 401 with the form again, a login posted from another site 403:
//! `login_origin.rs`) and `POST /logout` (CSRF-checked; ends the session
//! and clears the cookie).

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout::{self, Nav};
use super::login_origin;
use super::session::{self, Viewer};
use super::{Console, PageError};

fn login_form(error: Option<&str>) -> Markup {
    html! {
        h1 { "Log in to Forge" }
        @if let Some(e) = error { p.error role="alert" id="login-error" { (e) } }
        form method="post" action="/login" {
            label for="token" { "API token" }
            input type="password" id="token" name="token" autocomplete="current-password" required autofocus;
            p { button type="submit" id="login" { "Log in" } }
        }
        p { "Use the token you give the " code { "forge" } " command line; the console sees what that token may see." }
    }
}

/// `GET /`.
pub async fn home(
    State(console): State<Console>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let viewer = console
        .sessions
        .of_request(&headers, &console.app.tokens.current())
        .await?;
    Ok(if viewer.is_some() {
        Redirect::to("/console/jobs").into_response()
    } else {
        layout::page("Log in", None, Nav::None, login_form(None))
    })
}

/// `GET /login`.
pub async fn form() -> Response {
    layout::page("Log in", None, Nav::None, login_form(None))
}

/// The login form.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /login`.
pub async fn login(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let secure = session::over_https(&console, &headers);
    let public_url = console.app.config.gateway.public_url.as_deref();
    if login_origin::from_another_site(&headers, secure, public_url) {
        return layout::page_with(
            StatusCode::FORBIDDEN,
            "Log in",
            None,
            Nav::None,
            login_form(Some(
                "This login came from another site and was refused: log in from this page.",
            )),
        );
    }
    if console.app.tokens.current().lookup(f.token.trim()).is_err() {
        return layout::page_with(
            StatusCode::UNAUTHORIZED,
            "Log in",
            None,
            Nav::None,
            login_form(Some("That token is not valid.")),
        );
    }
    let id = match console.sessions.open(f.token.trim()).await {
        Ok(id) => id,
        Err(e) => return PageError::from(e).into_response(),
    };
    with_cookie(
        Redirect::to("/console/jobs"),
        &session::cookie(Some(&id), secure),
    )
}

/// The logout form.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`.
pub async fn logout(
    State(console): State<Console>,
    viewer: Viewer,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    if let Some(id) = session::session_id(&headers) {
        console.sessions.close(&id).await?;
    }
    let secure = session::over_https(&console, &headers);
    Ok(with_cookie(
        Redirect::to("/login"),
        &session::cookie(None, secure),
    ))
}

fn with_cookie(redirect: Redirect, cookie: &str) -> Response {
    let mut response = redirect.into_response();
    if let Ok(v) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, v);
    }
    response
}
