//! [`CapsuleStore`] on SQLite: the `capsule_owners` table (migration 5; last use from
//! migration 8), one row per (digest, team), and retention's `capsule_deletions`. A
//! grant is an `IMMEDIATE` transaction, so it and retention's claim on the same digest
//! (`retention.rs`) never interleave, across processes too.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use super::SqliteDatabase;
use crate::domain::Digest;
use crate::store::capsules::Deletion;
use crate::store::{CapsuleStore, StoreError, now_ms};

/// The deletion state of `digest` on `conn`.
pub(super) fn deletion_of(
    conn: &rusqlite::Connection,
    digest: &str,
) -> Result<Option<Deletion>, StoreError> {
    conn.query_row(
        "SELECT state FROM capsule_deletions WHERE digest = ?1",
        params![digest],
        |r| r.get::<_, String>(0),
    )
    .optional()?
    .map(|s| Deletion::parse(&s))
    .transpose()
}

#[async_trait]
impl CapsuleStore for SqliteDatabase {
    async fn grant_capsule(
        &self,
        digest: &Digest,
        team: &str,
    ) -> Result<Option<Deletion>, StoreError> {
        let (digest, team) = (digest.to_string(), team.to_string());
        // In the batch's IMMEDIATE transaction, so retention's claim cannot interleave.
        self.write(move |tx| {
            let now = now_ms();
            tx.execute(
                "INSERT INTO capsule_owners (digest, team, granted_at_ms, last_used_ms) \
                 VALUES (?1, ?2, ?3, ?3) \
                 ON CONFLICT (digest, team) DO UPDATE SET last_used_ms = excluded.last_used_ms",
                params![digest, team, now],
            )?;
            deletion_of(tx, &digest)
        })
        .await
    }

    async fn use_capsule(&self, digest: &Digest, team: &str) -> Result<bool, StoreError> {
        let (digest, team) = (digest.to_string(), team.to_string());
        self.write(move |conn| {
            Ok(conn.execute(
                "UPDATE capsule_owners SET last_used_ms = ?3 WHERE digest = ?1 AND team = ?2",
                params![digest, team, now_ms()],
            )? > 0)
        })
        .await
    }

    async fn capsule_deletion(&self, digest: &Digest) -> Result<Option<Deletion>, StoreError> {
        let digest = digest.to_string();
        self.with(move |conn| deletion_of(conn, &digest)).await
    }
}
