//! The dispatch journal on PostgreSQL ([`crate::store::dispatch_journal`]): one row
//! per recorded pass, its record as JSON.

use crate::store::StoreError;
use crate::store::codec::{from_json, json_text};
use crate::store::dispatch_journal::PassRecord;

/// Appends `p` and forgets the records before `keep_since_ms`, in the caller's
/// (fenced) transaction.
pub(super) async fn append(
    tx: &deadpool_postgres::Transaction<'_>,
    p: &PassRecord,
    keep_since_ms: i64,
) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM dispatch_journal WHERE at_ms < $1",
        &[&keep_since_ms],
    )
    .await?;
    tx.execute(
        "INSERT INTO dispatch_journal (at_ms, body) VALUES ($1, $2)",
        &[&p.at_ms, &json_text(p)?],
    )
    .await?;
    Ok(())
}

/// The records from `from_ms` to `to_ms`, oldest first, at most `limit`.
pub(super) async fn between(
    client: &impl deadpool_postgres::GenericClient,
    from_ms: i64,
    to_ms: i64,
    limit: u32,
) -> Result<Vec<PassRecord>, StoreError> {
    client
        .query(
            "SELECT body FROM dispatch_journal WHERE at_ms >= $1 AND at_ms <= $2 \
             ORDER BY at_ms, id LIMIT $3",
            &[&from_ms, &to_ms, &i64::from(limit)],
        )
        .await?
        .iter()
        .map(|r| from_json(r.get::<_, &str>(0), "a dispatch journal record"))
        .collect()
}
