//! The usage ledger on PostgreSQL ([`crate::store::usage`]): one row per team and
//! series, locked, read and rewritten in the accrual's transaction (which the caller
//! opened and fenced).

use crate::store::StoreError;
use crate::store::usage::{Accrual, UsageRecord, accrued};

/// Adds the accrual's charges, each row decayed to the accrual's time first.
pub(super) async fn accrue(
    tx: &deadpool_postgres::Transaction<'_>,
    a: &Accrual,
) -> Result<(), StoreError> {
    for c in &a.charges {
        let old = tx
            .query_opt(
                "SELECT gpu_seconds, at_ms FROM usage_ledger WHERE team = $1 AND series = $2 \
                 FOR UPDATE",
                &[&c.team, &c.series],
            )
            .await?
            .map(|r| (r.get::<_, f64>(0), r.get::<_, i64>(1)));
        let (value, at) = accrued(old, c.gpu_seconds, a.at_ms, a.half_life_s);
        tx.execute(
            "INSERT INTO usage_ledger (team, series, gpu_seconds, at_ms) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (team, series) DO UPDATE SET gpu_seconds = EXCLUDED.gpu_seconds, \
             at_ms = EXCLUDED.at_ms",
            &[&c.team, &c.series, &value, &at],
        )
        .await?;
    }
    Ok(())
}

/// Every row, by team and series.
pub(super) async fn all(
    client: &impl deadpool_postgres::GenericClient,
) -> Result<Vec<UsageRecord>, StoreError> {
    Ok(client
        .query(
            "SELECT team, series, gpu_seconds, at_ms FROM usage_ledger ORDER BY team, series",
            &[],
        )
        .await?
        .iter()
        .map(|r| UsageRecord {
            team: r.get(0),
            series: r.get(1),
            gpu_seconds: r.get(2),
            at_ms: r.get(3),
        })
        .collect())
}
