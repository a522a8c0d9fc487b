//! [`PolicyStore`] on PostgreSQL (schema migration 3): plugins, policy versions, shadow
//! results and recent decisions. An append holds a transaction-level advisory lock on
//! its scope, so replicas appending to one scope queue up and each sees the other's
//! version (compare-and-set); it notifies [`super::POLICY_CHANNEL`] in the same
//! transaction, delivered to every listening replica at commit.

use std::collections::BTreeMap;

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{POLICY_CHANNEL, PgDatabase};
use crate::store::codec::{
    PLUGIN_COLUMNS, VERSION_COLUMNS, appended, from_json, json_text, next_version, opt_u64, to_i64,
    to_u64,
};
use crate::store::{
    NewVersion, PluginRecord, PolicyStore, PolicyVersion, RecentDecision, ShadowCounts,
    ShadowResult, StoreError, now_ms,
};

fn plugin_from_row(r: &Row) -> Result<PluginRecord, StoreError> {
    Ok(PluginRecord {
        owner: r.try_get(0)?,
        name: r.try_get(1)?,
        version: r.try_get(2)?,
        digest: r.try_get(3)?,
        size: to_u64(r.try_get(4)?),
        description: r.try_get(5)?,
        world: r.try_get(6)?,
        uploaded_by: r.try_get(7)?,
        uploaded_at_ms: r.try_get(8)?,
        memory_mib: opt_u64(r.try_get(9)?),
        deadline_ms: opt_u64(r.try_get(10)?),
    })
}

fn version_from_row(r: &Row) -> Result<PolicyVersion, StoreError> {
    Ok(PolicyVersion {
        scope: r.try_get(0)?,
        version: to_u64(r.try_get(1)?),
        plugins: from_json(r.try_get(2)?, "stored chain is unreadable")?,
        from_version: to_u64(r.try_get::<_, Option<i64>>(3)?.unwrap_or(0)),
        action: r.try_get(4)?,
        author: r.try_get(5)?,
        comment: r.try_get(6)?,
        at_ms: r.try_get(7)?,
        fair_share: from_json(r.try_get(8)?, "stored fair-share settings are unreadable")?,
    })
}

async fn get_plugin(
    client: &impl GenericClient,
    owner: &str,
    name: &str,
    version: &str,
) -> Result<Option<PluginRecord>, StoreError> {
    client
        .query_opt(
            &format!("{PLUGIN_COLUMNS} WHERE owner = $1 AND name = $2 AND version = $3"),
            &[&owner, &name, &version],
        )
        .await?
        .as_ref()
        .map(plugin_from_row)
        .transpose()
}

async fn current(client: &impl GenericClient, scope: &str) -> Result<u64, StoreError> {
    let v: Option<i64> = client
        .query_one(
            "SELECT MAX(version) FROM policy_versions WHERE scope = $1",
            &[&scope],
        )
        .await?
        .try_get(0)?;
    Ok(to_u64(v.unwrap_or(0)))
}

