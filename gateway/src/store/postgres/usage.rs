//! The usage ledger on PostgreSQL ([`crate::store::usage`]): one row per team and
//! series, locked, read and rewritten in the accrual's transaction (fenced like a
//! transition).

use super::jobs::check_fence;
use crate::store::StoreError;
use crate::store::usage::{Accrual, UsageRecord, accrued};

/// Adds the accrual's charges, each row decayed to the accrual's time first.
pub(super) async fn accrue(
    client: &mut deadpool_postgres::Object,
    a: &Accrual,
) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    if let Some(fence) = &a.fence {
        check_fence(&tx, fence).await?;
    }
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
    tx.commit().await?;
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
