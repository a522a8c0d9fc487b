//! [`RetentionStore`] on PostgreSQL: bounded deletes of rejected jobs, the ended jobs
//! whose logs are due (index `jobs_state_updated`), expiring capsule ownerships, and
//! claims on unowned capsules under the digest's advisory lock (serialized with grants).

use async_trait::async_trait;

use super::PgDatabase;
use super::capsules::LOCK_DIGEST;
use crate::domain::Digest;
use crate::store::capsules::Deletion;
use crate::store::retention::{ACTIVE_STATES_SQL, ENDED_STATES_SQL};
use crate::store::{RetentionStore, StoreError};

#[async_trait]
impl RetentionStore for PgDatabase {
    async fn purge_rejected(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let ids: Vec<String> = tx
            .query(
                "SELECT id FROM jobs WHERE state = 'rejected' AND updated_at_ms < $1 \
                 ORDER BY updated_at_ms LIMIT $2 FOR UPDATE",
                &[&before_ms, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        tx.execute("DELETE FROM job_history WHERE job_id = ANY($1)", &[&ids])
            .await?;
        tx.execute("DELETE FROM decisions WHERE job_id = ANY($1)", &[&ids])
            .await?;
        let n = tx
            .execute("DELETE FROM jobs WHERE id = ANY($1)", &[&ids])
            .await?;
        tx.commit().await?;
        Ok(n)
    }

    async fn logs_due(&self, before_ms: i64, limit: u32) -> Result<Vec<(String, i64)>, StoreError> {
        Ok(self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT id, updated_at_ms FROM jobs WHERE state IN {ENDED_STATES_SQL} \
                     AND updated_at_ms < $1 AND logs_deleted_at_ms IS NULL \
                     ORDER BY updated_at_ms LIMIT $2"
                ),
                &[&before_ms, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    async fn logs_deleted(&self, job_id: &str, at_ms: i64) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE jobs SET logs_deleted_at_ms = $2 WHERE id = $1",
                &[&job_id, &at_ms],
            )
            .await?;
        Ok(())
    }

    async fn logs_deleted_at(&self, job_id: &str) -> Result<Option<i64>, StoreError> {
        Ok(self
            .client()
            .await?
            .query_opt(
                "SELECT logs_deleted_at_ms FROM jobs WHERE id = $1",
                &[&job_id],
            )
            .await?
            .and_then(|r| r.get::<_, Option<i64>>(0)))
    }

    async fn expire_capsule_owners(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        Ok(self
            .client()
            .await?
            .execute(
                &format!(
                    "DELETE FROM capsule_owners WHERE (digest, team) IN ( \
                       SELECT o.digest, o.team FROM capsule_owners o \
                       WHERE COALESCE(o.last_used_ms, o.granted_at_ms) < $1 \
                         AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.capsule_sha256 = o.digest \
                                         AND j.state IN {ACTIVE_STATES_SQL}) \
                       LIMIT $2)"
                ),
                &[&before_ms, &i64::from(limit)],
            )
            .await?)
    }

    async fn claim_capsule_deletion(
        &self,
        digest: &Digest,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(LOCK_DIGEST, &[&digest.as_str()]).await?;
        let claimed = tx
            .execute(
                &format!(
                    "INSERT INTO capsule_deletions (digest, state, at_ms) \
                     SELECT $1, $2, $3 \
                     WHERE NOT EXISTS (SELECT 1 FROM capsule_owners WHERE digest = $1) \
                       AND NOT EXISTS (SELECT 1 FROM jobs WHERE capsule_sha256 = $1 \
                                       AND state IN {ACTIVE_STATES_SQL}) \
                     ON CONFLICT (digest) DO UPDATE SET state = EXCLUDED.state, \
                       at_ms = EXCLUDED.at_ms"
                ),
                &[&digest.as_str(), &Deletion::Deleting.as_str(), &at_ms],
            )
            .await?
            > 0;
        tx.commit().await?;
        Ok(claimed)
    }

    async fn capsule_deleted(&self, digest: &Digest, at_ms: i64) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE capsule_deletions SET state = $2, at_ms = $3 WHERE digest = $1",
                &[&digest.as_str(), &Deletion::Deleted.as_str(), &at_ms],
            )
            .await?;
        Ok(())
    }

    async fn stale_capsule_deletions(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Digest>, StoreError> {
        self.client()
            .await?
            .query(
                "SELECT digest FROM capsule_deletions WHERE state = $1 AND at_ms < $2 \
                 ORDER BY at_ms LIMIT $3",
                &[&Deletion::Deleting.as_str(), &before_ms, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(|r| {
                Digest::parse(&r.get::<_, String>(0))
                    .map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .collect()
    }

    async fn prune_capsule_deletions(&self, before_ms: i64) -> Result<u64, StoreError> {
        Ok(self
            .client()
            .await?
            .execute(
                "DELETE FROM capsule_deletions WHERE state = $1 AND at_ms < $2",
                &[&Deletion::Deleted.as_str(), &before_ms],
            )
            .await?)
    }
}
