//! Playground states and reclaim reasons: the vocabulary the playground store, its
//! TTL controller and the API share. A playground is `pending` until its server
//! answers, `ready` while it serves, and ends `expired` (reclaimed or deleted, the
//! reason says why) or `failed` (its pod could not run).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a playground is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlaygroundState {
    /// Admitted; its pod is scheduling, pulling or loading the model.
    Pending,
    /// The server lists the model and answers through the gateway.
    Ready,
    /// Ended: TTL, idle TTL, deleted by its team or reclaimed by an admin.
    Expired,
    /// Ended: the pod failed or could not be created.
    Failed,
}

impl PlaygroundState {
    /// Every state, in life order.
    pub const ALL: [PlaygroundState; 4] = [Self::Pending, Self::Ready, Self::Expired, Self::Failed];

    /// The state as stored and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Ready => "ready",
            Self::Expired => "expired",
            Self::Failed => "failed",
        }
    }

    /// Whether the playground has ended (its pod is gone or going).
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Expired | Self::Failed)
    }
}

impl fmt::Display for PlaygroundState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored state string that is not a [`PlaygroundState`].
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown playground state `{0}`")]
pub struct UnknownPlaygroundState(pub String);

impl FromStr for PlaygroundState {
    type Err = UnknownPlaygroundState;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownPlaygroundState(s.to_owned()))
    }
}

/// Why a playground ended (recorded with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndReason {
    /// The hard TTL ran out.
    TtlExpired,
    /// No request was proxied for its idle TTL.
    Idle,
    /// Deleted by its own team.
    Deleted,
    /// Deleted by an admin of another team.
    ReclaimedByAdmin,
    /// The pod failed, could not be created, or vanished.
    PodFailed,
}

impl EndReason {
    /// The reason as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TtlExpired => "ttl-expired",
            Self::Idle => "idle",
            Self::Deleted => "deleted",
            Self::ReclaimedByAdmin => "reclaimed-by-admin",
            Self::PodFailed => "pod-failed",
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_know_their_end() {
        for st in PlaygroundState::ALL {
            assert_eq!(st.as_str().parse::<PlaygroundState>().expect("parse"), st);
        }
        assert!("running".parse::<PlaygroundState>().is_err());
        assert!(PlaygroundState::Expired.is_terminal() && PlaygroundState::Failed.is_terminal());
        assert!(!PlaygroundState::Ready.is_terminal());
        assert_eq!(EndReason::ReclaimedByAdmin.as_str(), "reclaimed-by-admin");
        assert_eq!(
            serde_json::to_value(EndReason::TtlExpired).expect("json"),
            "ttl-expired"
        );
    }
}
