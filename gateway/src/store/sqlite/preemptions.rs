//! Preemption rows on SQLite ([`crate::store::preemptions`]): written inside a job's
//! transition, read for a job's page and the dispatcher's window.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::store::checkpoints;
use crate::store::codec::to_u64;
use crate::store::preemptions::{
    PREEMPTION_COLUMNS, PreemptionRecord, PreemptionWrite, ReleaseCause, lost_gpu_seconds,
};
use crate::store::{JobRecord, StoreError};

fn from_row(row: &Row<'_>) -> rusqlite::Result<PreemptionRecord> {
    Ok(PreemptionRecord {
        job_id: row.get(0)?,
        attempt: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(0),
        by_job: row.get(2)?,
        at_ms: row.get(3)?,
        notice_ms: row.get(4)?,
        released_ms: row.get(5)?,
        checkpoint_step: row.get::<_, Option<i64>>(6)?.map(to_u64),
        lost_gpu_seconds: row.get(7)?,
        gpus: u32::try_from(row.get::<_, i64>(8)?).unwrap_or(0),
        series: row.get(9)?,
        attempt_started_ms: row.get(10)?,
        released_by: ReleaseCause::parse(row.get::<_, Option<String>>(11)?.as_deref()),
    })
}

/// Opens or closes `job`'s preemption record (`job` as the transition left it;
/// `bumped`: 1 when the transition moved its attempt on).
pub(super) fn write(
    conn: &Connection,
    job: &JobRecord,
    bumped: i64,
    w: &PreemptionWrite,
) -> Result<(), StoreError> {
    let attempt = i64::from(job.attempt) - bumped;
    match w {
        PreemptionWrite::Notice(n) => {
            conn.prepare_cached(
                "INSERT INTO preemptions (job_id, attempt, by_job, at_ms, notice_ms, gpus, \
                 series, planned_lost, attempt_started_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )?
            .execute(params![
                job.id,
                attempt,
                n.by_job,
                n.at_ms,
                n.notice_ms,
                n.gpus,
                n.series,
                n.planned_lost_gpu_seconds,
                n.attempt_started_ms
            ])?;
        }
        PreemptionWrite::Release(r) => {
            let step = job
                .last_checkpoint
                .map(|c| checkpoints::to_column(c.step))
                .transpose()?;
            let lost = if r.measured {
                conn.prepare_cached(
                    "SELECT gpus, attempt_started_ms FROM preemptions \
                     WHERE job_id = ?1 AND attempt = ?2 AND released_ms IS NULL",
                )?
                .query_row(params![job.id, attempt], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
                })
                .optional()?
                .map(|(gpus, started)| {
                    let gpus = u32::try_from(gpus).unwrap_or(0);
                    lost_gpu_seconds(gpus, started, job.last_checkpoint, r.released_ms)
                })
            } else {
                None
            };
            conn.prepare_cached(
                "UPDATE preemptions SET released_ms = ?1, checkpoint_step = ?2, \
                 lost_gpu_seconds = ?3, released_by = ?6 WHERE job_id = ?4 \
                 AND attempt = ?5 AND released_ms IS NULL",
            )?
            .execute(params![
                r.released_ms,
                step,
                lost,
                job.id,
                attempt,
                r.released_by.map(ReleaseCause::as_str)
            ])?;
        }
    }
    Ok(())
}

/// A job's preemptions, oldest first.
pub(super) fn of_job(conn: &Connection, id: &str) -> Result<Vec<PreemptionRecord>, StoreError> {
    let sql = format!(
        "SELECT {PREEMPTION_COLUMNS} FROM preemptions WHERE job_id = ?1 ORDER BY attempt ASC"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([id], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}

/// The preemptions noticed since `since_ms` and those whose notice runs.
pub(super) fn since(conn: &Connection, since_ms: i64) -> Result<Vec<PreemptionRecord>, StoreError> {
    let sql = format!(
        "SELECT {PREEMPTION_COLUMNS} FROM preemptions \
         WHERE at_ms >= ?1 OR released_ms IS NULL ORDER BY at_ms ASC"
    );
    let rows = conn
        .prepare_cached(&sql)?
        .query_map([since_ms], from_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows)
}
