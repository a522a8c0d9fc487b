//! Console sessions: `POST /login` trades a bearer token (checked by the same
//! [`crate::auth::Tokens`] the API uses) for a random session id in an `HttpOnly`,
//! `SameSite=Strict` cookie (`Secure` when the console is served over HTTPS); the token
//! itself is never stored in the browser. Each session carries its own CSRF token,
//! embedded in every state-changing form and checked in constant time.
//!
//! Sessions live in memory, keyed by the SHA-256 of the id (a memory dump does not
//! yield usable cookies), and expire after [`SESSION_TTL`]; a restart logs everyone
//! out. A session keeps the SHA-256 of the token it was opened with and resolves its
//! viewer against the tokens in force on every request: revoking a token (or changing
//! its team or role) in the tokens file applies to open sessions at once. The map's
//! lock is never held across an `.await`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Console;
use crate::auth::{Caller, Tokens};

/// The session cookie's name.
pub const COOKIE: &str = "forge_session";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// A logged-in viewer: who they are (as the API would see them) and their CSRF token.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub caller: Caller,
    pub csrf: String,
}

impl Viewer {
    /// Whether `presented` is this session's CSRF token.
    pub fn csrf_ok(&self, presented: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(presented.as_bytes()))
    }
}

#[derive(Debug)]
struct Session {
    /// SHA-256 of the token the session was opened with.
    token: [u8; 32],
    csrf: String,
    expires: Instant,
}

/// The session table.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<[u8; 32], Session>>,
}

fn key(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Sessions {
    /// A new session for the holder of `token` (already authenticated): its id (the
    /// cookie value).
    pub fn open(&self, token: &str) -> String {
        let id = random_hex();
        let now = Instant::now();
        let session = Session {
            token: Sha256::digest(token.as_bytes()).into(),
            csrf: random_hex(),
            expires: now + SESSION_TTL,
        };
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, s| s.expires > now);
        map.insert(key(&id), session);
        id
    }

    /// The viewer of a live session whose token `tokens` still accept.
    pub fn viewer(&self, id: &str, tokens: &Tokens) -> Option<Viewer> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let session = map.get(&key(id)).filter(|s| s.expires > Instant::now())?;
        Some(Viewer {
            caller: tokens.lookup_digest(&session.token)?,
            csrf: session.csrf.clone(),
        })
    }

    /// Ends a session.
    pub fn close(&self, id: &str) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(&key(id));
    }
}

/// The session id the request's cookie carries.
pub fn session_id(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_string())
}

/// Whether the browser reached the console over HTTPS (directly per the public URL, or
/// through a TLS-terminating proxy).
pub fn over_https(console: &Console, headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"));
    forwarded
        || console
            .app
            .config
            .gateway
            .public_url
            .as_ref()
            .is_some_and(|u| u.starts_with("https://"))
}

/// The `Set-Cookie` value of a session (empty value and `Max-Age=0` to end it).
pub fn cookie(value: Option<&str>, secure: bool) -> String {
    let mut c = Cookie::build((COOKIE, value.unwrap_or("").to_string()))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .secure(secure)
        .build();
    if value.is_none() {
        c.make_removal();
    }
    c.to_string()
}

/// Not logged in: back to the login page.
#[derive(Debug)]
pub struct LoginFirst;

impl IntoResponse for LoginFirst {
    fn into_response(self) -> Response {
        Redirect::to("/login").into_response()
    }
}

impl FromRequestParts<Console> for Viewer {
    type Rejection = LoginFirst;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, LoginFirst> {
        session_id(&parts.headers)
            .and_then(|id| console.sessions.viewer(&id, &console.app.tokens.current()))
            .ok_or(LoginFirst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, TokenEntry, hash_token};

    fn tokens(entries: &[(&str, &str)]) -> Tokens {
        Tokens::from_entries(
            entries
                .iter()
                .map(|(token, team)| TokenEntry {
                    token_sha256: hash_token(token),
                    team: (*team).into(),
                    role: Role::Member,
                    name: None,
                })
                .collect(),
        )
        .expect("tokens")
    }

    #[test]
    fn a_session_follows_the_tokens_in_force() {
        let sessions = Sessions::default();
        let id = sessions.open("alice-token");
        let before = tokens(&[("alice-token", "team-a"), ("bob-token", "team-b")]);
        let viewer = sessions.viewer(&id, &before).expect("logged in");
        assert_eq!(viewer.caller.team, "team-a");
        assert!(sessions.viewer("another-id", &before).is_none());
        // The token moved to another team: the session follows it.
        let moved = tokens(&[("alice-token", "team-c")]);
        assert_eq!(
            sessions
                .viewer(&id, &moved)
                .expect("still valid")
                .caller
                .team,
            "team-c"
        );
        // Revoked: the open session ends with it.
        let revoked = tokens(&[("bob-token", "team-b")]);
        assert!(sessions.viewer(&id, &revoked).is_none());
        sessions.close(&id);
        assert!(sessions.viewer(&id, &before).is_none());
    }
}
