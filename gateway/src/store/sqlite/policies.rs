//! [`PolicyStore`] on SQLite (schema migrations 3 and 4): plugins, policy versions (appends are
//! compare-and-set in an `IMMEDIATE` transaction, so replicas sharing the file cannot
//! both move a scope), shadow results and recent decisions.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteDatabase;
use crate::store::codec::{
    PLUGIN_COLUMNS, VERSION_COLUMNS, appended, from_json, json_text, next_version, opt_u64, to_i64,
    to_u64,
};
use crate::store::{
    NewVersion, PluginRecord, PolicyStore, PolicyVersion, RecentDecision, ShadowCounts,
    ShadowResult, StoreError, now_ms,
};

#[async_trait]
impl PolicyStore for SqliteDatabase {
    /// Register a plugin. Re-registering identical bytes under the same
    /// (owner, name, version) returns the existing record (`false`: not new); other
    /// bytes under a taken version are [`StoreError::PluginVersionExists`].
    async fn insert_plugin(&self, rec: PluginRecord) -> Result<(PluginRecord, bool), StoreError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = get_plugin(&tx, &rec.owner, &rec.name, &rec.version)? {
                return if existing.digest == rec.digest {
                    Ok((existing, false))
                } else {
                    Err(StoreError::PluginVersionExists {
                        name: rec.name,
                        version: rec.version,
                        digest: existing.digest,
                    })
                };
            }
            tx.execute(
                "INSERT INTO plugins (owner, name, version, digest, size, description, world, \
                 uploaded_by, uploaded_at_ms, memory_mib, deadline_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                params![
                    rec.owner,
                    rec.name,
                    rec.version,
                    rec.digest,
                    to_i64(rec.size),
                    rec.description,
                    rec.world,
                    rec.uploaded_by,
                    rec.uploaded_at_ms,
                    rec.memory_mib.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
                    rec.deadline_ms
                        .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
                ],
            )?;
            tx.commit()?;
            Ok((rec, true))
        })
        .await
    }

    /// A plugin by owner, name and version.
    async fn plugin(
        &self,
        owner: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let (owner, name, version) = (owner.to_string(), name.to_string(), version.to_string());
        self.with(move |conn| get_plugin(conn, &owner, &name, &version))
            .await
    }

    /// A plugin of one of `owners` by digest.
    async fn plugin_by_digest(
        &self,
        owners: Vec<String>,
        digest: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let digest = digest.to_string();
        self.with(move |conn| {
            for owner in owners {
                let found = conn
                    .query_row(
                        &format!("{PLUGIN_COLUMNS} WHERE owner = ?1 AND digest = ?2 LIMIT 1"),
                        params![owner, digest],
                        plugin_from_row,
                    )
                    .optional()?;
                if found.is_some() {
                    return Ok(found);
                }
            }
            Ok(None)
        })
        .await
    }

    /// Plugins of the given owners (`None`: all), by owner, name, version.
    async fn plugins(&self, owners: Option<Vec<String>>) -> Result<Vec<PluginRecord>, StoreError> {
        self.with(move |conn| {
            let mut stmt =
                conn.prepare_cached(&format!("{PLUGIN_COLUMNS} ORDER BY owner, name, version"))?;
            let all = stmt
                .query_map([], plugin_from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(match owners {
                None => all,
                Some(o) => all.into_iter().filter(|p| o.contains(&p.owner)).collect(),
            })
        })
        .await
    }

    /// How many plugins an owner has and their total size in bytes.
    async fn owner_usage(&self, owner: &str) -> Result<(u64, u64), StoreError> {
        let owner = owner.to_string();
        self.with(move |conn| {
            let (count, bytes): (i64, i64) = conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM plugins WHERE owner = ?1",
                [owner],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            Ok((to_u64(count), to_u64(bytes)))
        })
        .await
    }

    /// The current version of every scope that has one.
    async fn heads(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        self.with(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT scope, MAX(version) FROM policy_versions GROUP BY scope")?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            let mut out = BTreeMap::new();
            for row in rows {
                let (scope, v) = row?;
                out.insert(scope, to_u64(v));
            }
            Ok(out)
        })
        .await
    }

    /// One version of a scope (`None` for `version`: the current one).
    async fn version(
        &self,
        scope: &str,
        version: Option<u64>,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        let scope = scope.to_string();
        self.with(move |conn| {
            let v = match version {
                Some(v) => to_i64(v),
                None => match current(conn, &scope)? {
                    0 => return Ok(None),
                    v => to_i64(v),
                },
            };
            conn.query_row(
                &format!("{VERSION_COLUMNS} WHERE scope = ?1 AND version = ?2"),
                params![scope, v],
                version_from_row,
            )
            .optional()?
            .transpose()
        })
        .await
    }

    /// Append a version if the scope is still at `expected`; the new version is
    /// `expected + 1`. A mismatch is [`StoreError::VersionConflict`].
    async fn append(&self, v: NewVersion) -> Result<PolicyVersion, StoreError> {
        let links = json_text(&v.plugins)?;
        let fair_share = json_text(&v.fair_share)?;
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let next = next_version(&v, current(&tx, &v.scope)?)?;
            let at_ms = now_ms();
            tx.execute(
                "INSERT INTO policy_versions (scope, version, links, from_version, action, \
                 author, comment, at_ms, fair_share) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    v.scope,
                    to_i64(next),
                    links,
                    to_i64(next - 1),
                    v.action,
                    v.author,
                    v.comment,
                    at_ms,
                    fair_share
                ],
            )?;
            tx.commit()?;
            Ok(appended(v, next, at_ms))
        })
        .await
    }

    /// A scope's versions, newest first.
    async fn history(&self, scope: &str, limit: u32) -> Result<Vec<PolicyVersion>, StoreError> {
        let scope = scope.to_string();
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "{VERSION_COLUMNS} WHERE scope = ?1 ORDER BY version DESC LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![scope, limit], version_from_row)?;
            let mut out = Vec::new();
            for row in rows {
                out.push(row??);
            }
            Ok(out)
        })
        .await
    }

    /// The latest `n` decisions that carry their policy request, newest first,
    /// optionally of one team.
    async fn recent_decisions(
        &self,
        team: Option<String>,
        n: u32,
    ) -> Result<Vec<RecentDecision>, StoreError> {
        self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT job_id, team, kind, code, request FROM decisions \
                 WHERE request IS NOT NULL AND (?1 IS NULL OR team = ?1) \
                 ORDER BY id DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![team, n], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (job_id, team, kind, code, request) = row?;
                let request = serde_json::from_str(&request)
                    .map_err(|e| StoreError::Corrupt(format!("decision request: {e}")))?;
                out.push(RecentDecision {
                    job_id,
                    team: team.unwrap_or_default(),
                    kind,
                    code,
                    request,
                });
            }
            Ok(out)
        })
        .await
    }

    /// Record one shadow comparison of candidate `candidate`.
    async fn record_shadow(&self, candidate: &str, r: ShadowResult) -> Result<(), StoreError> {
        let candidate = candidate.to_string();
        self.with(move |conn| {
            conn.execute(
                "INSERT INTO shadow_results (candidate, job_id, team, live, shadow, agree, at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    candidate, r.job_id, r.team, r.live, r.shadow, r.agree, r.at_ms
                ],
            )?;
            Ok(())
        })
        .await
    }

    /// Counts and the latest `limit` disagreements of candidate `candidate`.
    async fn shadow_report(
        &self,
        candidate: &str,
        team: Option<String>,
        limit: u32,
    ) -> Result<(ShadowCounts, Vec<ShadowResult>), StoreError> {
        let candidate = candidate.to_string();
        self.with(move |conn| {
            let (compared, agreed): (i64, i64) = conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(agree), 0) FROM shadow_results \
                 WHERE candidate = ?1 AND (?2 IS NULL OR team = ?2)",
                params![candidate, team],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let mut stmt = conn.prepare_cached(
                "SELECT job_id, team, live, shadow, agree, at_ms FROM shadow_results \
                 WHERE candidate = ?1 AND agree = 0 AND (?2 IS NULL OR team = ?2) \
                 ORDER BY id DESC LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![candidate, team, limit], |r| {
                Ok(ShadowResult {
                    job_id: r.get(0)?,
                    team: r.get(1)?,
                    live: r.get(2)?,
                    shadow: r.get(3)?,
                    agree: r.get(4)?,
                    at_ms: r.get(5)?,
                })
            })?;
            let differences = rows.collect::<Result<Vec<_>, _>>()?;
            Ok((
                ShadowCounts {
                    compared: to_u64(compared),
                    agreed: to_u64(agreed),
                },
                differences,
            ))
        })
        .await
    }
}

