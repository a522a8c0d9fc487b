//! Acknowledged checkpoints (issue 38, the job's side of preemption): a job process
//! tells the gateway `POST /v1/jobs/{id}/checkpoints {"step": N}` once it has written
//! a checkpoint it can resume from. The store keeps the last one per job, with its
//! time: what a preemption would lose is the work since then, and a resumed run starts
//! from its step (`FORGE_RESUME_STEP`).
//!
//! Only a job that holds GPUs (dispatched, initializing, running) can acknowledge, and
//! steps never go back: acknowledging a step below the last one is refused as stale
//! (a late or duplicated request), the same step again is answered with the record
//! already kept.

use serde::{Deserialize, Serialize};

use crate::domain::JobState;
use crate::store::StoreError;

/// The last acknowledged checkpoint of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// The step the job can resume from.
    pub step: u64,
    /// Unix milliseconds of the acknowledgement.
    pub at_ms: i64,
}

/// What acknowledging a checkpoint did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointOutcome {
    /// Recorded as the job's last checkpoint.
    Recorded(Checkpoint),
    /// The same step was acknowledged before: this is that record.
    Repeated(Checkpoint),
    /// A later step was acknowledged before: nothing changed.
    Stale(Checkpoint),
    /// The job holds no GPUs (queued, or ended): nothing changed.
    NotRunning(JobState),
    /// No such job.
    NotFound,
}

/// The largest step the store keeps (a signed 64-bit column); the API refuses more.
pub const MAX_STEP: u64 = i64::MAX as u64;

/// `step` as stored; the API keeps steps within [`MAX_STEP`], so a larger one is a bug
/// of the caller and refused.
pub fn to_column(step: u64) -> Result<i64, StoreError> {
    i64::try_from(step)
        .map_err(|_| StoreError::Corrupt(format!("checkpoint step {step} exceeds {MAX_STEP}")))
}

/// The states in which a job can acknowledge a checkpoint, as stored.
pub const ACKNOWLEDGING_STATES: &str = "'dispatched', 'initializing', 'running', 'preempting'";

/// The outcome when the conditional write changed nothing, from what the job's row
/// holds (`None`: no such job).
pub fn classify(step: u64, row: Option<(JobState, Option<Checkpoint>)>) -> CheckpointOutcome {
    match row {
        None => CheckpointOutcome::NotFound,
        Some((state, _)) if !state.holds_gpus() => CheckpointOutcome::NotRunning(state),
        Some((_, Some(last))) if last.step == step => CheckpointOutcome::Repeated(last),
        Some((_, Some(last))) => CheckpointOutcome::Stale(last),
        // Holding GPUs without a checkpoint: the write raced a transition; the caller
        // sees the state it raced with on its next attempt.
        Some((state, None)) => CheckpointOutcome::NotRunning(state),
    }
}

/// A stored pair of nullable columns → the checkpoint, if both are set.
pub fn from_columns(step: Option<i64>, at_ms: Option<i64>) -> Option<Checkpoint> {
    Some(Checkpoint {
        step: u64::try_from(step?).ok()?,
        at_ms: at_ms?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_changed_nothing_is_explained_by_the_row() {
        let last = Checkpoint { step: 5, at_ms: 1 };
        assert_eq!(classify(5, None), CheckpointOutcome::NotFound);
        assert_eq!(
            classify(5, Some((JobState::Succeeded, Some(last)))),
            CheckpointOutcome::NotRunning(JobState::Succeeded)
        );
        assert_eq!(
            classify(5, Some((JobState::Running, Some(last)))),
            CheckpointOutcome::Repeated(last)
        );
        assert_eq!(
            classify(3, Some((JobState::Running, Some(last)))),
            CheckpointOutcome::Stale(last)
        );
        assert_eq!(from_columns(Some(-1), Some(1)), None);
        assert_eq!(from_columns(Some(2), None), None);
        assert_eq!(
            from_columns(Some(2), Some(9)),
            Some(Checkpoint { step: 2, at_ms: 9 })
        );
    }
}
