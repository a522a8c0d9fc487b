//! Durable policy state in the gateway's SQLite database (schema migration 3): the
//! plugin registry's metadata, every version of every policy scope with who changed it
//! and why, shadow-mode results, and the recent decisions a candidate is replayed on.
//!
//! Replicas sharing the database see the same versions: [`PolicyStore::append`] is a
//! compare-and-set on the scope's current version inside an `IMMEDIATE` transaction,
//! so two writers (on one gateway or several) cannot both move a scope from `v` to
//! `v+1`; [`PolicyStore::heads`] is the cheap query replicas poll.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use super::error::PolicyAdminError;
use crate::store::{migrations, now_ms};

/// A registered plugin (its bytes live in object storage under its digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRecord {
    /// `global` (admin-managed) or the owning team.
    pub owner: String,
    pub name: String,
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    pub size: u64,
    pub description: String,
    /// The WIT world it implements.
    pub world: String,
    /// Who uploaded it (token name, else team).
    pub uploaded_by: String,
    pub uploaded_at_ms: i64,
}

/// One link of a stored chain: which plugin (resolved to its digest) and its settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LinkRef {
    pub owner: String,
    pub name: String,
    pub version: String,
    pub digest: String,
    pub settings: serde_json::Value,
}

/// One version of a scope's chain.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyVersion {
    /// `global` or `team:<name>`.
    pub scope: String,
    pub version: u64,
    pub plugins: Vec<LinkRef>,
    /// The version that was active before this one (0: none).
    pub from_version: u64,
    /// `bootstrap`, `put` or `rollback`.
    pub action: String,
    pub author: String,
    pub comment: String,
    pub at_ms: i64,
}

/// A version to append.
#[derive(Debug, Clone)]
pub struct NewVersion {
    pub scope: String,
    /// The version the writer believes is current (0 for a scope with none).
    pub expected: u64,
    pub plugins: Vec<LinkRef>,
    pub action: &'static str,
    pub author: String,
    pub comment: String,
}

/// A recorded decision to replay a candidate against.
#[derive(Debug, Clone)]
pub struct RecentDecision {
    pub job_id: String,
    pub team: String,
    pub kind: String,
    pub code: Option<String>,
    pub request: serde_json::Value,
}

/// One shadow comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowResult {
    pub job_id: String,
    pub team: String,
    /// What the live chain decided (`kind` or `kind:code`).
    pub live: String,
    /// What the candidate would have decided.
    pub shadow: String,
    pub agree: bool,
    pub at_ms: i64,
}

/// Agreement of a shadow candidate so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowCounts {
    pub compared: u64,
    pub agreed: u64,
}

/// The policy tables.
#[derive(Clone)]
pub struct PolicyStore {
    conn: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for PolicyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyStore")
    }
}

