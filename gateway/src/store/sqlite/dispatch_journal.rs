//! The dispatch journal on SQLite ([`crate::store::dispatch_journal`]): one row per
//! recorded pass, its record as JSON.

use rusqlite::{Connection, params};

use crate::store::StoreError;
use crate::store::codec::{from_json, json_text};
use crate::store::dispatch_journal::PassRecord;

/// Appends `p` and forgets the records before `keep_since_ms`.
pub(super) fn append(
    conn: &Connection,
    p: &PassRecord,
    keep_since_ms: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM dispatch_journal WHERE at_ms < ?1")?
        .execute(params![keep_since_ms])?;
    conn.prepare_cached("INSERT INTO dispatch_journal (at_ms, body) VALUES (?1, ?2)")?
        .execute(params![p.at_ms, json_text(p)?])?;
    Ok(())
}

/// The records from `from_ms` to `to_ms`, oldest first, at most `limit`.
pub(super) fn between(
    conn: &Connection,
    from_ms: i64,
    to_ms: i64,
    limit: u32,
) -> Result<Vec<PassRecord>, StoreError> {
    let bodies = conn
        .prepare_cached(
            "SELECT body FROM dispatch_journal WHERE at_ms >= ?1 AND at_ms <= ?2 \
             ORDER BY at_ms, id LIMIT ?3",
        )?
        .query_map(params![from_ms, to_ms, limit], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    bodies
        .iter()
        .map(|b| from_json(b, "a dispatch journal record"))
        .collect()
}
