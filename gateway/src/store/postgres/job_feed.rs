//! The stored job feed on PostgreSQL ([`crate::store::job_feed`]): `job_history` rows
//! by id, with their job's team. Writers of history rows take [`LOCK_FEED`] first, so
//! ids are in commit order across replicas, and notify [`super::JOBS_CHANNEL`].

use crate::store::StoreError;
use crate::store::codec::history_entry;
use crate::store::job_feed::StoredChange;

/// Takes the feed's transaction advisory lock (held to the commit): see
/// [`crate::store::job_feed`] for why.
pub(super) const LOCK_FEED: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('forge-job-feed', 0))";

/// The changes after position `after`, oldest first, at most `limit`.
pub(super) async fn since(
    client: &tokio_postgres::Client,
    after: i64,
    limit: u32,
) -> Result<Vec<StoredChange>, StoreError> {
    let rows = client
        .query(
            "SELECT h.id, h.job_id, j.team, h.from_state, h.to_state, h.reason, h.at_ms \
             FROM job_history h JOIN jobs j ON j.id = h.job_id \
             WHERE h.id > $1 ORDER BY h.id LIMIT $2",
            &[&after, &i64::from(limit)],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(StoredChange {
                position: r.try_get(0)?,
                job_id: r.try_get(1)?,
                team: r.try_get(2)?,
                entry: history_entry(r.try_get(3)?, r.try_get(4)?, r.try_get(5)?, r.try_get(6)?)?,
            })
        })
        .collect()
}

/// The newest position (0: none yet).
pub(super) async fn head(client: &tokio_postgres::Client) -> Result<i64, StoreError> {
    Ok(client
        .query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM job_history", &[])
        .await?
        .try_get(0)?)
}