impl PolicyStore {
    /// Open the gateway database (migrating it if this process is first).
    pub fn open(path: &Path) -> Result<Self, PolicyAdminError> {
        let mut conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrations::migrate(&mut conn)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Run `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> Result<T, PolicyAdminError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, PolicyAdminError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| PolicyAdminError::Internal("policy store mutex poisoned".into()))?;
            f(&mut guard)
        })
        .await
        .map_err(|e| PolicyAdminError::Internal(e.to_string()))?
    }

    /// Register a plugin. Re-registering identical bytes under the same
    /// (owner, name, version) returns the existing record (`false`: not new); other
    /// bytes under a taken version are [`PolicyAdminError::VersionExists`].
    pub async fn insert_plugin(
        &self,
        rec: PluginRecord,
    ) -> Result<(PluginRecord, bool), PolicyAdminError> {
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            if let Some(existing) = get_plugin(&tx, &rec.owner, &rec.name, &rec.version)? {
                return if existing.digest == rec.digest {
                    Ok((existing, false))
                } else {
                    Err(PolicyAdminError::VersionExists {
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
    pub async fn plugin(
        &self,
        owner: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<PluginRecord>, PolicyAdminError> {
        let (owner, name, version) = (owner.to_string(), name.to_string(), version.to_string());
        self.with(move |conn| get_plugin(conn, &owner, &name, &version))
            .await
    }

    /// A plugin of one of `owners` by digest.
    pub async fn plugin_by_digest(
        &self,
        owners: Vec<String>,
        digest: &str,
    ) -> Result<Option<PluginRecord>, PolicyAdminError> {
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
    pub async fn plugins(
        &self,
        owners: Option<Vec<String>>,
    ) -> Result<Vec<PluginRecord>, PolicyAdminError> {
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
    pub async fn owner_usage(&self, owner: &str) -> Result<(u64, u64), PolicyAdminError> {
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
    pub async fn heads(&self) -> Result<BTreeMap<String, u64>, PolicyAdminError> {
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
    pub async fn version(
        &self,
        scope: &str,
        version: Option<u64>,
    ) -> Result<Option<PolicyVersion>, PolicyAdminError> {
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
    /// `expected + 1`. A mismatch is [`PolicyAdminError::VersionConflict`].
    pub async fn append(&self, v: NewVersion) -> Result<PolicyVersion, PolicyAdminError> {
        let links = serde_json::to_string(&v.plugins)
            .map_err(|e| PolicyAdminError::Internal(e.to_string()))?;
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = current(&tx, &v.scope)?;
            if now != v.expected {
                return Err(PolicyAdminError::VersionConflict {
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
    pub async fn history(
        &self,
        scope: &str,
        limit: u32,
    ) -> Result<Vec<PolicyVersion>, PolicyAdminError> {
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
    pub async fn recent_decisions(
        &self,
        team: Option<String>,
        n: u32,
    ) -> Result<Vec<RecentDecision>, PolicyAdminError> {
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
                    .map_err(|e| PolicyAdminError::Internal(format!("decision request: {e}")))?;
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
    pub async fn record_shadow(
        &self,
        candidate: &str,
        r: ShadowResult,
    ) -> Result<(), PolicyAdminError> {
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
    pub async fn shadow_report(
        &self,
        candidate: &str,
        limit: u32,
    ) -> Result<(ShadowCounts, Vec<ShadowResult>), PolicyAdminError> {
        let candidate = candidate.to_string();
        self.with(move |conn| {
            let (compared, agreed): (i64, i64) = conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(agree), 0) FROM shadow_results WHERE candidate = ?1",
                [&candidate],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?;
            let mut stmt = conn.prepare_cached(
                "SELECT job_id, team, live, shadow, agree, at_ms FROM shadow_results \
                 WHERE candidate = ?1 AND agree = 0 ORDER BY id DESC LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![candidate, limit], |r| {
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

fn version_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<PolicyVersion, PolicyAdminError>> {
    let links: String = r.get(2)?;
    let plugins = match serde_json::from_str(&links) {
        Ok(p) => p,
        Err(e) => {
            return Ok(Err(PolicyAdminError::Internal(format!(
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
) -> Result<Option<PluginRecord>, PolicyAdminError> {
    Ok(conn
        .query_row(
            &format!("{PLUGIN_COLUMNS} WHERE owner = ?1 AND name = ?2 AND version = ?3"),
            params![owner, name, version],
            plugin_from_row,
        )
        .optional()?)
}

fn current(conn: &Connection, scope: &str) -> Result<u64, PolicyAdminError> {
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
        let store = PolicyStore::open(&path).expect("open");
        assert!(store.heads().await.expect("heads").is_empty());
        let v1 = store.append(new_version(0, "a")).await.expect("v1");
        assert_eq!((v1.version, v1.from_version), (1, 0));
        let stale = store.append(new_version(0, "b")).await;
        assert!(
            matches!(
                stale,
                Err(PolicyAdminError::VersionConflict {
                    expected: 0,
                    current: 1,
                    ..
                })
            ),
            "{stale:?}"
        );
        store.append(new_version(1, "b")).await.expect("v2");
        drop(store);

        let store = PolicyStore::open(&path).expect("reopen");
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
        let store = PolicyStore::open(&dir.path().join("forge.db")).expect("open");
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
            Err(PolicyAdminError::VersionExists { .. })
        ));
        assert_eq!(store.owner_usage("ml").await.expect("usage"), (1, 10));
    }
}
