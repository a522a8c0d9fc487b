//! [`CapsuleStore`] on SQLite: the `capsule_owners` table (migration 5), one row per
//! (digest, team), inserted with `ON CONFLICT DO NOTHING`.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use super::SqliteDatabase;
use crate::domain::Digest;
use crate::store::{CapsuleStore, StoreError, now_ms};

#[async_trait]
impl CapsuleStore for SqliteDatabase {
    async fn grant_capsule(&self, digest: &Digest, team: &str) -> Result<(), StoreError> {
        let (digest, team) = (digest.to_string(), team.to_string());
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO capsule_owners (digest, team, granted_at_ms) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (digest, team) DO NOTHING",
                params![digest, team, now_ms()],
            )?;
            Ok(())
        })
        .await
    }

    async fn capsule_owned_by(&self, digest: &Digest, team: &str) -> Result<bool, StoreError> {
        let (digest, team) = (digest.to_string(), team.to_string());
        self.with(move |conn| {
            Ok(conn
                .query_row(
                    "SELECT 1 FROM capsule_owners WHERE digest = ?1 AND team = ?2",
                    params![digest, team],
                    |_| Ok(()),
                )
                .optional()?
                .is_some())
        })
        .await
    }
}
