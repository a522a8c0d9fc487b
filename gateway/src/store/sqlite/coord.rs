//! [`CoordStore`] on SQLite (schema migration 4): the lease row and the installation
//! identity. Times are this machine's clock (every process sharing a SQLite file runs
//! on the same machine). Acquire, renew and release are single statements in
//! `IMMEDIATE` transactions, so processes sharing the file serialize on them.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::SqliteDatabase;
use crate::store::codec::{to_i64, to_u64};
use crate::store::coord::ttl_ms;
use crate::store::{Acquire, CoordStore, Lease, StoreError, now_ms};

const LEASE_COLUMNS: &str =
    "SELECT name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms FROM leases";

fn lease_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        name: r.get(0)?,
        holder: r.get(1)?,
        epoch: to_u64(r.get(2)?),
        acquired_at_ms: r.get(3)?,
        renewed_at_ms: r.get(4)?,
        expires_at_ms: r.get(5)?,
    })
}

fn get_lease(conn: &Connection, name: &str) -> Result<Option<Lease>, StoreError> {
    Ok(conn
        .query_row(
            &format!("{LEASE_COLUMNS} WHERE name = ?1"),
            [name],
            lease_from_row,
        )
        .optional()?)
}

#[async_trait]
impl CoordStore for SqliteDatabase {
    async fn ping(&self) -> Result<(), StoreError> {
        self.with(|conn| Ok(conn.query_row("SELECT 1", [], |_| Ok(()))?))
            .await
    }

    async fn shared_value(&self, key: &str, candidate: String) -> Result<String, StoreError> {
        let key = key.to_string();
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO NOTHING",
                params![key, candidate],
            )?;
            let stored: String =
                tx.query_row("SELECT value FROM meta WHERE key = ?1", [&key], |r| {
                    r.get(0)
                })?;
            tx.commit()?;
            Ok(stored)
        })
        .await
    }

    async fn acquire(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Acquire, StoreError> {
        let (name, holder, ttl) = (name.to_string(), holder.to_string(), ttl_ms(ttl));
        self.with(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = now_ms();
            let taken = tx
                .query_row(
                    "INSERT INTO leases (name, holder, epoch, acquired_at_ms, renewed_at_ms, \
                     expires_at_ms) VALUES (?1, ?2, 1, ?3, ?3, ?4) \
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                     epoch = leases.epoch + 1, acquired_at_ms = excluded.acquired_at_ms, \
                     renewed_at_ms = excluded.renewed_at_ms, \
                     expires_at_ms = excluded.expires_at_ms \
                     WHERE leases.expires_at_ms <= excluded.acquired_at_ms \
                     RETURNING name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms",
                    params![name, holder, now, now.saturating_add(ttl)],
                    lease_from_row,
                )
                .optional()?;
            let out = match taken {
                Some(lease) => Acquire::Acquired(lease),
                None => Acquire::Held(
                    get_lease(&tx, &name)?
                        .ok_or_else(|| StoreError::Corrupt(format!("lease {name} vanished")))?,
                ),
            };
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let (lease, ttl) = (lease.clone(), ttl_ms(ttl));
        self.with(move |conn| {
            let now = now_ms();
            Ok(conn
                .query_row(
                    "UPDATE leases SET renewed_at_ms = ?1, expires_at_ms = ?2 \
                     WHERE name = ?3 AND holder = ?4 AND epoch = ?5 \
                     RETURNING name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms",
                    params![
                        now,
                        now.saturating_add(ttl),
                        lease.name,
                        lease.holder,
                        to_i64(lease.epoch)
                    ],
                    lease_from_row,
                )
                .optional()?)
        })
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        let lease = lease.clone();
        self.with(move |conn| {
            conn.execute(
                "UPDATE leases SET expires_at_ms = ?1 \
                 WHERE name = ?2 AND holder = ?3 AND epoch = ?4",
                params![now_ms(), lease.name, lease.holder, to_i64(lease.epoch)],
            )?;
            Ok(())
        })
        .await
    }

    async fn lease(&self, name: &str) -> Result<Option<Lease>, StoreError> {
        let name = name.to_string();
        self.with(move |conn| get_lease(conn, &name)).await
    }
}
