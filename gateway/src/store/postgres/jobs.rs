//! [`JobStore`] on PostgreSQL: jobs, their history and decisions; the queue is the jobs
//! table in `seq` order. Transitions are compare-and-set `UPDATE … WHERE state = $n`;
//! a fenced one first reads its lease's epoch `FOR KEY SHARE` in the same transaction
//! (`coord.rs` says why that lock mode).

use std::collections::BTreeMap;

use async_trait::async_trait;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::job_feed::LOCK_FEED;
use super::{JOBS_CHANNEL, PgDatabase, QUEUE_CHANNEL};
use crate::domain::{Digest, JobState};
use crate::store::checkpoints::{self, ACKNOWLEDGING_STATES, Checkpoint, CheckpointOutcome};
use crate::store::codec::{
    JOB_COLUMNS, assemble_lives, attempt_step, fence_holds, from_json, history_entry, json_text,
    page_bounds, page_of, parse_digest, parse_placement, parse_state, parse_terms, to_u64,
    transition_columns,
};
use crate::store::dispatch_journal::PassRecord;
use crate::store::usage::{Accrual, UsageRecord};
use crate::store::{
    DecisionRecord, Fence, HistoryEntry, JobLife, JobRecord, JobStore, ListQuery, NewDecision,
    NewJob, Page, PreemptionRecord, PreemptionWrite, StoreError, StoredChange, Transition, now_ms,
};

fn job_from_row(row: &Row) -> Result<JobRecord, StoreError> {
    Ok(JobRecord {
        seq: row.try_get(0)?,
        id: row.try_get(1)?,
        team: row.try_get(2)?,
        name: row.try_get(3)?,
        spec: from_json(row.try_get(4)?, "spec")?,
        state: parse_state(row.try_get(5)?)?,
        reason: row.try_get(6)?,
        capsule_sha256: parse_digest(row.try_get(7)?)?,
        rayjob_name: row.try_get(8)?,
        queue_series: row.try_get(9)?,
        placement: parse_placement(row.try_get(12)?)?,
        created_at_ms: row.try_get(10)?,
        updated_at_ms: row.try_get(11)?,
        trace_parent: row.try_get(13)?,
        last_checkpoint: checkpoints::from_columns(row.try_get(14)?, row.try_get(15)?),
        attempt: u32::try_from(row.try_get::<_, i32>(16)?).unwrap_or(0),
        terms: parse_terms(row.try_get(17)?)?,
        fleet: row.try_get(18)?,
    })
}

fn jobs_from_rows(rows: &[Row]) -> Result<Vec<JobRecord>, StoreError> {
    rows.iter().map(job_from_row).collect()
}

async fn get_job(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
) -> Result<Option<JobRecord>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1");
    client
        .query_opt(&sql, &[&id])
        .await?
        .as_ref()
        .map(job_from_row)
        .transpose()
}

async fn insert_decision(
    client: &impl deadpool_postgres::GenericClient,
    d: &NewDecision,
    plugins: &str,
    at_ms: i64,
) -> Result<(), StoreError> {
    let request = d.request.as_ref().map(serde_json::Value::to_string);
    client
        .execute(
            "INSERT INTO decisions (job_id, kind, code, message, field, plugins, \
             chain_version, at_ms, team, request) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &d.job_id,
                &d.kind,
                &d.code,
                &d.message,
                &d.field,
                &plugins,
                &d.chain_version,
                &at_ms,
                &d.team,
                &request,
            ],
        )
        .await?;
    Ok(())
}

/// Refuses the transaction unless `fence`'s lease is still at its epoch. The row is
/// read `FOR KEY SHARE`: a takeover (which locks it `FOR UPDATE`) waits until this
/// transaction ends, a renewal does not (`coord.rs`).
pub(super) async fn check_fence(
    tx: &deadpool_postgres::Transaction<'_>,
    fence: &Fence,
) -> Result<(), StoreError> {
    let current = tx
        .query_opt(
            "SELECT epoch FROM leases WHERE name = $1 FOR KEY SHARE",
            &[&fence.lease],
        )
        .await?
        .map_or(0, |r| to_u64(r.get(0)));
    fence_holds(fence, current)
}