#[async_trait]
impl PolicyStore for PgDatabase {
    async fn insert_plugin(&self, rec: PluginRecord) -> Result<(PluginRecord, bool), StoreError> {
        let client = self.client().await?;
        let inserted = client
            .execute(
                "INSERT INTO plugins (owner, name, version, digest, size, description, world, \
                 uploaded_by, uploaded_at_ms, memory_mib, deadline_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (owner, name, version) DO NOTHING",
                &[
                    &rec.owner,
                    &rec.name,
                    &rec.version,
                    &rec.digest,
                    &to_i64(rec.size),
                    &rec.description,
                    &rec.world,
                    &rec.uploaded_by,
                    &rec.uploaded_at_ms,
                    &rec.memory_mib.map(to_i64),
                    &rec.deadline_ms.map(to_i64),
                ],
            )
            .await?;
        if inserted == 1 {
            return Ok((rec, true));
        }
        let existing = get_plugin(&client, &rec.owner, &rec.name, &rec.version)
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("plugin {} vanished", rec.name)))?;
        if existing.digest == rec.digest {
            Ok((existing, false))
        } else {
            Err(StoreError::PluginVersionExists {
                name: rec.name,
                version: rec.version,
                digest: existing.digest,
            })
        }
    }

    async fn plugin(
        &self,
        owner: &str,
        name: &str,
        version: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        get_plugin(&self.client().await?, owner, name, version).await
    }

    async fn plugin_by_digest(
        &self,
        owners: Vec<String>,
        digest: &str,
    ) -> Result<Option<PluginRecord>, StoreError> {
        let client = self.client().await?;
        for owner in owners {
            let found = client
                .query_opt(
                    &format!("{PLUGIN_COLUMNS} WHERE owner = $1 AND digest = $2 LIMIT 1"),
                    &[&owner, &digest],
                )
                .await?;
            if let Some(row) = found {
                return plugin_from_row(&row).map(Some);
            }
        }
        Ok(None)
    }

    async fn plugins(&self, owners: Option<Vec<String>>) -> Result<Vec<PluginRecord>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "{PLUGIN_COLUMNS} WHERE $1::TEXT[] IS NULL OR owner = ANY($1) \
                     ORDER BY owner, name, version"
                ),
                &[&owners],
            )
            .await?;
        rows.iter().map(plugin_from_row).collect()
    }

    async fn owner_usage(&self, owner: &str) -> Result<(u64, u64), StoreError> {
        let row = self
            .client()
            .await?
            .query_one(
                "SELECT COUNT(*), COALESCE(SUM(size), 0)::BIGINT FROM plugins WHERE owner = $1",
                &[&owner],
            )
            .await?;
        Ok((to_u64(row.try_get(0)?), to_u64(row.try_get(1)?)))
    }

    async fn heads(&self) -> Result<BTreeMap<String, u64>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT scope, MAX(version) FROM policy_versions GROUP BY scope",
                &[],
            )
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get(0)?, to_u64(r.try_get(1)?))))
            .collect()
    }

    async fn version(
        &self,
        scope: &str,
        version: Option<u64>,
    ) -> Result<Option<PolicyVersion>, StoreError> {
        let client = self.client().await?;
        let v = match version {
            Some(v) => v,
            None => match current(&client, scope).await? {
                0 => return Ok(None),
                v => v,
            },
        };
        client
            .query_opt(
                &format!("{VERSION_COLUMNS} WHERE scope = $1 AND version = $2"),
                &[&scope, &to_i64(v)],
            )
            .await?
            .as_ref()
            .map(version_from_row)
            .transpose()
    }

    async fn append(&self, v: NewVersion) -> Result<PolicyVersion, StoreError> {
        let links = json_text(&v.plugins)?;
        let fair_share = json_text(&v.fair_share)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('forge-policy:' || $1, 0))",
            &[&v.scope],
        )
        .await?;
        let next = next_version(&v, current(&tx, &v.scope).await?)?;
        let at_ms = now_ms();
        tx.execute(
            "INSERT INTO policy_versions (scope, version, links, from_version, action, \
             author, comment, at_ms, fair_share) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[
                &v.scope,
                &to_i64(next),
                &links,
                &to_i64(next - 1),
                &v.action,
                &v.author,
                &v.comment,
                &at_ms,
                &fair_share,
            ],
        )
        .await?;
        tx.execute("SELECT pg_notify($1, $2)", &[&POLICY_CHANNEL, &v.scope])
            .await?;
        tx.commit().await?;
        Ok(appended(v, next, at_ms))
    }

    async fn history(&self, scope: &str, limit: u32) -> Result<Vec<PolicyVersion>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!("{VERSION_COLUMNS} WHERE scope = $1 ORDER BY version DESC LIMIT $2"),
                &[&scope, &i64::from(limit)],
            )
            .await?;
        rows.iter().map(version_from_row).collect()
    }

    async fn recent_decisions(
        &self,
        team: Option<String>,
        n: u32,
    ) -> Result<Vec<RecentDecision>, StoreError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT job_id, team, kind, code, request FROM decisions \
                 WHERE request IS NOT NULL AND ($1::TEXT IS NULL OR team = $1) \
                 ORDER BY id DESC LIMIT $2",
                &[&team, &i64::from(n)],
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(RecentDecision {
                    job_id: r.try_get(0)?,
                    team: r.try_get::<_, Option<String>>(1)?.unwrap_or_default(),
                    kind: r.try_get(2)?,
                    code: r.try_get(3)?,
                    request: from_json(r.try_get(4)?, "decision request")?,
                })
            })
            .collect()
    }

    async fn record_shadow(&self, candidate: &str, r: ShadowResult) -> Result<(), StoreError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO shadow_results (candidate, job_id, team, live, shadow, agree, at_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &candidate, &r.job_id, &r.team, &r.live, &r.shadow, &r.agree, &r.at_ms,
                ],
            )
            .await?;
        Ok(())
    }

    async fn shadow_report(
        &self,
        candidate: &str,
        team: Option<String>,
        limit: u32,
    ) -> Result<(ShadowCounts, Vec<ShadowResult>), StoreError> {
        let client = self.client().await?;
        let counts = client
            .query_one(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE agree) FROM shadow_results \
                 WHERE candidate = $1 AND ($2::TEXT IS NULL OR team = $2)",
                &[&candidate, &team],
            )
            .await?;
        let rows = client
            .query(
                "SELECT job_id, team, live, shadow, agree, at_ms FROM shadow_results \
                 WHERE candidate = $1 AND NOT agree AND ($2::TEXT IS NULL OR team = $2) \
                 ORDER BY id DESC LIMIT $3",
                &[&candidate, &team, &i64::from(limit)],
            )
            .await?;
        let differences = rows
            .iter()
            .map(|r| {
                Ok(ShadowResult {
                    job_id: r.try_get(0)?,
                    team: r.try_get(1)?,
                    live: r.try_get(2)?,
                    shadow: r.try_get(3)?,
                    agree: r.try_get(4)?,
                    at_ms: r.try_get(5)?,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        Ok((
            ShadowCounts {
                compared: to_u64(counts.try_get(0)?),
                agreed: to_u64(counts.try_get(1)?),
            },
            differences,
        ))
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.feeds.policy.clone())
    }
}
