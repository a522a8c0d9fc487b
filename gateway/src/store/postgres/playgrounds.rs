//! [`PlaygroundStore`] on PostgreSQL: the `playgrounds` table (migration 7); state
//! changes are `UPDATE … WHERE state = $n` compare-and-sets.

use async_trait::async_trait;
use tokio_postgres::Row;

use super::PgDatabase;
use crate::domain::{EndReason, PlaygroundState};
use crate::store::playgrounds::{COLUMNS, RawRow, args_json, inserted};
use crate::store::{NewPlayground, PlaygroundRecord, PlaygroundStore, StoreError};

fn record(r: &Row) -> Result<PlaygroundRecord, StoreError> {
    RawRow {
        id: r.try_get(0)?,
        team: r.try_get(1)?,
        created_by: r.try_get(2)?,
        model: r.try_get(3)?,
        series: r.try_get(4)?,
        gpus: r.try_get(5)?,
        args: r.try_get(6)?,
        state: r.try_get(7)?,
        reason: r.try_get(8)?,
        created_at_ms: r.try_get(9)?,
        expires_at_ms: r.try_get(10)?,
        idle_seconds: r.try_get(11)?,
        last_request_at_ms: r.try_get(12)?,
        warned_at_ms: r.try_get(13)?,
        ended_at_ms: r.try_get(14)?,
    }
    .into_record()
}

#[async_trait]
impl PlaygroundStore for PgDatabase {
    async fn insert_playground(&self, new: &NewPlayground) -> Result<PlaygroundRecord, StoreError> {
        let idle = new
            .idle_seconds
            .map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        let n = self
            .client()
            .await?
            .execute(
                "INSERT INTO playgrounds (id, team, created_by, model, series, gpus, args, \
                 state, created_at_ms, expires_at_ms, idle_seconds, last_request_at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $8) \
                 ON CONFLICT (id) DO NOTHING",
                &[
                    &new.id,
                    &new.team,
                    &new.created_by,
                    &new.model,
                    &new.series,
                    &i64::from(new.gpus),
                    &args_json(new),
                    &new.created_at_ms,
                    &new.expires_at_ms,
                    &idle,
                ],
            )
            .await?;
        if n == 0 {
            return Err(StoreError::Duplicate(new.id.clone()));
        }
        Ok(inserted(new))
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>, StoreError> {
        self.client()
            .await?
            .query_opt(
                &format!("SELECT {COLUMNS} FROM playgrounds WHERE id = $1"),
                &[&id],
            )
            .await?
            .as_ref()
            .map(record)
            .transpose()
    }

    async fn list_playgrounds(
        &self,
        team: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlaygroundRecord>, StoreError> {
        self.client()
            .await?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM playgrounds WHERE ($1::TEXT IS NULL OR team = $1) \
                     ORDER BY created_at_ms DESC, id DESC LIMIT $2"
                ),
                &[&team, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(record)
            .collect()
    }

    async fn active_playgrounds(&self) -> Result<Vec<PlaygroundRecord>, StoreError> {
        self.client()
            .await?
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM playgrounds WHERE state IN ('pending', 'ready') \
                     ORDER BY created_at_ms, id"
                ),
                &[],
            )
            .await?
            .iter()
            .map(record)
            .collect()
    }

    async fn set_playground_state(
        &self,
        id: &str,
        from: PlaygroundState,
        to: PlaygroundState,
        reason: Option<EndReason>,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let ended = to.is_terminal().then_some(at_ms);
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE playgrounds SET state = $3, reason = COALESCE($4, reason), \
                 ended_at_ms = COALESCE($5, ended_at_ms) WHERE id = $1 AND state = $2",
                &[
                    &id,
                    &from.as_str(),
                    &to.as_str(),
                    &reason.map(EndReason::as_str),
                    &ended,
                ],
            )
            .await?;
        Ok(n == 1)
    }

    async fn extend_playground(&self, id: &str, expires_at_ms: i64) -> Result<bool, StoreError> {
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE playgrounds SET expires_at_ms = $2, warned_at_ms = NULL \
                 WHERE id = $1 AND state IN ('pending', 'ready')",
                &[&id, &expires_at_ms],
            )
            .await?;
        Ok(n == 1)
    }

    async fn touch_playground(&self, id: &str, at_ms: i64) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "UPDATE playgrounds SET last_request_at_ms = GREATEST(last_request_at_ms, $2), \
                 warned_at_ms = NULL WHERE id = $1 AND state IN ('pending', 'ready')",
                &[&id, &at_ms],
            )
            .await?;
        Ok(())
    }

    async fn warn_playground(&self, id: &str, at_ms: i64) -> Result<bool, StoreError> {
        let n = self
            .client()
            .await?
            .execute(
                "UPDATE playgrounds SET warned_at_ms = $2 \
                 WHERE id = $1 AND warned_at_ms IS NULL AND state IN ('pending', 'ready')",
                &[&id, &at_ms],
            )
            .await?;
        Ok(n == 1)
    }
}
