//! What retention (`crate::retention`) asks of the database ([`RetentionStore`]):
//! forget rejected submissions, find ended jobs whose archived logs are due, forget
//! unused capsule ownerships, and claim unowned capsule bytes for deletion — each
//! bounded per call, so one sweep step is one short transaction.
//!
//! A capsule is never claimed while a team owns it or a job that has not ended uses
//! it, and an ownership is never forgotten while such a job uses the capsule: the
//! claim and the check are one step, serialized with [`super::CapsuleStore::grant_capsule`]
//! on the same digest (SQLite: one `IMMEDIATE` transaction; PostgreSQL: a transaction
//! advisory lock on the digest).

use async_trait::async_trait;

use super::StoreError;
use crate::domain::Digest;

/// The states of a job that has not ended, as an SQL list (a test holds it to
/// [`crate::domain::JobState::is_terminal`]).
pub const ACTIVE_STATES_SQL: &str =
    "('queued', 'dispatched', 'initializing', 'running', 'preempting')";
/// The ended states whose jobs ran (or were meant to) and so may have archived logs.
pub const ENDED_STATES_SQL: &str = "('succeeded', 'failed', 'cancelled', 'timed-out')";

/// Retention's queries.
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Deletes up to `limit` rejected submissions (with their history and decisions)
    /// recorded before `before_ms`, oldest first; returns how many.
    async fn purge_rejected(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError>;
    /// Up to `limit` jobs that ended (not rejected) before `before_ms` and whose
    /// archived logs are not deleted yet, oldest first: (id, when it ended in Unix ms).
    async fn logs_due(&self, before_ms: i64, limit: u32) -> Result<Vec<(String, i64)>, StoreError>;
    /// Records that the archived logs of `job_id` were deleted at `at_ms`.
    async fn logs_deleted(&self, job_id: &str, at_ms: i64) -> Result<(), StoreError>;
    /// When the archived logs of `job_id` were deleted, if they were.
    async fn logs_deleted_at(&self, job_id: &str) -> Result<Option<i64>, StoreError>;
    /// Forgets up to `limit` capsule ownerships last used before `before_ms`, except
    /// those of capsules a job that has not ended uses; returns how many.
    async fn expire_capsule_owners(&self, before_ms: i64, limit: u32) -> Result<u64, StoreError>;
    /// Claims the bytes of `digest` for deletion (marks it `deleting` at `at_ms`) if no
    /// team owns it and no job that has not ended uses it, in one step with the check;
    /// returns whether it was claimed.
    async fn claim_capsule_deletion(&self, digest: &Digest, at_ms: i64)
    -> Result<bool, StoreError>;
    /// Records that the claimed bytes of `digest` are deleted.
    async fn capsule_deleted(&self, digest: &Digest, at_ms: i64) -> Result<(), StoreError>;
    /// Up to `limit` deletions still `deleting` since before `before_ms` (a sweeper that
    /// stopped between its claim and its delete).
    async fn stale_capsule_deletions(
        &self,
        before_ms: i64,
        limit: u32,
    ) -> Result<Vec<Digest>, StoreError>;
    /// Forgets deletions finished before `before_ms`; returns how many.
    async fn prune_capsule_deletions(&self, before_ms: i64) -> Result<u64, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::JobState;

    #[test]
    fn the_state_lists_match_the_state_machine() {
        for s in JobState::ALL {
            let quoted = format!("'{}'", s.as_str());
            assert_eq!(
                ACTIVE_STATES_SQL.contains(&quoted),
                !s.is_terminal(),
                "{s:?} in the active list"
            );
            assert_eq!(
                ENDED_STATES_SQL.contains(&quoted),
                s.is_terminal() && s != JobState::Rejected,
                "{s:?} in the ended list"
            );
        }
    }
}
