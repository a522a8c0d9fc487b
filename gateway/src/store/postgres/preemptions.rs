//! Preemption rows on PostgreSQL ([`crate::store::preemptions`]): written inside a
//! job's transition, read for a job's page and the dispatcher's window.

use tokio_postgres::Row;

use crate::store::checkpoints;
use crate::store::codec::to_u64;
use crate::store::preemptions::{
    PREEMPTION_COLUMNS, PreemptionRecord, PreemptionWrite, ReleaseCause, lost_gpu_seconds,
};
use crate::store::{JobRecord, StoreError};

fn from_row(row: &Row) -> Result<PreemptionRecord, StoreError> {
    Ok(PreemptionRecord {
        job_id: row.try_get(0)?,
        attempt: u32::try_from(row.try_get::<_, i32>(1)?).unwrap_or(0),
        by_job: row.try_get(2)?,
        at_ms: row.try_get(3)?,
        notice_ms: row.try_get(4)?,
        released_ms: row.try_get(5)?,
        checkpoint_step: row.try_get::<_, Option<i64>>(6)?.map(to_u64),
        lost_gpu_seconds: row.try_get(7)?,
        gpus: u32::try_from(row.try_get::<_, i32>(8)?).unwrap_or(0),
        series: row.try_get(9)?,
        attempt_started_ms: row.try_get(10)?,
        released_by: ReleaseCause::parse(row.try_get::<_, Option<&str>>(11)?),
    })
}

/// Opens or closes `job`'s preemption record (`job` as the transition left it;
/// `bumped`: 1 when the transition moved its attempt on).
pub(super) async fn write(
    client: &impl deadpool_postgres::GenericClient,
    job: &JobRecord,
    bumped: i64,
    w: &PreemptionWrite,
) -> Result<(), StoreError> {
    let attempt = i32::try_from(i64::from(job.attempt) - bumped).unwrap_or(0);
    match w {
        PreemptionWrite::Notice(n) => {
            let gpus = i32::try_from(n.gpus).unwrap_or(i32::MAX);
            client
                .execute(
                    "INSERT INTO preemptions (job_id, attempt, by_job, at_ms, notice_ms, gpus, \
                     series, planned_lost, attempt_started_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    &[
                        &job.id,
                        &attempt,
                        &n.by_job,
                        &n.at_ms,
                        &n.notice_ms,
                        &gpus,
                        &n.series,
                        &n.planned_lost_gpu_seconds,
                        &n.attempt_started_ms,
                    ],
                )
                .await?;
        }
        PreemptionWrite::Release(r) => {
            let step = job
                .last_checkpoint
                .map(|c| checkpoints::to_column(c.step))
                .transpose()?;
            let lost = if r.measured {
                client
                    .query_opt(
                        "SELECT gpus, attempt_started_ms FROM preemptions \
                         WHERE job_id = $1 AND attempt = $2 AND released_ms IS NULL",
                        &[&job.id, &attempt],
                    )
                    .await?
                    .map(|row| -> Result<f64, StoreError> {
                        let gpus = u32::try_from(row.try_get::<_, i32>(0)?).unwrap_or(0);
                        let started: i64 = row.try_get(1)?;
                        Ok(lost_gpu_seconds(
                            gpus,
                            started,
                            job.last_checkpoint,
                            r.released_ms,
                        ))
                    })
                    .transpose()?
            } else {
                None
            };
            client
                .execute(
                    "UPDATE preemptions SET released_ms = $1, checkpoint_step = $2, \
                     lost_gpu_seconds = $3, released_by = $6 WHERE job_id = $4 \
                     AND attempt = $5 AND released_ms IS NULL",
                    &[
                        &r.released_ms,
                        &step,
                        &lost,
                        &job.id,
                        &attempt,
                        &r.released_by.map(ReleaseCause::as_str),
                    ],
                )
                .await?;
        }
    }
    Ok(())
}

/// A job's preemptions, oldest first.
pub(super) async fn of_job(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
) -> Result<Vec<PreemptionRecord>, StoreError> {
    let sql = format!(
        "SELECT {PREEMPTION_COLUMNS} FROM preemptions WHERE job_id = $1 ORDER BY attempt ASC"
    );
    client
        .query(&sql, &[&id])
        .await?
        .iter()
        .map(from_row)
        .collect()
}

/// The preemptions noticed since `since_ms` and those whose notice runs.
pub(super) async fn since(
    client: &impl deadpool_postgres::GenericClient,
    since_ms: i64,
) -> Result<Vec<PreemptionRecord>, StoreError> {
    let sql = format!(
        "SELECT {PREEMPTION_COLUMNS} FROM preemptions \
         WHERE at_ms >= $1 OR released_ms IS NULL ORDER BY at_ms ASC"
    );
    client
        .query(&sql, &[&since_ms])
        .await?
        .iter()
        .map(from_row)
        .collect()
}
