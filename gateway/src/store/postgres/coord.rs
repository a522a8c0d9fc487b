//! [`CoordStore`] on PostgreSQL (schema migration 4): the lease row and the
//! installation identity. Lease times are the **database's** clock, so replicas never
//! compare their own clocks.
//!
//! Row locks on the lease, and why: a fenced write reads it `FOR KEY SHARE` and holds
//! that to its commit (`jobs.rs`). A **takeover** (a new epoch) first locks the row
//! `FOR UPDATE`, which conflicts with those, so it waits for the old term's writes in
//! flight and every write after it sees the new epoch. A **renewal** is a plain
//! `UPDATE` of times only (`FOR NO KEY UPDATE`), which does not conflict with
//! `FOR KEY SHARE`: the leader renews however many of its writes are in flight, so a
//! queue of job writes cannot make it miss its renew deadline (with `FOR SHARE`, it
//! did: CI saw a leader lose its lease every 2 s under load, and no job finish). A
//! follower's try reads the lease without a lock first and locks only one that has
//! expired, so followers do not queue on the row either.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::{NOW_MS, PgDatabase};
use crate::store::codec::{to_i64, to_u64};
use crate::store::coord::ttl_ms;
use crate::store::{Acquire, CoordStore, Lease, StoreError};

const LEASE_COLUMNS: &str = "name, holder, epoch, acquired_at_ms, renewed_at_ms, expires_at_ms";

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

/// Which lease a read returns.
#[derive(Clone, Copy)]
enum Which {
    /// The row as it is.
    Any,
    /// Only while it is in force by the database's clock.
    InForce,
}

/// The lease row (read without a lock).
async fn read_lease(
    client: &impl GenericClient,
    name: &str,
    which: Which,
) -> Result<Option<Lease>, StoreError> {
    let in_force = match which {
        Which::Any => String::new(),
        Which::InForce => format!(" AND expires_at_ms > {NOW_MS}"),
    };
    let sql = format!("SELECT {LEASE_COLUMNS} FROM leases WHERE name = $1{in_force}");
    client
        .query_opt(&sql, &[&name])
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
        let mut client = self.client().await?;
        if let Some(lease) = read_lease(&client, name, Which::InForce).await? {
            return Ok(Acquire::Held(lease));
        }
        let tx = client.transaction().await?;
        // Waits for the fenced writes of the term that ends (they hold `FOR KEY SHARE`).
        tx.query_opt("SELECT 1 FROM leases WHERE name = $1 FOR UPDATE", &[&name])
            .await?;
        let sql = format!(
            "WITH now AS (SELECT {NOW_MS} AS ms) \
             INSERT INTO leases (name, holder, epoch, acquired_at_ms, renewed_at_ms, \
             expires_at_ms) SELECT $1, $2, 1, ms, ms, ms + $3 FROM now \
             ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, \
             epoch = leases.epoch + 1, acquired_at_ms = EXCLUDED.acquired_at_ms, \
             renewed_at_ms = EXCLUDED.renewed_at_ms, expires_at_ms = EXCLUDED.expires_at_ms \
             WHERE leases.expires_at_ms <= EXCLUDED.acquired_at_ms RETURNING {LEASE_COLUMNS}"
        );
        let taken = tx.query_opt(&sql, &[&name, &holder, &ttl_ms(ttl)]).await?;
        let outcome = match taken {
            Some(row) => Acquire::Acquired(lease_from_row(&row)?),
            None => read_lease(&tx, name, Which::Any)
                .await?
                .map(Acquire::Held)
                .ok_or_else(|| StoreError::Corrupt(format!("lease {name} vanished")))?,
        };
        tx.commit().await?;
        Ok(outcome)
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>, StoreError> {
        let sql = format!(
            "WITH now AS (SELECT {NOW_MS} AS ms) \
             UPDATE leases SET renewed_at_ms = now.ms, expires_at_ms = now.ms + $1 FROM now \
             WHERE name = $2 AND holder = $3 AND epoch = $4 RETURNING {LEASE_COLUMNS}"
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
        read_lease(&self.client().await?, name, Which::Any).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::store::Fence;
    use crate::store::postgres::jobs::check_fence;

    const TTL: Duration = Duration::from_millis(400);
    /// Longer than any statement takes here when it does not wait on a lock.
    const PROMPT: Duration = Duration::from_secs(3);

    #[tokio::test]
    async fn a_renewal_never_waits_for_fenced_writes_and_a_takeover_does() {
        let db = PgDatabase::open(&forge_testkit::postgres::database())
            .await
            .expect("open");
        let Acquire::Acquired(lease) = db.acquire("leader", "a", TTL).await.expect("acquire")
        else {
            panic!("a fresh lease is acquired");
        };
        // A fenced write of term 1 in flight: its transaction stays open.
        let mut writer = db.client().await.expect("client");
        let tx = writer.transaction().await.expect("begin");
        let fence = Fence {
            lease: "leader".into(),
            epoch: lease.epoch,
        };
        check_fence(&tx, &fence).await.expect("term 1 holds");

        // The leader renews anyway, and a follower sees the lease held, both at once.
        let renewed = tokio::time::timeout(PROMPT, db.renew(&lease, TTL))
            .await
            .expect("a renewal waited for a fenced write in flight")
            .expect("renew")
            .expect("still the holder");
        let seen = tokio::time::timeout(PROMPT, db.acquire("leader", "b", TTL))
            .await
            .expect("a follower's try waited for a fenced write in flight")
            .expect("try");
        assert!(matches!(seen, Acquire::Held(l) if l.holder == "a"));

        // Once the lease expires, a takeover waits for the write in flight to end…
        tokio::time::sleep(TTL * 2).await;
        let mut takeover = tokio::spawn({
            let db = db.clone();
            async move { db.acquire("leader", "b", TTL).await }
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut takeover)
                .await
                .is_err(),
            "the takeover went ahead of term {}'s write in flight",
            renewed.epoch
        );
        tx.commit().await.expect("commit the fenced write");
        // …and then happens, in a new epoch that fences term 1 out.
        let taken = tokio::time::timeout(PROMPT, takeover)
            .await
            .expect("the takeover went on after the write")
            .expect("task")
            .expect("acquire");
        let Acquire::Acquired(new) = taken else {
            panic!("an expired lease is taken over: {taken:?}");
        };
        assert_eq!((new.holder.as_str(), new.epoch), ("b", lease.epoch + 1));
        let mut late = db.client().await.expect("client");
        let tx = late.transaction().await.expect("begin");
        assert!(matches!(
            check_fence(&tx, &fence).await,
            Err(StoreError::Fenced { .. })
        ));
    }
}
