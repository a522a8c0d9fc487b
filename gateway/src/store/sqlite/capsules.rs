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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn owners_are_per_team_and_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteDatabase::open(dir.path().join("s.db")).expect("open");
        let d = Digest::parse(&"ab".repeat(32)).expect("digest");
        let other = Digest::parse(&"cd".repeat(32)).expect("digest");
        assert!(!store.capsule_owned_by(&d, "team-a").await.expect("owned"));
        store.grant_capsule(&d, "team-a").await.expect("grant");
        store
            .grant_capsule(&d, "team-a")
            .await
            .expect("grant again");
        assert!(store.capsule_owned_by(&d, "team-a").await.expect("owned"));
        assert!(!store.capsule_owned_by(&d, "team-b").await.expect("owned"));
        assert!(
            !store
                .capsule_owned_by(&other, "team-a")
                .await
                .expect("owned")
        );
        // The same bytes uploaded by a second team: both own them.
        store.grant_capsule(&d, "team-b").await.expect("grant b");
        assert!(store.capsule_owned_by(&d, "team-b").await.expect("owned"));
        assert!(store.capsule_owned_by(&d, "team-a").await.expect("owned"));
    }
}
