//! [`UploadSessionStore`] on PostgreSQL: the `upload_sessions` and `upload_parts`
//! tables (migration 16), shared by every replica.

use async_trait::async_trait;
use tokio_postgres::Row;

use super::PgDatabase;
use crate::domain::Digest;
use crate::store::StoreError;
use crate::store::upload_sessions::{PartRecord, UploadRecord, UploadSessionStore};

const COLUMNS: &str =
    "id, team, digest, size, part_bytes, multipart_id, created_at_ms, touched_at_ms";

fn record(r: &Row) -> Result<UploadRecord, StoreError> {
    let digest: String = r.get(2);
    Ok(UploadRecord {
        id: r.get(0),
        team: r.get(1),
        digest: Digest::parse(&digest)
            .map_err(|e| StoreError::Corrupt(format!("upload {}: {e}", r.get::<_, String>(0))))?,
        size: u64::try_from(r.get::<_, i64>(3)).unwrap_or(0),
        part_bytes: u64::try_from(r.get::<_, i64>(4)).unwrap_or(0),
        multipart_id: r.get(5),
        created_at_ms: r.get(6),
        touched_at_ms: r.get(7),
    })
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl UploadSessionStore for PgDatabase {
    async fn create_upload(&self, u: &UploadRecord) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                &format!(
                    "INSERT INTO upload_sessions ({COLUMNS}, claimed_until_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0)"
                ),
                &[
                    &u.id,
                    &u.team,
                    &u.digest.as_str(),
                    &int(u.size),
                    &int(u.part_bytes),
                    &u.multipart_id,
                    &u.created_at_ms,
                    &u.touched_at_ms,
                ],
            )
            .await?;
        Ok(())
    }

    async fn upload(&self, id: &str) -> Result<Option<UploadRecord>, StoreError> {
        let row = self
            .client()
            .await?
            .query_opt(
                &format!("SELECT {COLUMNS} FROM upload_sessions WHERE id = $1"),
                &[&id],
            )
            .await?;
        row.as_ref().map(record).transpose()
    }

    async fn team_uploads(&self, team: &str) -> Result<Vec<UploadRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM upload_sessions WHERE team = $1 \
                     ORDER BY created_at_ms, id"
                ),
                &[&team],
            )
            .await?;
        rows.iter().map(record).collect()
    }

    async fn record_part(
        &self,
        id: &str,
        part: &PartRecord,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let touched = tx
            .execute(
                "UPDATE upload_sessions SET touched_at_ms = $2 WHERE id = $1",
                &[&id, &now_ms],
            )
            .await?;
        if touched == 0 {
            return Ok(false);
        }
        let number = i32::try_from(part.number).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO upload_parts (upload_id, number, len, etag) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (upload_id, number) DO UPDATE SET len = excluded.len, etag = excluded.etag",
            &[&id, &number, &int(part.len), &part.etag],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn upload_parts(&self, id: &str) -> Result<Vec<PartRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT number, len, etag FROM upload_parts WHERE upload_id = $1 ORDER BY number",
                &[&id],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|r| PartRecord {
                number: u32::try_from(r.get::<_, i32>(0)).unwrap_or(0),
                len: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                etag: r.get(2),
            })
            .collect())
    }

    async fn claim_upload(&self, id: &str, now_ms: i64, until_ms: i64) -> Result<bool, StoreError> {
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE upload_sessions SET claimed_until_ms = $3 \
                 WHERE id = $1 AND claimed_until_ms <= $2",
                &[&id, &now_ms, &until_ms],
            )
            .await?;
        Ok(n == 1)
    }

    async fn release_upload(&self, id: &str) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE upload_sessions SET claimed_until_ms = 0 WHERE id = $1",
                &[&id],
            )
            .await?;
        Ok(())
    }

    async fn delete_upload(&self, id: &str) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let n = tx
            .execute("DELETE FROM upload_sessions WHERE id = $1", &[&id])
            .await?;
        tx.execute("DELETE FROM upload_parts WHERE upload_id = $1", &[&id])
            .await?;
        tx.commit().await?;
        Ok(n == 1)
    }

    async fn expired_uploads(
        &self,
        before_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<UploadRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM upload_sessions \
                     WHERE touched_at_ms <= $1 AND claimed_until_ms <= $2 ORDER BY touched_at_ms"
                ),
                &[&before_ms, &now_ms],
            )
            .await?;
        rows.iter().map(record).collect()
    }
}
