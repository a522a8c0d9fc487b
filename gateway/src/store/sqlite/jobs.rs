//! [`JobStore`] on SQLite: jobs, their history and decisions; the queue is the jobs
//! table in `seq` order. Transitions are compare-and-set `UPDATE … WHERE state = ?`.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteDatabase;
use forge_policy_host::model::Placement;

use crate::domain::{Digest, JobState, UnknownState};
use crate::store::{
    DecisionRecord, HistoryEntry, JobRecord, JobStore, ListQuery, MAX_PAGE, NewDecision, NewJob,
    Page, StoreError, Transition, now_ms,
};

const JOB_COLUMNS: &str = "seq, id, team, name, spec, state, reason, capsule_sha256, \
                           rayjob_name, queue_series, created_at_ms, updated_at_ms, placement";

fn parse_state(s: &str) -> Result<JobState, StoreError> {
    s.parse()
        .map_err(|e: UnknownState| StoreError::Corrupt(e.to_string()))
}

fn job_from_row(row: &Row<'_>) -> rusqlite::Result<Result<JobRecord, StoreError>> {
    let spec_json: String = row.get(4)?;
    let state: String = row.get(5)?;
    let placement_json: Option<String> = row.get(12)?;
    let build = || -> Result<JobRecord, StoreError> {
        Ok(JobRecord {
            seq: row.get(0)?,
            id: row.get(1)?,
            team: row.get(2)?,
            name: row.get(3)?,
            spec: serde_json::from_str(&spec_json)
                .map_err(|e| StoreError::Corrupt(format!("spec: {e}")))?,
            state: parse_state(&state)?,
            reason: row.get(6)?,
            capsule_sha256: row
                .get::<_, Option<String>>(7)?
                .map(|d| Digest::parse(&d))
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("capsule digest: {e}")))?,
            rayjob_name: row.get(8)?,
            queue_series: row.get(9)?,
            placement: placement_json
                .map(|p| placement_from_json(&p))
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("placement: {e}")))?,
            created_at_ms: row.get(10)?,
            updated_at_ms: row.get(11)?,
        })
    };
    Ok(build())
}

/// A stored placement. Rows written before the placement had one model (gateway 0.1)
/// stored each map as a list of `[key, value]` pairs; those are read as maps.
fn placement_from_json(text: &str) -> Result<Placement, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_str(text)?;
    if let Some(pools) = value.get_mut("pools").and_then(|p| p.as_array_mut()) {
        for pool in pools {
            for key in ["nodeSelector", "rayResources", "labels", "annotations"] {
                let Some(field) = pool.get_mut(key) else {
                    continue;
                };
                if let Some(pairs) = field.as_array() {
                    let map: serde_json::Map<String, serde_json::Value> = pairs
                        .iter()
                        .filter_map(|pair| {
                            let k = pair.get(0)?.as_str()?.to_string();
                            Some((k, pair.get(1)?.clone()))
                        })
                        .collect();
                    *field = serde_json::Value::Object(map);
                }
            }
        }
    }
    serde_json::from_value(value)
}

fn get_job(conn: &Connection, id: &str) -> Result<Option<JobRecord>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1");
    conn.query_row(&sql, [id], job_from_row)
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

fn insert_decision(
    conn: &Connection,
    d: &NewDecision,
    plugins: &str,
    at_ms: i64,
) -> Result<(), StoreError> {
    let request = d.request.as_ref().map(serde_json::Value::to_string);
    conn.execute(
        "INSERT INTO decisions (job_id, kind, code, message, field, plugins, \
         chain_version, at_ms, team, request) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
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
        ],
    )?;
    Ok(())
}

