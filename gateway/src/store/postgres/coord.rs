//! [`CoordStore`] on PostgreSQL (schema migration 4): the lease row and the
//! installation identity. Lease times are the **database's** clock, so replicas never
//! compare their own clocks; each operation is one statement (atomic on its own).

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{NOW_MS, PgDatabase};
use crate::store::codec::{to_i64, to_u64};
use crate::store::coord::ttl_ms;
use crate::store::{Acquire, CoordStore, Lease, StoreError};

const RETURNING: &str =
    "RETURNING name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms";

fn lease_from_row(r: &Row) -> Result<Lease, StoreError> {
    Ok(Lease {
        name: r.try_get(0)?,
        holder: r.try_get(1)?,
        epoch: to_u64(r.try_get(2)?),
        acquired_at_ms: r.try_get(3)?,
        renewed_at_ms: r.try_get(4)?,
        expires_at_ms: r.try_get(5)?,
    })
}

async fn get_lease(client: &impl GenericClient, name: &str) -> Result<Option<Lease>, StoreError> {
    client
        .query_opt(
            "SELECT name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms \
             FROM leases WHERE name = $1",
            &[&name],
        )
        .await?
        .as_ref()
        .map(lease_from_row)
        .transpose()
}

#[async_trait]
impl CoordStore for PgDatabase {
    async fn ping(&self) -> Result<(), StoreError> {
        self.client().await?.query_one("SELECT 1", &[]).await?;
        Ok(())
    }

    async fn shared_value(&self, key: &str, candidate: String) -> Result<String, StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&key, &candidate],
            )
            .await?;
        Ok(client
            .query_one("SELECT value FROM meta WHERE key = $1", &[&key])
            .await?
            .try_get(0)?)
    }

    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        let client = self.client().await?;
        let sql = format!(
            "WITH now AS (SELECT {NOW_MS} AS ms) \
             INSERT INTO leases (name, holder, epoch, acquired_at_ms, renewed_at_ms, \
             expires_at_ms) SELECT $1, $2, 1, ms, ms, ms + $3 FROM now \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
             epoch = leases.epoch + 1, acquired_at_ms = EXCLUDED.acquired_at_ms, \
             renewed_at_ms = EXCLUDED.renewed_at_ms, expires_at_ms = EXCLUDED.expires_at_ms \
             WHERE leases.expires_at_ms <= EXCLUDED.acquired_at_ms {RETURNING}"
        );
        let taken = client
            .query_opt(&sql, &[&name, &holder, &ttl_ms(ttl)])
            .await?;
        match taken {
            Some(row) => Ok(Acquire::Acquired(lease_from_row(&row)?)),
            None => get_lease(&client, name)
                .await?
                .map(Acquire::Held)
                .ok_or_else(|| StoreError::Corrupt(format!("lease {name} vanished"))),
        }
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let sql = format!(
            "WITH now AS (SELECT {NOW_MS} AS ms) \
             UPDATE leases SET renewed_at_ms = now.ms, expires_at_ms = now.ms + $1 FROM now \
             WHERE name = $2 AND holder = $3 AND epoch = $4 {RETURNING}"
        );
        self.client()
            .await?
            .query_opt(
                &sql,
                &[
                    &ttl_ms(ttl),
                    &lease.name,
                    &lease.holder,
                    &to_i64(lease.epoch),
                ],
            )
            .await?
            .as_ref()
            .map(lease_from_row)
            .transpose()
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let sql = format!(
            "UPDATE leases SET expires_at_ms = {NOW_MS} \
             WHERE name = $1 AND holder = $2 AND epoch = $3"
        );
        self.client()
            .await?
            .execute(&sql, &[&lease.name, &lease.holder, &to_i64(lease.epoch)])
            .await?;
        Ok(())
    }

    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        get_lease(&self.client().await?, name).await
    }
}
