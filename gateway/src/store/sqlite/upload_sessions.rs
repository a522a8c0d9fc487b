//! [`UploadSessionStore`] on SQLite: the `upload_sessions` and `upload_parts` tables
//! (migration 16).

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};

use super::SqliteDatabase;
use crate::domain::Digest;
use crate::store::StoreError;
use crate::store::upload_sessions::{PartRecord, UploadRecord, UploadSessionStore};

const COLUMNS: &str =
    "id, team, digest, size, part_bytes, multipart_id, created_at_ms, touched_at_ms";

fn record(r: &Row<'_>) -> rusqlite::Result<UploadRecord> {
    let digest: String = r.get(2)?;
    Ok(UploadRecord {
        id: r.get(0)?,
        team: r.get(1)?,
        digest: Digest::parse(&digest).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into())
        })?,
        size: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
        part_bytes: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
        multipart_id: r.get(5)?,
        created_at_ms: r.get(6)?,
        touched_at_ms: r.get(7)?,
    })
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl UploadSessionStore for SqliteDatabase {
    async fn create_upload(&self, u: &UploadRecord) -> Result<(), StoreError> {
        let u = u.clone();
        self.write(move |tx| {
            tx.prepare_cached(&format!(
                "INSERT INTO upload_sessions ({COLUMNS}, claimed_until_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0)"
            ))?
            .execute(params![
                u.id,
                u.team,
                u.digest.as_str(),
                int(u.size),
                int(u.part_bytes),
                u.multipart_id,
                u.created_at_ms,
                u.touched_at_ms
            ])?;
            Ok(())
        })
        .await
    }

    async fn upload(&self, id: &str) -> Result<Option<UploadRecord>, StoreError> {
        let id = id.to_string();
        self.with(move |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM upload_sessions WHERE id = ?1"
                ))?
                .query_row(params![id], record)
                .optional()?)
        })
        .await
    }

    async fn team_uploads(&self, team: &str) -> Result<Vec<UploadRecord>, StoreError> {
        let team = team.to_string();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM upload_sessions WHERE team = ?1 \
                 ORDER BY created_at_ms, id"
            ))?;
            let rows = stmt.query_map(params![team], record)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn record_part(
        &self,
        id: &str,
        part: &PartRecord,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let (id, p) = (id.to_string(), part.clone());
        self.write(move |tx| {
            let touched = tx
                .prepare_cached("UPDATE upload_sessions SET touched_at_ms = ?2 WHERE id = ?1")?
                .execute(params![id, now_ms])?;
            if touched == 0 {
                return Ok(false);
            }
            tx.prepare_cached(
                "INSERT INTO upload_parts (upload_id, number, len, etag) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (upload_id, number) DO UPDATE SET len = excluded.len, etag = excluded.etag",
            )?
            .execute(params![id, p.number, int(p.len), p.etag])?;
            Ok(true)
        })
        .await
    }

    async fn upload_parts(&self, id: &str) -> Result<Vec<PartRecord>, StoreError> {
        let id = id.to_string();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT number, len, etag FROM upload_parts WHERE upload_id = ?1 ORDER BY number",
            )?;
            let rows = stmt.query_map(params![id], |r| {
                Ok(PartRecord {
                    number: r.get(0)?,
                    len: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    etag: r.get(2)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn claim_upload(&self, id: &str, now_ms: i64, until_ms: i64) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            Ok(tx
                .prepare_cached(
                    "UPDATE upload_sessions SET claimed_until_ms = ?3 \
                     WHERE id = ?1 AND claimed_until_ms <= ?2",
                )?
                .execute(params![id, now_ms, until_ms])?
                == 1)
        })
        .await
    }

    async fn release_upload(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            tx.prepare_cached("UPDATE upload_sessions SET claimed_until_ms = 0 WHERE id = ?1")?
                .execute(params![id])?;
            Ok(())
        })
        .await
    }

    async fn delete_upload(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.write(move |tx| {
            tx.prepare_cached("DELETE FROM upload_parts WHERE upload_id = ?1")?
                .execute(params![id])?;
            Ok(tx
                .prepare_cached("DELETE FROM upload_sessions WHERE id = ?1")?
                .execute(params![id])?
                == 1)
        })
        .await
    }

    async fn expired_uploads(
        &self,
        before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<UploadRecord>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM upload_sessions \
                 WHERE touched_at_ms <= ?1 AND claimed_until_ms <= ?2 ORDER BY touched_at_ms"
            ))?;
            let rows = stmt.query_map(params![before_ms, now_ms], record)?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }
}
