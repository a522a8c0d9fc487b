//! The stored job feed on SQLite ([`crate::store::job_feed`]): `job_history` rows by
//! id, with their job's team. One process writes, serially: ids are in commit order.

use rusqlite::{Connection, params};

use crate::store::StoreError;
use crate::store::codec::history_entry;
use crate::store::job_feed::StoredChange;

/// The changes after position `after`, oldest first, at most `limit`.
pub(super) fn since(
    conn: &Connection,
    after: i64,
    limit: u32,
) -> Result<Vec<StoredChange>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT h.id, h.job_id, j.team, h.from_state, h.to_state, h.reason, h.at_ms \
         FROM job_history h JOIN jobs j ON j.id = h.job_id \
         WHERE h.id > ?1 ORDER BY h.id LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![after, limit], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Option<String>>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, i64>(6)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (position, job_id, team, from, to, reason, at_ms) = row?;
        out.push(StoredChange {
            position,
            job_id,
            team,
            entry: history_entry(from.as_deref(), &to, reason, at_ms)?,
        });
    }
    Ok(out)
}

/// The newest position (0: none yet).
pub(super) fn head(conn: &Connection) -> Result<i64, StoreError> {
    Ok(
        conn.query_row("SELECT COALESCE(MAX(id), 0) FROM job_history", [], |r| {
            r.get(0)
        })?,
    )
}
