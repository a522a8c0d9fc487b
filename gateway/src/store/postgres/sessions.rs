//! [`SessionStore`] on PostgreSQL: the `console_sessions` table (migration 15), shared
//! by every replica.

use async_trait::async_trait;

use super::PgDatabase;
use crate::store::StoreError;
use crate::store::sessions::{SessionRecord, SessionStore};

#[async_trait]
impl SessionStore for PgDatabase {
    async fn open_session(
        &self,
        id_sha256: &str,
        session: &SessionRecord,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "DELETE FROM console_sessions WHERE expires_at_ms <= $1",
            &[&now_ms],
        )
        .await?;
        tx.execute(
            "INSERT INTO console_sessions (id_sha256, token_sha256, csrf, expires_at_ms) \
             VALUES ($1, $2, $3, $4)",
            &[
                &id_sha256,
                &session.token_sha256,
                &session.csrf,
                &session.expires_at_ms,
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn session(
        &self,
        id_sha256: &str,
        now_ms: i64,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT token_sha256, csrf, expires_at_ms FROM console_sessions \
                 WHERE id_sha256 = $1 AND expires_at_ms > $2",
                &[&id_sha256, &now_ms],
            )
            .await?;
        Ok(row.map(|r| SessionRecord {
            token_sha256: r.get(0),
            csrf: r.get(1),
            expires_at_ms: r.get(2),
        }))
    }

    async fn close_session(&self, id_sha256: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "DELETE FROM console_sessions WHERE id_sha256 = $1",
                &[&id_sha256],
            )
            .await?;
        Ok(())
    }
}
