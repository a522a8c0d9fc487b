//! [`RetentionStore`] on SQLite: bounded deletes of rejected jobs, the ended jobs whose
//! logs are due (index `jobs_state_updated`), expiring capsule ownerships, and claims on
//! unowned capsules in an `IMMEDIATE` transaction (serialized with grants).

use async_trait::async_trait;
use rusqlite::{TransactionBehavior, params};

use super::SqliteDatabase;
use crate::domain::Digest;
use crate::store::capsules::Deletion;
use crate::store::retention::{ACTIVE_STATES_SQL, ENDED_STATES_SQL};
use crate::store::{RetentionStore, StoreError};

#[async_trait]
impl RetentionStore for SqliteDatabase {
    async fn purge_rejected(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let ids: Vec<String> = tx
                .prepare(
                    "SELECT id FROM jobs WHERE state = 'rejected' AND updated_at_ms < ?1 \
                     ORDER BY updated_at_ms LIMIT ?2",
                )?
                .query_map(params![before_ms, limit], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            for id in &ids {
                tx.execute("DELETE FROM job_history WHERE job_id = ?1", params![id])?;
                tx.execute("DELETE FROM decisions WHERE job_id = ?1", params![id])?;
                tx.execute("DELETE FROM jobs WHERE id = ?1", params![id])?;
            }
            tx.commit()?;
            Ok(ids.len() as u64)
        })
        .await
    }

    async fn logs_due(&self, before_ms: i64, limit: u32) -> Result<Vec<(String, i64)>, StoreError> {
        self.with(move |conn| {
            Ok(conn
                .prepare(&format!(
                    "SELECT id, updated_at_ms FROM jobs WHERE state IN {ENDED_STATES_SQL} \
                     AND updated_at_ms < ?1 AND logs_deleted_at_ms IS NULL \
                     ORDER BY updated_at_ms LIMIT ?2"
                ))?
                .query_map(params![before_ms, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?)
        })
        .await
    }

    async fn logs_deleted(&self, job_id: &str, at_ms: i64) -> Result<(), StoreError> {
        let id = job_id.to_string();
        self.with(move |conn| {
            conn.execute(
                "UPDATE jobs SET logs_deleted_at_ms = ?2 WHERE id = ?1",
                params![id, at_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn logs_deleted_at(&self, job_id: &str) -> Result<Option<i64>, StoreError> {
        let id = job_id.to_string();
        self.with(move |conn| {
            use rusqlite::OptionalExtension;
            Ok(conn
                .query_row(
                    "SELECT logs_deleted_at_ms FROM jobs WHERE id = ?1",
                    params![id],
                    |r| r.get::<_, Option<i64>>(0),
                )
                .optional()?
                .flatten())
        })
        .await
    }

    async fn expire_capsule_owners(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        self.with(move |conn| {
            let n = conn.execute(
                &format!(
                    "DELETE FROM capsule_owners WHERE (digest, team) IN ( \
                       SELECT o.digest, o.team FROM capsule_owners o \
                       WHERE COALESCE(o.last_used_ms, o.granted_at_ms) < ?1 \
                         AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.capsule_sha256 = o.digest \
                                         AND j.state IN {ACTIVE_STATES_SQL}) \
                       LIMIT ?2)"
                ),
                params![before_ms, limit],
            )?;
            Ok(n as u64)
        })
        .await
    }

    async fn claim_capsule_deletion(
        &self,
        digest: &Digest,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let digest = digest.to_string();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let claimed = tx.execute(
                &format!(
                    "INSERT INTO capsule_deletions (digest, state, at_ms) \
                     SELECT ?1, ?2, ?3 \
                     WHERE NOT EXISTS (SELECT 1 FROM capsule_owners WHERE digest = ?1) \
                       AND NOT EXISTS (SELECT 1 FROM jobs WHERE capsule_sha256 = ?1 \
                                       AND state IN {ACTIVE_STATES_SQL}) \
                     ON CONFLICT (digest) DO UPDATE SET state = excluded.state, at_ms = excluded.at_ms"
                ),
                params![digest, Deletion::Deleting.as_str(), at_ms],
            )? > 0;
            tx.commit()?;
            Ok(claimed)
        })
        .await
    }

    async fn capsule_deleted(&self, digest: &Digest, at_ms: i64) -> Result<(), StoreError> {
        let digest = digest.to_string();
        self.with(move |conn| {
            conn.execute(
                "UPDATE capsule_deletions SET state = ?2, at_ms = ?3 WHERE digest = ?1",
                params![digest, Deletion::Deleted.as_str(), at_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn stale_capsule_deletions(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Digest>, StoreError> {
        self.with(move |conn| {
            let rows: Vec<String> = conn
                .prepare(
                    "SELECT digest FROM capsule_deletions WHERE state = ?1 AND at_ms < ?2 \
                     ORDER BY at_ms LIMIT ?3",
                )?
                .query_map(
                    params![Deletion::Deleting.as_str(), before_ms, limit],
                    |r| r.get(0),
                )?
                .collect::<Result<_, _>>()?;
            rows.iter()
                .map(|d| Digest::parse(d).map_err(|e| StoreError::Corrupt(e.to_string())))
                .collect()
        })
        .await
    }

    async fn prune_capsule_deletions(&self, before_ms: i64) -> Result<u64, StoreError> {
        self.with(move |conn| {
            Ok(conn.execute(
                "DELETE FROM capsule_deletions WHERE state = ?1 AND at_ms < ?2",
                params![Deletion::Deleted.as_str(), before_ms],
            )? as u64)
        })
        .await
    }
}
