//! [`CapsuleStore`] on PostgreSQL: the `capsule_owners` table (migration 5), one row per
//! (digest, team), inserted with `ON CONFLICT DO NOTHING`.

use async_trait::async_trait;

use super::PgDatabase;
use crate::domain::Digest;
use crate::store::{CapsuleStore, StoreError, now_ms};

#[async_trait]
impl CapsuleStore for PgDatabase {
    async fn grant_capsule(&self, digest: &Digest, team: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO capsule_owners (digest, team, granted_at_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (digest, team) DO NOTHING",
                &[&digest.to_string(), &team, &now_ms()],
            )
            .await?;
        Ok(())
    }

    async fn capsule_owned_by(&self, digest: &Digest, team: &str) -> Result<bool, StoreError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "SELECT 1 FROM capsule_owners WHERE digest = $1 AND team = $2",
                &[&digest.to_string(), &team],
            )
            .await?
            .is_some())
    }
}
