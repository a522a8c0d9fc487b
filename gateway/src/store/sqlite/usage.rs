//! The usage ledger on SQLite ([`crate::store::usage`]): one row per team and series,
//! read and rewritten in the accrual's transaction (which the caller fenced).

use rusqlite::{Connection, OptionalExtension, params};

use crate::store::StoreError;
use crate::store::usage::{Accrual, UsageRecord, accrued};

/// Adds the accrual's charges, each row decayed to the accrual's time first.
pub(super) fn accrue(conn: &Connection, a: &Accrual) -> Result<(), StoreError> {
    for c in &a.charges {
        let old: Option<(f64, i64)> = conn
            .prepare_cached(
                "SELECT gpu_seconds, at_ms FROM usage_ledger WHERE team = ?1 AND series = ?2",
            )?
            .query_row(params![c.team, c.series], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let (value, at) = accrued(old, c.gpu_seconds, a.at_ms, a.half_life_s);
        conn.prepare_cached(
            "INSERT INTO usage_ledger (team, series, gpu_seconds, at_ms) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (team, series) DO UPDATE SET gpu_seconds = excluded.gpu_seconds, \
             at_ms = excluded.at_ms",
        )?
        .execute(params![c.team, c.series, value, at])?;
    }
    Ok(())
}

/// Every row, by team and series.
pub(super) fn all(conn: &Connection) -> Result<Vec<UsageRecord>, StoreError> {
    let rows = conn
        .prepare_cached(
            "SELECT team, series, gpu_seconds, at_ms FROM usage_ledger ORDER BY team, series",
        )?
        .query_map([], |r| {
            Ok(UsageRecord {
                team: r.get(0)?,
                series: r.get(1)?,
                gpu_seconds: r.get(2)?,
                at_ms: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
