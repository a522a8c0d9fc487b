//! Console sessions ([`SessionStore`]): what a logged-in browser's cookie stands for,
//! kept in the database so that every replica knows every session and a restart or a
//! rolling update logs nobody out (issue 40 §2).
//!
//! A row holds only what a session needs and nothing a database dump could log in
//! with: the SHA-256 of the session id (the cookie's value is never stored), the
//! SHA-256 of the token it was opened with (the viewer is resolved against the tokens
//! in force on every request, so revoking a token ends its sessions on every replica),
//! the session's CSRF secret and its expiry. Expired rows are forgotten when a session
//! is opened.

use async_trait::async_trait;

use super::StoreError;

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// SHA-256 of the token the session was opened with, hex.
    pub token_sha256: String,
    /// The session's CSRF secret.
    pub csrf: String,
    /// When it ends, ms since the epoch.
    pub expires_at_ms: i64,
}

/// Console sessions, keyed by the SHA-256 of their id (hex).
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Stores a new session and forgets those expired by `now_ms`.
    async fn open_session(
        &self,
        id_sha256: &str,
        session: &SessionRecord,
        now_ms: i64,
    ) -> Result<(), StoreError>;
    /// The session, if it exists and has not expired by `now_ms`.
    async fn session(
        &self,
        id_sha256: &str,
        now_ms: i64,
    ) -> Result<Option<SessionRecord>, StoreError>;
    /// Ends a session (nothing happens if there is none).
    async fn close_session(&self, id_sha256: &str) -> Result<(), StoreError>;
}
