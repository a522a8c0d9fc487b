//! [`SessionStore`] on SQLite: the `console_sessions` table (migration 15).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use super::SqliteDatabase;
use crate::store::StoreError;
use crate::store::sessions::{SessionRecord, SessionStore};

#[async_trait]
impl SessionStore for SqliteDatabase {
    async fn open_session(
        &self,
        id_sha256: &str,
        session: &SessionRecord,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let (id, s) = (id_sha256.to_string(), session.clone());
        self.write(move |tx| {
            tx.prepare_cached("DELETE FROM console_sessions WHERE expires_at_ms <= ?1")?
                .execute(params![now_ms])?;
            tx.prepare_cached(
                "INSERT INTO console_sessions (id_sha256, token_sha256, csrf, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![id, s.token_sha256, s.csrf, s.expires_at_ms])?;
            Ok(())
        })
        .await
    }

    async fn session(
        &self,
        id_sha256: &str,
        now_ms: i64,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let id = id_sha256.to_string();
        self.with(move |conn| {
            Ok(conn
                .prepare_cached(
                    "SELECT token_sha256, csrf, expires_at_ms FROM console_sessions \
                     WHERE id_sha256 = ?1 AND expires_at_ms > ?2",
                )?
                .query_row(params![id, now_ms], |r| {
                    Ok(SessionRecord {
                        token_sha256: r.get(0)?,
                        csrf: r.get(1)?,
                        expires_at_ms: r.get(2)?,
                    })
                })
                .optional()?)
        })
        .await
    }

    async fn close_session(&self, id_sha256: &str) -> Result<(), StoreError> {
        let id = id_sha256.to_string();
        self.write(move |tx| {
            tx.prepare_cached("DELETE FROM console_sessions WHERE id_sha256 = ?1")?
                .execute(params![id])?;
            Ok(())
        })
        .await
    }
}