#[async_trait]
impl JobStore for PgDatabase {
    async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError> {
        let spec_json = json_text(&job.spec)?;
        let decision = decision
            .map(|d| json_text(&d.plugins).map(|plugins| (d, plugins)))
            .transpose()?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        let now = now_ms();
        let sql = format!(
            "INSERT INTO jobs (id, team, name, spec, state, reason, capsule_sha256, \
             queue_series, created_at_ms, updated_at_ms, trace_parent) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10) ON CONFLICT (id) DO NOTHING \
             RETURNING {JOB_COLUMNS}"
        );
        let row = tx
            .query_opt(
                &sql,
                &[
                    &job.id,
                    &job.team,
                    &job.spec.name,
                    &spec_json,
                    &job.state.as_str(),
                    &job.reason,
                    &job.capsule_sha256.as_ref().map(Digest::as_str),
                    &job.queue_series,
                    &now,
                    &job.trace_parent,
                ],
            )
            .await?;
        let Some(row) = row else {
            return Err(StoreError::Duplicate(job.id));
        };
        let record = job_from_row(&row)?;
        if let Some((d, plugins)) = decision {
            insert_decision(&tx, &d, &plugins, now).await?;
        }
        if record.state == JobState::Queued {
            tx.execute("SELECT pg_notify($1, '')", &[&QUEUE_CHANNEL])
                .await?;
        }
        // The feed's lock is held from here to the commit: the history row goes last.
        tx.execute(LOCK_FEED, &[]).await?;
        tx.execute("SELECT pg_notify($1, '')", &[&JOBS_CHANNEL])
            .await?;
        tx.execute(
            "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
             VALUES ($1, NULL, $2, $3, $4)",
            &[&job.id, &job.state.as_str(), &job.reason, &now],
        )
        .await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        get_job(&self.client().await?, id).await
    }

    async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError> {
        let (placement, decision_plugins) = transition_columns(&t)?;
        let terms = t.terms.as_ref().map(json_text).transpose()?;
        let step = i32::try_from(attempt_step(&t)).unwrap_or(0);
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if let Some(fence) = &t.fence {
            check_fence(&tx, fence).await?;
        }
        let now = now_ms();
        let sql = format!(
            "UPDATE jobs SET state = $1, reason = $2, updated_at_ms = $3, \
             rayjob_name = COALESCE($4, rayjob_name), placement = COALESCE($7, placement), \
             terms = COALESCE($8, terms), attempt = attempt + $9, \
             fleet = COALESCE($10, fleet) \
             WHERE id = $5 AND state = $6 RETURNING {JOB_COLUMNS}"
        );
        let row = tx
            .query_opt(
                &sql,
                &[
                    &t.to.as_str(),
                    &t.reason,
                    &now,
                    &t.rayjob_name,
                    &t.id,
                    &t.from.as_str(),
                    &placement,
                    &terms,
                    &step,
                    &t.fleet,
                ],
            )
            .await?;
        let Some(row) = row else {
            return match get_job(&tx, &t.id).await? {
                None => Err(StoreError::NotFound(t.id)),
                Some(job) => Err(StoreError::Conflict {
                    id: t.id,
                    expected: t.from,
                    actual: job.state,
                }),
            };
        };
        let record = job_from_row(&row)?;
        if t.to == JobState::Queued {
            tx.execute("SELECT pg_notify($1, '')", &[&QUEUE_CHANNEL])
                .await?;
        }
        if let (Some(d), Some(plugins)) = (&t.decision, &decision_plugins) {
            insert_decision(&tx, d, plugins, now).await?;
        }
        let from_notice = t.from == JobState::Preempting;
        if let Some(p) = PreemptionWrite::implied(from_notice, t.preemption.as_ref(), now) {
            super::preemptions::write(&tx, &record, attempt_step(&t), &p).await?;
        }
        // The feed's lock is held from here to the commit: the history row goes last.
        tx.execute(LOCK_FEED, &[]).await?;
        tx.execute("SELECT pg_notify($1, '')", &[&JOBS_CHANNEL])
            .await?;
        tx.execute(
            "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
             VALUES ($1, $2, $3, $4, $5)",
            &[&t.id, &t.from.as_str(), &t.to.as_str(), &t.reason, &now],
        )
        .await?;
        tx.commit().await?;
        Ok(record)
    }