#[async_trait]
impl JobStore for SqliteDatabase {
    async fn insert(
        &self,
        job: NewJob,
        decision: Option<NewDecision>,
    ) -> Result<JobRecord, StoreError> {
        let spec_json =
            serde_json::to_string(&job.spec).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let decision = decision
            .map(|d| {
                serde_json::to_string(&d.plugins)
                    .map(|plugins| (d, plugins))
                    .map_err(|e| StoreError::Corrupt(e.to_string()))
            })
            .transpose()?;
        self.with(move |conn| {
            let now = now_ms();
            let tx = conn.transaction()?;
            let inserted = tx.execute(
                "INSERT INTO jobs (id, team, name, spec, state, reason, capsule_sha256, \
                 queue_series, created_at_ms, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9) ON CONFLICT (id) DO NOTHING",
                params![
                    job.id,
                    job.team,
                    job.spec.name,
                    spec_json,
                    job.state.as_str(),
                    job.reason,
                    job.capsule_sha256.as_ref().map(Digest::as_str),
                    job.queue_series,
                    now
                ],
            )?;
            if inserted == 0 {
                return Err(StoreError::Duplicate(job.id));
            }
            tx.execute(
                "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
                 VALUES (?1, NULL, ?2, ?3, ?4)",
                params![job.id, job.state.as_str(), job.reason, now],
            )?;
            if let Some((d, plugins)) = decision {
                insert_decision(&tx, &d, &plugins, now)?;
            }
            let record =
                get_job(&tx, &job.id)?.ok_or_else(|| StoreError::NotFound(job.id.clone()))?;
            tx.commit()?;
            Ok(record)
        })
        .await
    }

    async fn get(&self, id: &str) -> Result<Option<JobRecord>, StoreError> {
        let id = id.to_string();
        self.with(move |conn| get_job(conn, &id)).await
    }

    async fn transition(&self, t: Transition) -> Result<JobRecord, StoreError> {
        if !t.from.can_transition_to(t.to) {
            return Err(StoreError::IllegalTransition {
                from: t.from,
                to: t.to,
            });
        }
        let placement = t
            .placement
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let decision_plugins = t
            .decision
            .as_ref()
            .map(|d| serde_json::to_string(&d.plugins))
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.with(move |conn| {
            let now = now_ms();
            let tx = conn.transaction()?;
            let changed = tx.execute(
                "UPDATE jobs SET state = ?1, reason = ?2, updated_at_ms = ?3, \
                 rayjob_name = COALESCE(?4, rayjob_name), placement = COALESCE(?7, placement) \
                 WHERE id = ?5 AND state = ?6",
                params![
                    t.to.as_str(),
                    t.reason,
                    now,
                    t.rayjob_name,
                    t.id,
                    t.from.as_str(),
                    placement
                ],
            )?;
            if changed == 0 {
                return match get_job(&tx, &t.id)? {
                    None => Err(StoreError::NotFound(t.id)),
                    Some(job) => Err(StoreError::Conflict {
                        id: t.id,
                        expected: t.from,
                        actual: job.state,
                    }),
                };
            }
            tx.execute(
                "INSERT INTO job_history (job_id, from_state, to_state, reason, at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![t.id, t.from.as_str(), t.to.as_str(), t.reason, now],
            )?;
            if let (Some(d), Some(plugins)) = (&t.decision, &decision_plugins) {
                insert_decision(&tx, d, plugins, now)?;
            }
            let record = get_job(&tx, &t.id)?.ok_or_else(|| StoreError::NotFound(t.id.clone()))?;
            tx.commit()?;
            Ok(record)
        })
        .await
    }

