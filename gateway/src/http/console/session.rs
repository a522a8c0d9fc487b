//! Console sessions: `POST /login` trades a bearer token (checked by the same
//! [`crate::auth::Tokens`] the API uses) for a random session id in an `HttpOnly`,
//! `SameSite=Strict` cookie (`Secure` when the console is served over HTTPS); the token
//! itself is never stored in the browser. Each session carries its own CSRF token,
//! embedded in every state-changing form and checked in constant time.
//!
//! Sessions live in the database ([`crate::store::SessionStore`]), keyed by the SHA-256
//! of the id (a database dump does not yield usable cookies), so any replica serves any
//! session and a restart or a rolling update logs nobody out. They expire after
//! [`SESSION_TTL`]. A session keeps the SHA-256 of the token it was opened with and
//! resolves its viewer against the tokens in force on every request: revoking a token
//! (or changing its team or role) in the tokens file applies to open sessions at once,
//! on every replica that reloads the file.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use cookie::{Cookie, SameSite};
use subtle::ConstantTimeEq;

use super::{Console, PageError};
use crate::auth::{Caller, Tokens, hash_token};
use crate::store::{SessionRecord, SessionStore, StoreError, now_ms};

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

/// The session table: a view of the store's.
#[derive(Clone)]
pub struct Sessions {
    store: Arc<dyn SessionStore>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

/// The key a session is stored under: the SHA-256 of its id.
fn key(id: &str) -> String {
    hash_token(id)
}

fn random_hex() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Sessions {
    /// The sessions kept in `store`.
    pub fn new(store: Arc<dyn SessionStore>) -> Self {
        Sessions { store }
    }

    /// A new session for the holder of `token` (already authenticated): its id (the
    /// cookie value).
    pub async fn open(&self, token: &str) -> Result<String, StoreError> {
        let id = random_hex();
        let now = now_ms();
        let ttl_ms = i64::try_from(SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
        let record = SessionRecord {
            token_sha256: hash_token(token),
            csrf: random_hex(),
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        self.store.open_session(&key(&id), &record, now).await?;
        Ok(id)
    }

    /// The viewer of a live session whose token `tokens` still accept.
    pub async fn viewer(&self, id: &str, tokens: &Tokens) -> Result<Option<Viewer>, StoreError> {
        let Some(session) = self.store.session(&key(id), now_ms()).await? else {
            return Ok(None);
        };
        let mut token = [0u8; 32];
        if hex::decode_to_slice(&session.token_sha256, &mut token).is_err() {
            return Err(StoreError::Corrupt("a console session's token hash".into()));
        }
        Ok(tokens.lookup_digest(&token).map(|caller| Viewer {
            caller,
            csrf: session.csrf,
        }))
    }

    /// Ends a session.
    pub async fn close(&self, id: &str) -> Result<(), StoreError> {
        self.store.close_session(&key(id)).await
    }

    /// The viewer of the session the request's cookie names, if any.
    pub async fn of_request(
        &self,
        headers: &HeaderMap,
        tokens: &Tokens,
    ) -> Result<Option<Viewer>, StoreError> {
        match session_id(headers) {
            Some(id) => self.viewer(&id, tokens).await,
            None => Ok(None),
        }
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

/// Why a console request has no viewer: not logged in (back to the login page), or the
/// sessions could not be read (an error page; the session is not lost).
#[derive(Debug)]
pub enum NoViewer {
    LoginFirst,
    Unreadable(PageError),
}

impl IntoResponse for NoViewer {
    fn into_response(self) -> Response {
        match self {
            NoViewer::LoginFirst => Redirect::to("/login").into_response(),
            NoViewer::Unreadable(e) => e.into_response(),
        }
    }
}

impl FromRequestParts<Console> for Viewer {
    type Rejection = NoViewer;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, NoViewer> {
        console
            .sessions
            .of_request(&parts.headers, &console.app.tokens.current())
            .await
            .map_err(|e| NoViewer::Unreadable(e.into()))?
            .ok_or(NoViewer::LoginFirst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Role, TokenEntry};
    use crate::store::Database;

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

    #[tokio::test]
    async fn a_session_follows_the_tokens_in_force_and_outlives_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("forge.sqlite3");
        let db = Database::open_sqlite(&path).expect("db");
        let sessions = Sessions::new(db.sessions.clone());
        let id = sessions.open("alice-token").await.expect("open");
        let before = tokens(&[("alice-token", "team-a"), ("bob-token", "team-b")]);
        let viewer = sessions.viewer(&id, &before).await.expect("read");
        assert_eq!(viewer.expect("logged in").caller.team, "team-a");
        assert!(
            sessions
                .viewer("another-id", &before)
                .await
                .expect("read")
                .is_none()
        );
        // The id is not what is stored: a dump of the table logs nobody in.
        assert!(
            db.sessions
                .session(&id, now_ms())
                .await
                .expect("read")
                .is_none()
        );
        // A restarted gateway (a new handle on the same database) knows the session.
        drop(sessions);
        let sessions = Sessions::new(Database::open_sqlite(&path).expect("db").sessions);
        let again = sessions.viewer(&id, &before).await.expect("read");
        assert_eq!(again.expect("still logged in").caller.team, "team-a");
        // The token moved to another team: the session follows it.
        let moved = tokens(&[("alice-token", "team-c")]);
        let viewer = sessions.viewer(&id, &moved).await.expect("read");
        assert_eq!(viewer.expect("still valid").caller.team, "team-c");
        // Revoked: the open session ends with it.
        let revoked = tokens(&[("bob-token", "team-b")]);
        assert!(
            sessions
                .viewer(&id, &revoked)
                .await
                .expect("read")
                .is_none()
        );
        sessions.close(&id).await.expect("close");
        assert!(sessions.viewer(&id, &before).await.expect("read").is_none());
    }

    #[test]
    fn unreadable_sessions_show_an_error_page_and_never_the_login_page() {
        let down: crate::store::error::Cause =
            std::sync::Arc::new(std::io::Error::other("failover"));
        let page = NoViewer::Unreadable(StoreError::Unavailable(down).into()).into_response();
        assert_eq!(page.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            page.headers().get(header::LOCATION).is_none(),
            "an unreadable store looked like a logout"
        );
        let login = NoViewer::LoginFirst.into_response();
        assert_eq!(login.status(), http::StatusCode::SEE_OTHER);
        assert_eq!(login.headers()[header::LOCATION], "/login");
    }
}
