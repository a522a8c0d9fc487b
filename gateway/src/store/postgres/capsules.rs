//! [`CapsuleStore`] on PostgreSQL: the `capsule_owners` table (migration 5; last use
//! from migration 8), one row per (digest, team), and retention's `capsule_deletions`.
//! A grant holds the digest's transaction advisory lock, as retention's claim does
//! (`retention.rs`), so the two never interleave across replicas.

use async_trait::async_trait;

use super::PgDatabase;
use crate::domain::Digest;
use crate::store::capsules::Deletion;
use crate::store::{CapsuleStore, StoreError, now_ms};

/// Takes the transaction advisory lock of capsule `digest` (grants and claims).
pub(super) const LOCK_DIGEST: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('forge-capsule:' || $1, 0))";

/// Reads the deletion state of `$1`.
const DELETION_OF: &str = "SELECT state FROM capsule_deletions WHERE digest = $1";

/// The deletion state in a row of [`DELETION_OF`].
fn deletion(row: Option<tokio_postgres::Row>) -> Result<Option<Deletion>, StoreError> {
    row.map(|r| Deletion::parse(&r.get::<_, String>(0)))
        .transpose()
}

#[async_trait]
impl CapsuleStore for PgDatabase {
    async fn grant_capsule(
        &self,
        digest: &Digest,
        team: &str,
    ) -> Result<Option<Deletion>, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(LOCK_DIGEST, &[&digest.as_str()]).await?;
        tx.execute(
            "INSERT INTO capsule_owners (digest, team, granted_at_ms, last_used_ms) \
             VALUES ($1, $2, $3, $3) \
             ON CONFLICT (digest, team) DO UPDATE SET last_used_ms = EXCLUDED.last_used_ms",
            &[&digest.as_str(), &team, &now_ms()],
        )
        .await?;
        let row = tx.query_opt(DELETION_OF, &[&digest.as_str()]).await?;
        tx.commit().await?;
        deletion(row)
    }

    async fn use_capsule(&self, digest: &Digest, team: &str) -> Result<bool, StoreError> {
        Ok(self
            .client()
            .await?
            .execute(
                "UPDATE capsule_owners SET last_used_ms = $3 WHERE digest = $1 AND team = $2",
                &[&digest.as_str(), &team, &now_ms()],
            )
            .await?
            > 0)
    }

    async fn capsule_deletion(&self, digest: &Digest) -> Result<Option<Deletion>, StoreError> {
        deletion(
            self.client()
                .await?
                .query_opt(DELETION_OF, &[&digest.as_str()])
                .await?,
        )
    }
}