    async fn list(&self, q: ListQuery) -> Result<Page, StoreError> {
        let (limit, after) = page_bounds(&q)?;
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE seq < $1 \
             AND ($2::TEXT IS NULL OR team = $2) AND ($3::TEXT IS NULL OR state = $3) \
             ORDER BY seq DESC LIMIT $4"
        );
        let state = q.state.map(JobState::as_str);
        let fetch = i64::from(limit) + 1;
        let args: [&(dyn ToSql + Sync); 4] = [&after, &q.team, &state, &fetch];
        let rows = self.client().await?.query(&sql, &args).await?;
        Ok(page_of(jobs_from_rows(&rows)?, limit))
    }

    async fn queued(&self, series: Option<String>) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'queued' \
             AND ($1::TEXT IS NULL OR queue_series = $1) ORDER BY seq ASC"
        );
        let rows = self.client().await?.query(&sql, &[&series]).await?;
        jobs_from_rows(&rows)
    }

    async fn queued_count(&self, team: &str) -> Result<u64, StoreError> {
        let row = self
            .client()
            .await?
            .query_one(
                "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND team = $1",
                &[&team],
            )
            .await?;
        let n: i64 = row.try_get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn active(&self) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs \
             WHERE state IN ('dispatched', 'initializing', 'running', 'preempting') ORDER BY seq ASC"
        );
        let rows = self.client().await?.query(&sql, &[]).await?;
        jobs_from_rows(&rows)
    }

    /// The job feed's head: every insert and transition writes a history row, under
    /// the feed's lock, so ids grow in commit order across replicas (and preemption
    /// records are written with their transitions). A checkpoint writes none: the
    /// preemption planner reads its candidates afresh.
    async fn change_version(&self) -> Result<Option<u64>, StoreError> {
        let client = self.client().await?;
        let head = super::job_feed::head(&client).await?;
        Ok(Some(head.cast_unsigned()))
    }

    async fn unfinished(&self) -> Result<Vec<(String, JobState)>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT id, state FROM jobs \
                 WHERE state IN ('queued', 'dispatched', 'initializing', 'running', 'preempting') ORDER BY seq ASC",
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| {
                let id: String = r.try_get(0)?;
                let state: String = r.try_get(1)?;
                Ok((id, parse_state(&state)?))
            })
            .collect()
    }

    async fn get_many(&self, ids: Vec<String>) -> Result<Vec<JobRecord>, StoreError> {
        let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY($1)");
        let rows = self.client().await?.query(&sql, &[&ids]).await?;
        jobs_from_rows(&rows)
    }

    async fn record_checkpoint(
        &self,
        job_id: &str,
        step: u64,
        at_ms: i64,
    ) -> Result<CheckpointOutcome, StoreError> {
        let stored = checkpoints::to_column(step)?;
        let client = self.client().await?;
        let sql = format!(
            "UPDATE jobs SET checkpoint_step = $1, checkpoint_at_ms = $2 \
             WHERE id = $3 AND state IN ({ACKNOWLEDGING_STATES}) \
             AND (checkpoint_step IS NULL OR checkpoint_step < $1)"
        );
        if client.execute(&sql, &[&stored, &at_ms, &job_id]).await? == 1 {
            return Ok(CheckpointOutcome::Recorded(Checkpoint { step, at_ms }));
        }
        let row = client
            .query_opt(
                "SELECT state, checkpoint_step, checkpoint_at_ms FROM jobs WHERE id = $1",
                &[&job_id],
            )
            .await?;
        let row = match row {
            Some(r) => Some((
                parse_state(r.try_get(0)?)?,
                checkpoints::from_columns(r.try_get(1)?, r.try_get(2)?),
            )),
            None => None,
        };
        Ok(checkpoints::classify(step, row))
    }

    async fn preemptions(&self, job_id: &str) -> Result<Vec<PreemptionRecord>, StoreError> {
        super::preemptions::of_job(&self.client().await?, job_id).await
    }

    async fn preemptions_since(&self, since_ms: i64) -> Result<Vec<PreemptionRecord>, StoreError> {
        super::preemptions::since(&self.client().await?, since_ms).await
    }

    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if let Some(fence) = &fence {
            check_fence(&tx, fence).await?;
        }
        super::usage::accrue(&tx, &a).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError> {
        super::usage::all(&self.client().await?).await
    }

    async fn record_pass(
        &self,
        p: PassRecord,
        keep_since_ms: i64,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        if let Some(fence) = &fence {
            check_fence(&tx, fence).await?;
        }
        super::dispatch_journal::append(&tx, &p, keep_since_ms).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn passes(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<PassRecord>, StoreError> {
        super::dispatch_journal::between(&self.client().await?, from_ms, to_ms, limit).await
    }

    async fn record_decision(&self, d: NewDecision) -> Result<(), StoreError> {
        let plugins = json_text(&d.plugins)?;
        insert_decision(&self.client().await?, &d, &plugins, now_ms()).await
    }

    async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT job_id, kind, code, message, field, plugins, chain_version, at_ms, \
                 team FROM decisions WHERE job_id = $1 ORDER BY id ASC",
                &[&job_id],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(DecisionRecord {
                    decision: NewDecision {
                        job_id: r.try_get(0)?,
                        team: r.try_get::<_, Option<String>>(8)?.unwrap_or_default(),
                        kind: r.try_get(1)?,
                        code: r.try_get(2)?,
                        message: r.try_get(3)?,
                        field: r.try_get(4)?,
                        plugins: from_json(r.try_get(5)?, "plugins")?,
                        chain_version: r.try_get(6)?,
                        request: None,
                    },
                    at_ms: r.try_get(7)?,
                })
            })
            .collect()
    }

    fn queue_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.feeds.queue.clone())
    }

    async fn changes_since(&self, after: i64, limit: u32) -> Result<Vec<StoredChange>, StoreError> {
        let client = self.client().await?;
        super::job_feed::since(&client, after, limit).await
    }

    async fn changes_head(&self) -> Result<i64, StoreError> {
        let client = self.client().await?;
        super::job_feed::head(&client).await
    }

    fn state_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.feeds.jobs.clone())
    }

    async fn lives_since(&self, since_ms: i64, limit: u32) -> Result<Vec<JobLife>, StoreError> {
        let chosen = "SELECT id FROM jobs WHERE id IN \
             (SELECT job_id FROM job_history WHERE at_ms >= $1 AND \
                 (to_state IN ('dispatched', 'initializing', 'running', 'preempting') \
                 OR from_state IN ('dispatched', 'initializing', 'running', 'preempting'))) \
             OR state IN ('dispatched', 'initializing', 'running', 'preempting') \
             ORDER BY seq DESC LIMIT $2";
        let limit = i64::from(limit);
        let mut client = self.client().await?;
        // One snapshot for both reads.
        let tx = client
            .build_transaction()
            .read_only(true)
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await?;
        let jobs = tx
            .query(
                &format!(
                    "SELECT id, queue_series, spec, created_at_ms FROM jobs \
                     WHERE id IN ({chosen}) ORDER BY seq DESC"
                ),
                &[&since_ms, &limit],
            )
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?)))
            .collect::<Result<Vec<_>, StoreError>>()?;
        let rows = tx
            .query(
                &format!(
                    "SELECT job_id, from_state, to_state, reason, at_ms FROM job_history \
                     WHERE job_id IN ({chosen}) ORDER BY id ASC"
                ),
                &[&since_ms, &limit],
            )
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    r.try_get(2)?,
                    r.try_get(3)?,
                    r.try_get(4)?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        tx.commit().await?;
        assemble_lives(jobs, rows)
    }

    async fn histories(
        &self,
        ids: Vec<String>,
    ) -> Result<BTreeMap<String, Vec<HistoryEntry>>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT job_id, from_state, to_state, reason, at_ms FROM job_history \
                 WHERE job_id = ANY($1) ORDER BY id ASC",
                &[&ids],
            )
            .await?;
        let mut out: BTreeMap<String, Vec<HistoryEntry>> = BTreeMap::new();
        for r in &rows {
            let entry = history_entry(r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?)?;
            out.entry(r.try_get(0)?).or_default().push(entry);
        }
        Ok(out)
    }

    async fn history(&self, job_id: &str) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut one = self.histories(vec![job_id.to_string()]).await?;
        Ok(one.remove(job_id).unwrap_or_default())
    }
}
