//! Job states and the transitions between them: the one state machine every module
//! (store, dispatcher, lifecycle, API) follows.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    /// Admitted by validation, waiting in the gateway queue (policy hold or no room).
    Queued,
    /// Its RayJob is being / has been created.
    Dispatched,
    /// The RayJob's cluster is starting.
    Initializing,
    /// The Ray job runs.
    Running,
    /// Preempted for a higher-priority job: it was told to checkpoint and exit (SIGTERM)
    /// and holds its GPUs until it exits, acknowledges a checkpoint or its grace ends;
    /// then it is queued again (or ends, if it finished meanwhile).
    Preempting,
    /// Finished successfully.
    Succeeded,
    /// Finished unsuccessfully (application, submission or deadline failure).
    Failed,
    /// Cancelled by a user.
    Cancelled,
    /// Exceeded a deadline.
    TimedOut,
    /// Refused by policy (recorded for audit; never dispatched).
    Rejected,
}

impl JobState {
    /// Every state, in life order.
    pub const ALL: [JobState; 10] = [
        Self::Queued,
        Self::Dispatched,
        Self::Initializing,
        Self::Running,
        Self::Preempting,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
        Self::TimedOut,
        Self::Rejected,
    ];

    /// The state as stored and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Dispatched => "dispatched",
            Self::Initializing => "initializing",
            Self::Running => "running",
            Self::Preempting => "preempting",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::TimedOut => "timed-out",
            Self::Rejected => "rejected",
        }
    }

    /// Whether the job can no longer change.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Cancelled | Self::TimedOut | Self::Rejected
        )
    }

    /// Whether the job holds (or is about to hold) cluster GPUs.
    pub fn holds_gpus(self) -> bool {
        matches!(
            self,
            Self::Dispatched | Self::Initializing | Self::Running | Self::Preempting
        )
    }

    /// Whether `self → to` is a legal transition.
    ///
    /// queued → dispatched | cancelled | rejected | failed;
    /// dispatched → queued (RayJob creation failed, retry later) | initializing |
    /// running | any end; initializing → running | any end but rejected;
    /// running → preempting | any end but rejected; preempting → queued (released,
    /// to resume later) | any end but rejected; terminal states never change.
    pub fn can_transition_to(self, to: JobState) -> bool {
        use JobState::*;
        let ended = matches!(to, Succeeded | Failed | Cancelled | TimedOut);
        match self {
            Queued => matches!(to, Dispatched | Cancelled | Rejected | Failed),
            Dispatched => matches!(to, Queued | Initializing | Running) || ended,
            Initializing => to == Running || ended,
            Running => to == Preempting || ended,
            Preempting => to == Queued || ended,
            Succeeded | Failed | Cancelled | TimedOut | Rejected => false,
        }
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown state name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown job state `{0}`")]
pub struct UnknownState(pub String);

impl FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in JobState::ALL {
            assert_eq!(s.as_str().parse::<JobState>(), Ok(s));
            assert_eq!(serde_json::to_value(s).expect("json"), s.as_str());
        }
        assert!("done".parse::<JobState>().is_err());
    }

    #[test]
    fn terminal_states_never_change() {
        for from in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for to in JobState::ALL {
                assert!(!from.can_transition_to(to), "{from} -> {to}");
            }
        }
        assert!(JobState::Queued.can_transition_to(JobState::Dispatched));
        assert!(!JobState::Queued.can_transition_to(JobState::Running));
        assert!(!JobState::Running.can_transition_to(JobState::Queued));
        assert!(JobState::Running.can_transition_to(JobState::Preempting));
        assert!(JobState::Preempting.can_transition_to(JobState::Queued));
        assert!(!JobState::Preempting.can_transition_to(JobState::Running));
        assert!(!JobState::Queued.can_transition_to(JobState::Preempting));
        assert!(JobState::Preempting.holds_gpus());
        assert!(JobState::Dispatched.can_transition_to(JobState::Queued));
    }
}
