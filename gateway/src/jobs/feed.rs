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
//!
//! Every event carries a sequence number (increasing; it starts at the process's start
//! time in microseconds, so numbers from before a restart are older than any of this
//! process) and the last [`REPLAY`] events are kept, so a listener that reconnects with
//! the last number it saw (`Last-Event-ID`) gets what it missed — or, when that is no
//! longer kept, is told to re-read ([`Resume::Gap`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

use super::queue::QueueEntry;
use crate::domain::JobState;

/// Events a listener may fall behind by before it is told it lagged.
const CAPACITY: usize = 1024;
/// Events kept for listeners that reconnect.
pub const REPLAY: usize = 1024;

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

/// An event with its sequence number.
#[derive(Debug, Clone, PartialEq)]
pub struct Sequenced {
    pub seq: u64,
    pub event: JobEvent,
}

impl std::ops::Deref for Sequenced {
    type Target = JobEvent;
    fn deref(&self) -> &JobEvent {
        &self.event
    }
}

/// What a reconnecting listener missed.
#[derive(Debug)]
pub enum Resume {
    /// These events, in order (possibly none).
    Missed(Vec<Arc<Sequenced>>),
    /// More than is kept (or from before a restart): re-read everything.
    Gap,
}

#[derive(Debug)]
struct Log {
    next: u64,
    recent: VecDeque<Arc<Sequenced>>,
}

/// The broadcast side of the feed.
#[derive(Debug, Clone)]
pub struct JobFeed {
    tx: broadcast::Sender<Arc<Sequenced>>,
    log: Arc<Mutex<Log>>,
}

impl Default for JobFeed {
    fn default() -> Self {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
        JobFeed {
            tx: broadcast::channel(CAPACITY).0,
            log: Arc::new(Mutex::new(Log {
                next: start,
                recent: VecDeque::with_capacity(REPLAY),
            })),
        }
    }
}

impl JobFeed {
    /// A new listener: it sees every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Sequenced>> {
        self.tx.subscribe()
    }

    /// A listener resuming after event `last`: what it missed, and a receiver of every
    /// later event (taken together, so nothing falls between them).
    pub fn resume(&self, last: u64) -> (Resume, broadcast::Receiver<Arc<Sequenced>>) {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.tx.subscribe();
        let oldest = log.recent.front().map_or(log.next, |e| e.seq);
        let resume = if last >= log.next || last.saturating_add(1) < oldest {
            Resume::Gap
        } else {
            Resume::Missed(
                log.recent
                    .iter()
                    .filter(|e| e.seq > last)
                    .cloned()
                    .collect(),
            )
        };
        (resume, rx)
    }

    /// Publishes an event (dropped when nobody listens, but kept for replay).
    pub(crate) fn publish(&self, event: JobEvent) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let item = Arc::new(Sequenced {
            seq: log.next,
            event,
        });
        log.next += 1;
        if log.recent.len() == REPLAY {
            log.recent.pop_front();
        }
        log.recent.push_back(item.clone());
        // Sent under the lock: listeners see events in sequence order.
        let _ = self.tx.send(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u32) -> JobEvent {
        JobEvent::State {
            job_id: format!("j{n}"),
            team: "t".into(),
            from: None,
            to: JobState::Queued,
            reason: None,
            at_ms: 0,
        }
    }

    #[test]
    fn a_listener_resumes_after_the_last_event_it_saw() {
        let feed = JobFeed::default();
        let mut rx = feed.subscribe();
        feed.publish(event(1));
        let first = rx.try_recv().expect("first");
        feed.publish(event(2));
        feed.publish(event(3));
        let (resume, mut later) = feed.resume(first.seq);
        let Resume::Missed(missed) = resume else {
            panic!("expected a replay")
        };
        let ids: Vec<_> = missed.iter().map(|e| e.job_id().to_string()).collect();
        assert_eq!(ids, ["j2", "j3"]);
        assert_eq!(missed[0].seq, first.seq + 1);
        feed.publish(event(4));
        assert_eq!(later.try_recv().expect("live").job_id(), "j4");
        // Nothing missed when it saw the newest.
        let newest = missed[1].seq + 1;
        assert!(matches!(feed.resume(newest), (Resume::Missed(m), _) if m.is_empty()));
    }

    #[test]
    fn too_old_or_unknown_ids_mean_re_read() {
        let feed = JobFeed::default();
        let mut rx = feed.subscribe();
        feed.publish(event(0));
        let first = rx.try_recv().expect("first").seq;
        for n in 1..=u32::try_from(REPLAY).expect("small") + 1 {
            feed.publish(event(n));
        }
        assert!(matches!(feed.resume(first), (Resume::Gap, _)));
        assert!(matches!(feed.resume(0), (Resume::Gap, _)));
        assert!(matches!(feed.resume(u64::MAX), (Resume::Gap, _)));
    }
}
