//! The job feed: every change of a job's state and of a queued job's standing, as it
//! happens, to whoever listens — `GET /v1/jobs/{id}/watch` (`forge submit --follow`,
//! `forge status -w`) and, later, the web console. Fed by the one place each change is
//! made (`Jobs::insert` and `Jobs::transition` for states, the dispatcher's
//! published queue for standings, `Jobs::publish_queue`), so a listener never polls
//! the store.
//!
//! A `tokio::sync::broadcast` channel: publishing never blocks and costs nothing with
//! no listener; a listener that falls behind by more than the channel's capacity is
//! told it lagged and re-reads the job (see `watch.rs`).

use std::sync::Arc;

use serde::Serialize;
use tokio::sync::broadcast;

use super::queue::QueueEntry;
use crate::domain::JobState;

/// Events a listener may fall behind by before it is told it lagged.
const CAPACITY: usize = 1024;

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum JobEvent {
    /// A job was submitted (`from` absent) or changed state.
    #[serde(rename_all = "camelCase")]
    State {
        job_id: String,
        team: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        from: Option<JobState>,
        to: JobState,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        at_ms: i64,
    },
    /// A queued job's place or reason changed (a dispatcher pass).
    #[serde(rename_all = "camelCase")]
    Standing {
        job_id: String,
        team: String,
        queue: QueueEntry,
    },
}

impl JobEvent {
    /// The job it is about.
    pub fn job_id(&self) -> &str {
        match self {
            JobEvent::State { job_id, .. } | JobEvent::Standing { job_id, .. } => job_id,
        }
    }

    /// The team owning the job (listeners filter on it).
    pub fn team(&self) -> &str {
        match self {
            JobEvent::State { team, .. } | JobEvent::Standing { team, .. } => team,
        }
    }
}

/// The broadcast side of the feed.
#[derive(Debug, Clone)]
pub struct JobFeed {
    tx: broadcast::Sender<Arc<JobEvent>>,
}

impl Default for JobFeed {
    fn default() -> Self {
        JobFeed {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl JobFeed {
    /// A new listener: it sees every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<JobEvent>> {
        self.tx.subscribe()
    }

    /// Publishes an event (dropped when nobody listens).
    pub(crate) fn publish(&self, event: JobEvent) {
        let _ = self.tx.send(Arc::new(event));
    }
}
