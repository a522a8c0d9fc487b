//! The stored job feed: every state change of every job, as the rows of `job_history`
//! in the order they were committed, read by position (the row's id). On PostgreSQL it
//! is what lets every replica's watchers see every transition, whichever replica made
//! it, in one order (issue 40 §3): each replica tails it (`jobs/feed_tail.rs`) and
//! `Last-Event-ID` names a position any replica knows.
//!
//! **Commit order is id order.** A reader that has seen position `n` asks for the rows
//! after `n`; a row committed later with a smaller id would be skipped for good. So a
//! writer takes the feed's transaction-scoped advisory lock just before it inserts the
//! history row and holds it to its commit: ids are handed out in commit order, and an
//! id not yet visible belongs to the one transaction holding the lock, before which no
//! later id exists. (SQLite's writes are serial anyway.) A rolled-back transaction
//! leaves a hole in the ids, never a reordering.

use super::HistoryEntry;

/// One stored state change.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChange {
    /// Its position in the feed (the history row's id; increasing in commit order).
    pub position: i64,
    /// The job.
    pub job_id: String,
    /// The job's team.
    pub team: String,
    /// The change.
    pub entry: HistoryEntry,
}

/// The most changes one read returns.
pub const MAX_CHANGES_READ: u32 = 1000;
