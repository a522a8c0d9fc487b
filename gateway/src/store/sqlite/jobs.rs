//! [`JobStore`] on SQLite: jobs, their history and decisions; the queue is the jobs
//! table in `seq` order. Transitions are compare-and-set `UPDATE … WHERE state = ?`;
//! a fenced one first reads its lease's epoch in the same `IMMEDIATE` transaction (the
//! group-commit batch's, see `group_commit.rs`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteDatabase;
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

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Result<JobRecord, StoreError>> {
    let spec_json: String = row.get(4)?;
    let state: String = row.get(5)?;
    let digest: Option<String> = row.get(7)?;
    let placement: Option<String> = row.get(12)?;
    let terms: Option<String> = row.get(17)?;
    let build = || -> Result<JobRecord, StoreError> {
        Ok(JobRecord {
            seq: row.get(0)?,
            id: row.get(1)?,
            team: row.get(2)?,
            name: row.get(3)?,
            spec: from_json(&spec_json, "spec")?,
            state: parse_state(&state)?,
            reason: row.get(6)?,
            capsule_sha256: parse_digest(digest)?,
            rayjob_name: row.get(8)?,
            queue_series: row.get(9)?,
            placement: parse_placement(placement)?,
            created_at_ms: row.get(10)?,
            updated_at_ms: row.get(11)?,
            trace_parent: row.get(13)?,
            last_checkpoint: checkpoints::from_columns(row.get(14)?, row.get(15)?),
            attempt: u32::try_from(row.get::<_, i64>(16)?).unwrap_or(0),
            terms: parse_terms(terms)?,
            fleet: row.get(18)?,
        })
    };
    Ok(build())
}

/// Refuses the transaction unless `fence`'s lease is still at its epoch (read in the
/// caller's `IMMEDIATE` transaction, so no acquisition can commit in between).
pub(super) fn check_fence(conn: &Connection, fence: &Fence) -> Result<(), StoreError> {
    let current: Option<i64> = conn
        .prepare_cached("SELECT epoch FROM leases WHERE name = ?1")?
        .query_row([&fence.lease], |r| r.get(0))
        .optional()?;
    fence_holds(fence, current.map_or(0, to_u64))
}

/// Ids per query of [`JobStore::get_many`] (under SQLite's bound on parameters).
const GET_MANY_CHUNK: usize = 500;

fn get_job(conn: &Connection, id: &str) -> Result<Option<JobRecord>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    conn.prepare_cached(&sql)?
        .query_row([id], job_from_row)
        .optional()?
        .transpose()
}

fn query_jobs(
    conn: &Connection,
    sql: &str,
    args: &[&dyn rusqlite::ToSql],
) -> Result<Vec<JobRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(args, job_from_row)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

/// A decision's JSON columns, made before its write is queued: the writer thread, which
/// every write of the store waits for, only binds them.
struct DecisionText {
    plugins: String,
    request: Option<String>,
}

impl DecisionText {
    fn of(d: &NewDecision) -> Result<Self, StoreError> {
        Ok(Self {
            plugins: json_text(&d.plugins)?,
            request: d.request.as_ref().map(serde_json::Value::to_string),
        })
    }
}

fn insert_decision(
    conn: &Connection,
    d: &NewDecision,
    text: &DecisionText,
    at_ms: i64,
) -> Result<(), StoreError> {
    let (plugins, request) = (&text.plugins, &text.request);
    conn.prepare_cached(
        "INSERT INTO decisions (job_id, kind, code, message, field, plugins, \
         chain_version, at_ms, team, request) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        d.job_id,
        d.kind,
        d.code,
        d.message,
        d.field,
        plugins,
        d.chain_version,
        at_ms,
        d.team,
        request
    ])?;
    Ok(())
}