fn plugin_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PluginRecord> {
    Ok(PluginRecord {
        owner: r.get(0)?,
        name: r.get(1)?,
        version: r.get(2)?,
        digest: r.get(3)?,
        size: to_u64(r.get(4)?),
        description: r.get(5)?,
        world: r.get(6)?,
        uploaded_by: r.get(7)?,
        uploaded_at_ms: r.get(8)?,
        memory_mib: opt_u64(r.get(9)?),
        deadline_ms: opt_u64(r.get(10)?),
    })
}

fn version_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<PolicyVersion, StoreError>> {
    let (links, fair_share): (String, String) = (r.get(2)?, r.get(8)?);
    let read = from_json(&links, "stored chain is unreadable").and_then(|plugins| {
        from_json(&fair_share, "stored fair-share settings are unreadable")
            .map(|fair_share| (plugins, fair_share))
    });
    let (plugins, fair_share) = match read {
        Ok(both) => both,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(PolicyVersion {
        scope: r.get(0)?,
        version: to_u64(r.get(1)?),
        plugins,
        fair_share,
        from_version: to_u64(r.get::<_, Option<i64>>(3)?.unwrap_or(0)),
        action: r.get(4)?,
        author: r.get(5)?,
        comment: r.get(6)?,
        at_ms: r.get(7)?,
    }))
}

fn get_plugin(
    conn: &Connection,
    owner: &str,
    name: &str,
    version: &str,
) -> Result<Option<PluginRecord>, StoreError> {
    Ok(conn
        .query_row(
            &format!("{PLUGIN_COLUMNS} WHERE owner = ?1 AND name = ?2 AND version = ?3"),
            params![owner, name, version],
            plugin_from_row,
        )
        .optional()?)
}

fn current(conn: &Connection, scope: &str) -> Result<u64, StoreError> {
    let v: Option<i64> = conn.query_row(
        "SELECT MAX(version) FROM policy_versions WHERE scope = ?1",
        [scope],
        |r| r.get(0),
    )?;
    Ok(to_u64(v.unwrap_or(0)))
}
