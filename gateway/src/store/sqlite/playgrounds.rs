//! [`PlaygroundStore`] on SQLite: the `playgrounds` table (migration 7); state changes
//! are `UPDATE … WHERE state = ?` compare-and-sets.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, Row, params};

use super::SqliteDatabase;
use crate::domain::{EndReason, PlaygroundState};
use crate::store::playgrounds::{COLUMNS, RawRow, args_json, inserted};
use crate::store::{NewPlayground, PlaygroundRecord, PlaygroundStore, StoreError};

fn raw(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        id: r.get(0)?,
        team: r.get(1)?,
        created_by: r.get(2)?,
        model: r.get(3)?,
        series: r.get(4)?,
        gpus: r.get(5)?,
        args: r.get(6)?,
        state: r.get(7)?,
        reason: r.get(8)?,
        created_at_ms: r.get(9)?,
        expires_at_ms: r.get(10)?,
        idle_seconds: r.get(11)?,
        last_request_at_ms: r.get(12)?,
        warned_at_ms: r.get(13)?,
        ended_at_ms: r.get(14)?,
    })
}

fn idle(new: &NewPlayground) -> Option<i64> {
    new.idle_seconds
        .map(|s| i64::try_from(s).unwrap_or(i64::MAX))
}

#[async_trait]
impl PlaygroundStore for SqliteDatabase {
    async fn insert_playground(&self, new: &NewPlayground) -> Result<PlaygroundRecord, StoreError> {
        let new = new.clone();
        self.with(move |conn| {
            let n = conn.execute(
                "INSERT INTO playgrounds (id, team, created_by, model, series, gpus, args, \
                 state, created_at_ms, expires_at_ms, idle_seconds, last_request_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'pending', ?8, ?9, ?10, ?8) \
                 ON CONFLICT (id) DO NOTHING",
                params![
                    new.id,
                    new.team,
                    new.created_by,
                    new.model,
                    new.series,
                    new.gpus,
                    args_json(&new),
                    new.created_at_ms,
                    new.expires_at_ms,
                    idle(&new)
                ],
            )?;
            if n == 0 {
                return Err(StoreError::Duplicate(new.id));
            }
            Ok(inserted(&new))
        })
        .await
    }

    async fn get_playground(&self, id: &str) -> Result<Option<PlaygroundRecord>, StoreError> {
        let id = id.to_owned();
        self.with(move |conn| {
            conn.query_row(
                &format!("SELECT {COLUMNS} FROM playgrounds WHERE id = ?1"),
                params![id],
                raw,
            )
            .optional()?
            .map(RawRow::into_record)
            .transpose()
        })
        .await
    }

    async fn list_playgrounds(
        &self,
        team: Option<&str>,
        limit: u32,
    ) -> Result<Vec<PlaygroundRecord>, StoreError> {
        let team = team.map(str::to_owned);
        self.with(move |conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM playgrounds WHERE (?1 IS NULL OR team = ?1) \
                 ORDER BY created_at_ms DESC, id DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![team, limit], raw)?;
            rows.map(|r| r.map_err(StoreError::from).and_then(RawRow::into_record))
                .collect()
        })
        .await
    }

    async fn active_playgrounds(&self) -> Result<Vec<PlaygroundRecord>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM playgrounds WHERE state IN ('pending', 'ready') \
                 ORDER BY created_at_ms, id"
            ))?;
            let rows = stmt.query_map([], raw)?;
            rows.map(|r| r.map_err(StoreError::from).and_then(RawRow::into_record))
                .collect()
        })
        .await
    }

    async fn set_playground_state(
        &self,
        id: &str,
        from: PlaygroundState,
        to: PlaygroundState,
        reason: Option<EndReason>,
        at_ms: i64,
    ) -> Result<bool, StoreError> {
        let id = id.to_owned();
        let ended = to.is_terminal().then_some(at_ms);
        self.with(move |conn| {
            let n = conn.execute(
                "UPDATE playgrounds SET state = ?3, reason = COALESCE(?4, reason), \
                 ended_at_ms = COALESCE(?5, ended_at_ms) WHERE id = ?1 AND state = ?2",
                params![
                    id,
                    from.as_str(),
                    to.as_str(),
                    reason.map(EndReason::as_str),
                    ended
                ],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn extend_playground(&self, id: &str, expires_at_ms: i64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.with(move |conn| {
            let n = conn.execute(
                "UPDATE playgrounds SET expires_at_ms = ?2, warned_at_ms = NULL \
                 WHERE id = ?1 AND state IN ('pending', 'ready')",
                params![id, expires_at_ms],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn touch_playground(&self, id: &str, at_ms: i64) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.with(move |conn| {
            conn.execute(
                "UPDATE playgrounds SET last_request_at_ms = MAX(last_request_at_ms, ?2), \
                 warned_at_ms = NULL WHERE id = ?1 AND state IN ('pending', 'ready')",
                params![id, at_ms],
            )?;
            Ok(())
        })
        .await
    }

    async fn warn_playground(&self, id: &str, at_ms: i64) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.with(move |conn| {
            let n = conn.execute(
                "UPDATE playgrounds SET warned_at_ms = ?2 \
                 WHERE id = ?1 AND warned_at_ms IS NULL AND state IN ('pending', 'ready')",
                params![id, at_ms],
            )?;
            Ok(n == 1)
        })
        .await
    }
}
