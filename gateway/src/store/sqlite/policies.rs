//! [`PolicyStore`] on SQLite (schema migration 3): plugins, policy versions (appends are
//! compare-and-set in an `IMMEDIATE` transaction, so replicas sharing the file cannot
//! both move a scope), shadow results and recent decisions.

use std::collections::BTreeMap;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteDatabase;
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
                 uploaded_by, uploaded_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    rec.owner,
                    rec.name,
                    rec.version,
                    rec.digest,
                    i64::try_from(rec.size).unwrap_or(i64::MAX),
                    rec.description,
                    rec.world,
                    rec.uploaded_by,
                    rec.uploaded_at_ms
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
            Ok((
                u64::try_from(count).unwrap_or(0),
                u64::try_from(bytes).unwrap_or(0),
            ))
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
                out.insert(scope, u64::try_from(v).unwrap_or(0));
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
                Some(v) => i64::try_from(v).unwrap_or(i64::MAX),
                None => match current(conn, &scope)? {
                    0 => return Ok(None),
                    v => i64::try_from(v).unwrap_or(i64::MAX),
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
        let links =
            serde_json::to_string(&v.plugins).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = current(&tx, &v.scope)?;
            if now != v.expected {
                return Err(StoreError::VersionConflict {
                    scope: v.scope,
                    expected: v.expected,
                    current: now,
                });
            }
            let next = now + 1;
            let at_ms = now_ms();
            tx.execute(
                "INSERT INTO policy_versions (scope, version, links, from_version, action, \
                 author, comment, at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    v.scope,
                    i64::try_from(next).unwrap_or(i64::MAX),
                    links,
                    i64::try_from(now).unwrap_or(i64::MAX),
                    v.action,
                    v.author,
                    v.comment,
                    at_ms
                ],
            )?;
            tx.commit()?;
            Ok(PolicyVersion {
                scope: v.scope,
                version: next,
                plugins: v.plugins,
                from_version: now,
                action: v.action.to_string(),
                author: v.author,
                comment: v.comment,
                at_ms,
            })
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
                    compared: u64::try_from(compared).unwrap_or(0),
                    agreed: u64::try_from(agreed).unwrap_or(0),
                },
                differences,
            ))
        })
        .await
    }
}

const PLUGIN_COLUMNS: &str = "SELECT owner, name, version, digest, size, description, world, \
                              uploaded_by, uploaded_at_ms FROM plugins";

const VERSION_COLUMNS: &str = "SELECT scope, version, links, from_version, action, author, \
                               comment, at_ms FROM policy_versions";

fn plugin_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PluginRecord> {
    Ok(PluginRecord {
        owner: r.get(0)?,
        name: r.get(1)?,
        version: r.get(2)?,
        digest: r.get(3)?,
        size: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
        description: r.get(5)?,
        world: r.get(6)?,
        uploaded_by: r.get(7)?,
        uploaded_at_ms: r.get(8)?,
    })
}

fn version_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<PolicyVersion, StoreError>> {
    let links: String = r.get(2)?;
    let plugins = match serde_json::from_str(&links) {
        Ok(p) => p,
        Err(e) => {
            return Ok(Err(StoreError::Corrupt(format!(
                "stored chain is unreadable: {e}"
            ))));
        }
    };
    Ok(Ok(PolicyVersion {
        scope: r.get(0)?,
        version: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
        plugins,
        from_version: u64::try_from(r.get::<_, Option<i64>>(3)?.unwrap_or(0)).unwrap_or(0),
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
    Ok(u64::try_from(v.unwrap_or(0)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::LinkRef;

    fn link(name: &str) -> LinkRef {
        LinkRef {
            owner: "global".into(),
            name: name.into(),
            version: "1".into(),
            digest: "sha256:00".into(),
            settings: serde_json::json!({}),
        }
    }

    fn new_version(expected: u64, name: &str) -> NewVersion {
        NewVersion {
            scope: "global".into(),
            expected,
            plugins: vec![link(name)],
            action: "put",
            author: "ops".into(),
            comment: String::new(),
        }
    }

    #[tokio::test]
    async fn append_is_compare_and_set_and_survives_reopen() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("forge.db");
        let store = SqliteDatabase::open(&path).expect("open");
        assert!(store.heads().await.expect("heads").is_empty());
        let v1 = store.append(new_version(0, "a")).await.expect("v1");
        assert_eq!((v1.version, v1.from_version), (1, 0));
        let stale = store.append(new_version(0, "b")).await;
        assert!(
            matches!(
                stale,
                Err(StoreError::VersionConflict {
                    expected: 0,
                    current: 1,
                    ..
                })
            ),
            "{stale:?}"
        );
        store.append(new_version(1, "b")).await.expect("v2");
        drop(store);

        let store = SqliteDatabase::open(&path).expect("reopen");
        assert_eq!(store.heads().await.expect("heads")["global"], 2);
        let cur = store
            .version("global", None)
            .await
            .expect("get")
            .expect("v2");
        assert_eq!(cur.plugins[0].name, "b");
        assert_eq!(cur.from_version, 1);
        let hist = store.history("global", 10).await.expect("history");
        assert_eq!(
            hist.iter().map(|v| v.version).collect::<Vec<_>>(),
            vec![2, 1]
        );
    }

    #[tokio::test]
    async fn same_version_other_bytes_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let store = SqliteDatabase::open(dir.path().join("forge.db")).expect("open");
        let rec = PluginRecord {
            owner: "ml".into(),
            name: "p".into(),
            version: "1.0.0".into(),
            digest: "sha256:aa".into(),
            size: 10,
            description: String::new(),
            world: "w".into(),
            uploaded_by: "ml".into(),
            uploaded_at_ms: 0,
        };
        assert!(store.insert_plugin(rec.clone()).await.expect("first").1);
        assert!(!store.insert_plugin(rec.clone()).await.expect("again").1);
        let other = PluginRecord {
            digest: "sha256:bb".into(),
            ..rec
        };
        assert!(matches!(
            store.insert_plugin(other).await,
            Err(StoreError::PluginVersionExists { .. })
        ));
        assert_eq!(store.owner_usage("ml").await.expect("usage"), (1, 10));
    }
}