#[async_trait]
impl JobStore for SqliteDatabase {
    async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError> {
        let spec_json = json_text(&job.spec)?;
        let decision = decision
            .map(|d| DecisionText::of(&d).map(|text| (d, text)))
            .transpose()?;
        self.write(move |tx| {
            let now = now_ms();
            // The stored row comes back from the insert itself (no second lookup).
            let sql = format!(
                "INSERT INTO jobs (id, team, name, spec, state, reason, capsule_sha256, \
                 queue_series, created_at_ms, updated_at_ms, trace_parent) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10) ON CONFLICT (id) DO NOTHING \
                 RETURNING {JOB_COLUMNS}"
            );
            let inserted = tx
                .prepare_cached(&sql)?
                .query_row(
                    params![
                        job.id,
                        job.team,
                        job.spec.name,
                        spec_json,
                        job.state.as_str(),
                        job.reason,
                        job.capsule_sha256.as_ref().map(Digest::as_str),
                        job.queue_series,
                        now,
                        job.trace_parent
                    ],
                    job_from_row,
                )
                .optional()?
                .transpose()?;
            let Some(record) = inserted else {
                return Err(StoreError::Duplicate(job.id));
            };
            tx.prepare_cached(
                "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
                 VALUES (?1, NULL, ?2, ?3, ?4)",
            )?
            .execute(params![job.id, job.state.as_str(), job.reason, now])?;
            if let Some((d, text)) = decision {
                insert_decision(tx, &d, &text, now)?;
            }
            Ok(record)
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        let id = id.to_string();
        self.read(move |conn| get_job(conn, &id)).await
    }

    async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError> {
        let (placement, decision_plugins) = transition_columns(&t)?;
        let terms = t.terms.as_ref().map(json_text).transpose()?;
        let decision_text = decision_plugins.map(|plugins| DecisionText {
            plugins,
            request: t
                .decision
                .as_ref()
                .and_then(|d| d.request.as_ref())
                .map(serde_json::Value::to_string),
        });
        // In the batch's IMMEDIATE transaction: the fence is read under the write lock.
        self.write(move |tx| {
            let now = now_ms();
            if let Some(fence) = &t.fence {
                check_fence(tx, fence)?;
            }
            // The updated row comes back from the update itself (no second lookup).
            let sql = format!(
                "UPDATE jobs SET state = ?1, reason = ?2, updated_at_ms = ?3, \
                 rayjob_name = COALESCE(?4, rayjob_name), placement = COALESCE(?7, placement), \
                 terms = COALESCE(?8, terms), attempt = attempt + ?9, \
                 fleet = COALESCE(?10, fleet) \
                 WHERE id = ?5 AND state = ?6 RETURNING {JOB_COLUMNS}"
            );
            let changed = tx
                .prepare_cached(&sql)?
                .query_row(
                    params![
                        t.to.as_str(),
                        t.reason,
                        now,
                        t.rayjob_name,
                        t.id,
                        t.from.as_str(),
                        placement,
                        terms,
                        attempt_step(&t),
                        t.fleet
                    ],
                    job_from_row,
                )
                .optional()?
                .transpose()?;
            let Some(record) = changed else {
                return match get_job(tx, &t.id)? {
                    None => Err(StoreError::NotFound(t.id)),
                    Some(job) => Err(StoreError::Conflict {
                        id: t.id,
                        expected: t.from,
                        actual: job.state,
                    }),
                };
            };
            tx.prepare_cached(
                "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![t.id, t.from.as_str(), t.to.as_str(), t.reason, now])?;
            if let (Some(d), Some(text)) = (&t.decision, &decision_text) {
                insert_decision(tx, d, text, now)?;
            }
            let from_notice = t.from == JobState::Preempting;
            if let Some(p) = PreemptionWrite::implied(from_notice, t.preemption.as_ref(), now) {
                super::preemptions::write(tx, &record, attempt_step(&t), &p)?;
            }
            Ok(record)
        })
        .await
    }

    async fn list(&self, q: ListQuery) -> Result<Page, StoreError> {
        let (limit, after) = page_bounds(&q)?;
        self.read(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE seq < ?1 \
                 AND (?2 IS NULL OR team = ?2) AND (?3 IS NULL OR state = ?3) \
                 ORDER BY seq DESC LIMIT ?4"
            );
            let state = q.state.map(JobState::as_str);
            let fetch = i64::from(limit) + 1;
            let jobs = query_jobs(conn, &sql, &[&after, &q.team, &state, &fetch])?;
            Ok(page_of(jobs, limit))
        })
        .await
    }

    async fn queued(&self, series: Option<String>) -> Result<Vec<JobRecord>, StoreError> {
        self.read(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'queued' \
                 AND (?1 IS NULL OR queue_series = ?1) ORDER BY seq ASC"
            );
            query_jobs(conn, &sql, &[&series])
        })
        .await
    }

    async fn queued_count(&self, team: &str) -> Result<u64, StoreError> {
        let team = team.to_owned();
        self.read(move |conn| {
            let n: i64 = conn.query_row(
                "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND team = ?1",
                [&team],
                |r| r.get(0),
            )?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn active(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.read(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs \
                 WHERE state IN ('dispatched', 'initializing', 'running', 'preempting') ORDER BY seq ASC"
            );
            query_jobs(conn, &sql, &[])
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<(String, JobState)>, StoreError> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, state FROM jobs \
                 WHERE state IN ('queued', 'dispatched', 'initializing', 'running', 'preempting') ORDER BY seq ASC",
            )?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                let state = parse_state(r.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?)?;
                out.push((r.get::<_, String>(0)?, state));
            }
            Ok(out)
        })
        .await
    }

    async fn change_version(&self) -> Result<Option<u64>, StoreError> {
        self.job_writes().await.map(Some)
    }

    async fn get_many(&self, ids: Vec<String>) -> Result<Vec<JobRecord>, StoreError> {
        self.read(move |conn| {
            let mut out = Vec::with_capacity(ids.len());
            for chunk in ids.chunks(GET_MANY_CHUNK) {
                let marks = vec!["?"; chunk.len()].join(", ");
                let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({marks})");
                let args: Vec<&dyn rusqlite::ToSql> =
                    chunk.iter().map(|id| id as &dyn rusqlite::ToSql).collect();
                out.extend(query_jobs(conn, &sql, &args)?);
            }
            Ok(out)
        })
        .await
    }

    async fn record_checkpoint(
        &self,
        job_id: &str,
        step: u64,
        at_ms: i64,
    ) -> Result<CheckpointOutcome, StoreError> {
        let job_id = job_id.to_string();
        let stored = checkpoints::to_column(step)?;
        self.write(move |conn| {
            let sql = format!(
                "UPDATE jobs SET checkpoint_step = ?1, checkpoint_at_ms = ?2 \
                 WHERE id = ?3 AND state IN ({ACKNOWLEDGING_STATES}) \
                 AND (checkpoint_step IS NULL OR checkpoint_step < ?1)"
            );
            if conn.execute(&sql, rusqlite::params![stored, at_ms, job_id])? == 1 {
                return Ok(CheckpointOutcome::Recorded(Checkpoint { step, at_ms }));
            }
            let row = conn
                .query_row(
                    "SELECT state, checkpoint_step, checkpoint_at_ms FROM jobs WHERE id = ?1",
                    [&job_id],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            checkpoints::from_columns(r.get(1)?, r.get(2)?),
                        ))
                    },
                )
                .optional()?;
            let row = match row {
                Some((state, last)) => Some((parse_state(&state)?, last)),
                None => None,
            };
            Ok(checkpoints::classify(step, row))
        })
        .await
    }

    async fn preemptions(&self, job_id: &str) -> Result<Vec<PreemptionRecord>, StoreError> {
        let id = job_id.to_string();
        self.read(move |conn| super::preemptions::of_job(conn, &id))
            .await
    }

    async fn preemptions_since(&self, since_ms: i64) -> Result<Vec<PreemptionRecord>, StoreError> {
        self.read(move |conn| super::preemptions::since(conn, since_ms))
            .await
    }

    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError> {
        self.write(move |conn| {
            if let Some(fence) = &fence {
                check_fence(conn, fence)?;
            }
            super::usage::accrue(conn, &a)
        })
        .await
    }

    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError> {
        self.read(super::usage::all).await
    }

    async fn record_pass(
        &self,
        p: PassRecord,
        keep_since_ms: i64,
        fence: Option<Fence>,
    ) -> Result<(), StoreError> {
        self.write(move |conn| {
            if let Some(fence) = &fence {
                check_fence(conn, fence)?;
            }
            super::dispatch_journal::append(conn, &p, keep_since_ms)
        })
        .await
    }

    async fn passes(
        &self,
        from_ms: i64,
        to_ms: i64,
        limit: u32,
    ) -> Result<Vec<PassRecord>, StoreError> {
        self.read(move |conn| super::dispatch_journal::between(conn, from_ms, to_ms, limit))
            .await
    }

    async fn changes_since(&self, after: i64, limit: u32) -> Result<Vec<StoredChange>, StoreError> {
        self.read(move |conn| super::job_feed::since(conn, after, limit))
            .await
    }

    async fn changes_head(&self) -> Result<i64, StoreError> {
        self.read(super::job_feed::head).await
    }

    async fn record_decision(&self, d: NewDecision) -> Result<(), StoreError> {
        let text = DecisionText::of(&d)?;
        self.write(move |conn| {
            insert_decision(conn, &d, &text, now_ms())?;
            Ok(())
        })
        .await
    }

    async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, StoreError> {
        let job_id = job_id.to_string();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT job_id, kind, code, message, field, plugins, chain_version, at_ms, \
                 team FROM decisions WHERE job_id = ?1 ORDER BY id ASC",
            )?;
            let rows = stmt.query_map([&job_id], |r| {
                Ok((
                    NewDecision {
                        job_id: r.get(0)?,
                        team: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
                        kind: r.get(1)?,
                        code: r.get(2)?,
                        message: r.get(3)?,
                        field: r.get(4)?,
                        plugins: serde_json::Value::Null,
                        chain_version: r.get(6)?,
                        request: None,
                    },
                    r.get::<_, String>(5)?,
                    r.get::<_, i64>(7)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (mut decision, plugins, at_ms) = row?;
                decision.plugins = from_json(&plugins, "plugins")?;
                out.push(DecisionRecord { decision, at_ms });
            }
            Ok(out)
        })
        .await
    }

    async fn lives_since(&self, since_ms: i64, limit: u32) -> Result<Vec<JobLife>, StoreError> {
        self.read(move |conn| {
            let chosen = "SELECT id FROM jobs WHERE id IN \
                 (SELECT job_id FROM job_history WHERE at_ms >= ?1 AND \
                 (to_state IN ('dispatched', 'initializing', 'running', 'preempting') \
                 OR from_state IN ('dispatched', 'initializing', 'running', 'preempting'))) \
                 OR state IN ('dispatched', 'initializing', 'running', 'preempting') \
                 ORDER BY seq DESC LIMIT ?2";
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT id, queue_series, spec, created_at_ms FROM jobs \
                 WHERE id IN ({chosen}) ORDER BY seq DESC"
            ))?;
            let jobs = stmt
                .query_map(params![since_ms, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT job_id, from_state, to_state, reason, at_ms FROM job_history \
                 WHERE job_id IN ({chosen}) ORDER BY id ASC"
            ))?;
            let rows = stmt
                .query_map(params![since_ms, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?
                .collect::<Result<Vec<_>, _>>()?;
            assemble_lives(jobs, rows)
        })
        .await
    }

    async fn histories(
        &self,
        ids: Vec<String>,
    ) -> Result<BTreeMap<String, Vec<HistoryEntry>>, StoreError> {
        self.read(move |conn| {
            let mut out: BTreeMap<String, Vec<HistoryEntry>> = BTreeMap::new();
            for chunk in ids.chunks(GET_MANY_CHUNK) {
                let marks = vec!["?"; chunk.len()].join(", ");
                let sql = format!(
                    "SELECT job_id, from_state, to_state, reason, at_ms FROM job_history \
                     WHERE job_id IN ({marks}) ORDER BY id ASC"
                );
                let args: Vec<&dyn rusqlite::ToSql> =
                    chunk.iter().map(|id| id as &dyn rusqlite::ToSql).collect();
                let mut stmt = conn.prepare_cached(&sql)?;
                let rows = stmt.query_map(args.as_slice(), |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, i64>(4)?,
                    ))
                })?;
                for row in rows {
                    let (id, from, to, reason, at_ms) = row?;
                    let entry = history_entry(from.as_deref(), &to, reason, at_ms)?;
                    out.entry(id).or_default().push(entry);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn history(&self, job_id: &str) -> Result<Vec<HistoryEntry>, StoreError> {
        let mut one = self.histories(vec![job_id.to_string()]).await?;
        Ok(one.remove(job_id).unwrap_or_default())
    }
}