    async fn list(&self, q: ListQuery) -> Result<Page, StoreError> {
        let limit = match q.limit {
            0 => 50,
            n => n.min(MAX_PAGE),
        };
        let after: i64 = match &q.after {
            None => i64::MAX,
            Some(c) => c
                .parse::<i64>()
                .ok()
                .filter(|v| *v > 0)
                .ok_or(StoreError::BadCursor)?,
        };
        self.with(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE seq < ?1 \
                 AND (?2 IS NULL OR team = ?2) AND (?3 IS NULL OR state = ?3) \
                 ORDER BY seq DESC LIMIT ?4"
            );
            let state = q.state.map(JobState::as_str);
            let fetch = i64::from(limit) + 1;
            let mut jobs = query_jobs(conn, &sql, &[&after, &q.team, &state, &fetch])?;
            let next = if jobs.len() > limit as usize {
                jobs.truncate(limit as usize);
                jobs.last().map(|j| j.seq.to_string())
            } else {
                None
            };
            Ok(Page { jobs, next })
        })
        .await
    }

    async fn queued(&self, series: Option<String>) -> Result<Vec<JobRecord>, StoreError> {
        self.with(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs WHERE state = 'queued' \
                 AND (?1 IS NULL OR queue_series = ?1) ORDER BY seq ASC"
            );
            query_jobs(conn, &sql, &[&series])
        })
        .await
    }

    async fn active(&self) -> Result<Vec<JobRecord>, StoreError> {
        self.with(move |conn| {
            let sql = format!(
                "SELECT {JOB_COLUMNS} FROM jobs \
                 WHERE state IN ('dispatched', 'initializing', 'running') ORDER BY seq ASC"
            );
            query_jobs(conn, &sql, &[])
        })
        .await
    }

    async fn record_decision(&self, d: NewDecision) -> Result<(), StoreError> {
        let plugins =
            serde_json::to_string(&d.plugins).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.with(move |conn| {
            insert_decision(conn, &d, &plugins, now_ms())?;
            Ok(())
        })
        .await
    }

    async fn decisions(&self, job_id: &str) -> Result<Vec<DecisionRecord>, StoreError> {
        let job_id = job_id.to_string();
        self.with(move |conn| {
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
                decision.plugins = serde_json::from_str(&plugins)
                    .map_err(|e| StoreError::Corrupt(format!("plugins: {e}")))?;
                out.push(DecisionRecord { decision, at_ms });
            }
            Ok(out)
        })
        .await
    }

    async fn history(&self, job_id: &str) -> Result<Vec<HistoryEntry>, StoreError> {
        let job_id = job_id.to_string();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT from_state, to_state, reason, at_ms FROM job_history \
                 WHERE job_id = ?1 ORDER BY id ASC",
            )?;
            let rows = stmt.query_map([&job_id], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (from, to, reason, at_ms) = row?;
                out.push(HistoryEntry {
                    from: from.as_deref().map(parse_state).transpose()?,
                    to: parse_state(&to)?,
                    reason,
                    at_ms,
                });
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::jobspec::{Deadlines, JobSpec, PoolSpec};
    use crate::store::new_job_id;

    fn spec(name: &str) -> JobSpec {
        JobSpec {
            name: name.into(),
            framework: "nemo-rl".into(),
            entrypoint: "python train.py".into(),
            pools: vec![PoolSpec {
                name: "main".into(),
                nodes: 1,
                gpus_per_node: 8,
                series: Some("h200".into()),
                ..PoolSpec::default()
            }],
            env: BTreeMap::new(),
            shared_storage: false,
            corpus: false,
            deadlines: Deadlines::default(),
            priority: 0,
            labels: BTreeMap::new(),
            pip: Vec::new(),
        }
    }

    fn new_job(team: &str, name: &str, series: &str) -> NewJob {
        NewJob {
            id: new_job_id(),
            team: team.into(),
            spec: spec(name),
            state: JobState::Queued,
            reason: Some("quota.exceeded".into()),
            capsule_sha256: Some(Digest::parse(&"ab".repeat(32)).expect("digest")),
            queue_series: Some(series.into()),
        }
    }

    fn placement() -> Placement {
        Placement {
            pools: vec![forge_policy_host::model::PoolPlacement {
                pool: "train".into(),
                series: Some("h200".into()),
                node_selector: [("gpu".to_string(), "h200".to_string())].into(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn reads_placements_stored_as_pairs() {
        let legacy = r#"{"pools":[{"pool":"train","series":"h200","nodeSelector":[["gpu","h200"]],"rayResources":[["forge-pool-train",8.0]],"labels":[],"annotations":[]}]}"#;
        let p = placement_from_json(legacy).expect("legacy placement");
        assert_eq!(
            p.pools[0].node_selector.get("gpu").map(String::as_str),
            Some("h200")
        );
        assert_eq!(p.pools[0].ray_resources.get("forge-pool-train"), Some(&8.0));
        let current = serde_json::to_string(&placement()).expect("json");
        assert_eq!(placement_from_json(&current).expect("current"), placement());
    }

    fn t(id: &str, from: JobState, to: JobState) -> Transition {
        Transition {
            decision: None,
            id: id.into(),
            from,
            to,
            reason: None,
            rayjob_name: None,
            placement: None,
        }
    }

    #[tokio::test]
    async fn restart_keeps_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data").join("forge.sqlite3");
        let id;
        {
            let store = SqliteDatabase::open(&path).expect("open");
            assert_eq!(
                store.schema_version().expect("version"),
                crate::store::sqlite::migrations::MIGRATIONS.len()
            );
            let job = store
                .insert(new_job("team-a", "one", "h200"), None)
                .await
                .expect("insert");
            id = job.id.clone();
            let mut tr = t(&id, JobState::Queued, JobState::Dispatched);
            tr.rayjob_name = Some(format!("forge-{id}"));
            tr.reason = Some("admitted".into());
            tr.placement = Some(placement());
            store.transition(tr).await.expect("dispatch");
            store
                .record_decision(NewDecision {
                    job_id: id.clone(),
                    team: "team-a".into(),
                    kind: "admit".into(),
                    code: None,
                    message: None,
                    field: None,
                    plugins: json!([{"name": "team-quota", "digest": "sha256:00"}]),
                    chain_version: "v1".into(),
                    request: Some(json!({"job": {"id": "x"}})),
                })
                .await
                .expect("decision");
        }
        let store = SqliteDatabase::open(&path).expect("reopen");
        let job = store.get(&id).await.expect("get").expect("present");
        assert_eq!(job.state, JobState::Dispatched);
        assert_eq!(
            job.rayjob_name.as_deref(),
            Some(format!("forge-{id}").as_str())
        );
        assert_eq!(job.spec, spec("one"));
        assert_eq!(job.team, "team-a");
        let history = store.history(&id).await.expect("history");
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].from, None);
        assert_eq!(history[0].to, JobState::Queued);
        assert_eq!(history[1].from, Some(JobState::Queued));
        assert_eq!(history[1].reason.as_deref(), Some("admitted"));
        let decisions = store.decisions(&id).await.expect("decisions");
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].decision.plugins[0]["name"], "team-quota");
        assert_eq!(store.active().await.expect("active").len(), 1);
        assert_eq!(
            store.schema_version().expect("version"),
            crate::store::sqlite::migrations::MIGRATIONS.len()
        );
        assert_eq!(job.placement, Some(placement()));
    }

    #[tokio::test]
    async fn compare_and_set_conflicts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteDatabase::open(dir.path().join("s.db")).expect("open");
        let job = store
            .insert(new_job("a", "x", "h200"), None)
            .await
            .expect("insert");

        // Two racers both believe the job is queued; exactly one wins.
        let (r1, r2) = tokio::join!(
            store.transition(t(&job.id, JobState::Queued, JobState::Dispatched)),
            store.transition(t(&job.id, JobState::Queued, JobState::Cancelled)),
        );
        let (ok, err) = match (r1, r2) {
            (Ok(j), Err(e)) | (Err(e), Ok(j)) => (j, e),
            other => panic!("expected one winner: {other:?}"),
        };
        match err {
            StoreError::Conflict {
                expected, actual, ..
            } => {
                assert_eq!(expected, JobState::Queued);
                assert_eq!(actual, ok.state);
            }
            e => panic!("expected a conflict, got {e}"),
        }
        assert_eq!(store.history(&job.id).await.expect("history").len(), 2);

        let illegal = store
            .transition(t(&job.id, JobState::Succeeded, JobState::Running))
            .await;
        assert!(matches!(illegal, Err(StoreError::IllegalTransition { .. })));
        let missing = store
            .transition(t("nope", JobState::Queued, JobState::Dispatched))
            .await;
        assert!(matches!(missing, Err(StoreError::NotFound(id)) if id == "nope"));
        assert!(store.get("nope").await.expect("get").is_none());

        let mut dup = new_job("a", "y", "h200");
        dup.id = job.id.clone();
        assert!(matches!(
            store.insert(dup, None).await,
            Err(StoreError::Duplicate(_))
        ));
    }

    #[tokio::test]
    async fn keyset_pagination_by_team_and_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteDatabase::open(dir.path().join("s.db")).expect("open");
        let mut a_ids = Vec::new();
        for i in 0..7 {
            let a = store
                .insert(new_job("a", &format!("a{i}"), "h200"), None)
                .await
                .expect("a");
            a_ids.push(a.id);
            store
                .insert(new_job("b", &format!("b{i}"), "h200"), None)
                .await
                .expect("b");
        }
        store
            .transition(t(&a_ids[0], JobState::Queued, JobState::Cancelled))
            .await
            .expect("cancel");

        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let page = store
                .list(ListQuery {
                    team: Some("a".into()),
                    state: None,
                    limit: 3,
                    after,
                })
                .await
                .expect("page");
            assert!(page.jobs.len() <= 3);
            assert!(page.jobs.iter().all(|j| j.team == "a"));
            seen.extend(page.jobs.iter().map(|j| j.id.clone()));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let mut expected = a_ids.clone();
        expected.reverse();
        assert_eq!(seen, expected, "newest first, no gaps or repeats");

        let all = store
            .list(ListQuery {
                limit: 100,
                ..ListQuery::default()
            })
            .await
            .expect("all");
        assert_eq!(all.jobs.len(), 14);
        assert!(all.next.is_none());
        let cancelled = store
            .list(ListQuery {
                state: Some(JobState::Cancelled),
                ..ListQuery::default()
            })
            .await
            .expect("cancelled");
        assert_eq!(cancelled.jobs.len(), 1);
        assert_eq!(cancelled.jobs[0].id, a_ids[0]);
        let bad = store
            .list(ListQuery {
                after: Some("zzz".into()),
                ..ListQuery::default()
            })
            .await;
        assert!(matches!(bad, Err(StoreError::BadCursor)));
    }

    #[tokio::test]
    async fn queue_is_fifo_per_series() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteDatabase::open(dir.path().join("s.db")).expect("open");
        let h1 = store
            .insert(new_job("a", "h1", "h200"), None)
            .await
            .expect("insert");
        let b1 = store
            .insert(new_job("b", "b1", "b200"), None)
            .await
            .expect("insert");
        let h2 = store
            .insert(new_job("b", "h2", "h200"), None)
            .await
            .expect("insert");
        let h3 = store
            .insert(new_job("a", "h3", "h200"), None)
            .await
            .expect("insert");
        store
            .transition(t(&h2.id, JobState::Queued, JobState::Dispatched))
            .await
            .expect("dispatch");
        let h200: Vec<String> = store
            .queued(Some("h200".into()))
            .await
            .expect("queued")
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(h200, vec![h1.id.clone(), h3.id.clone()]);
        let all: Vec<String> = store
            .queued(None)
            .await
            .expect("queued")
            .into_iter()
            .map(|j| j.id)
            .collect();
        assert_eq!(all, vec![h1.id, b1.id, h3.id]);
    }
}
