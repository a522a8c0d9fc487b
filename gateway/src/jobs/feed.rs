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
//! Every event carries a sequence number and the last [`REPLAY`] events are kept, so a
//! listener that reconnects with the last number it saw (`Last-Event-ID`) gets what it
//! missed — or, when that is no longer kept, is told to re-read ([`Resume::Gap`]).
//!
//! Two kinds of feed, by who writes the store:
//! - **local** (SQLite: this process is the only writer): state changes are published
//!   here as they are made; numbers start at the process's start time in microseconds,
//!   so numbers from before a restart are older than any of this process;
//! - **shared** (PostgreSQL: replicas): a state change is published when it is read
//!   back from the store's feed (`store/job_feed.rs`, tailed by `feed_tail.rs`), so
//!   every replica publishes every replica's changes, in the store's commit order. Its
//!   number is the stored position shifted left by [`SUB_BITS`], the same on every
//!   replica; a standing (computed by each replica) takes the last position's number
//!   plus a count. A listener resuming on another replica names a position that one
//!   knows, or reads it from the store (`watch.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::broadcast;

use super::queue::QueueEntry;
use crate::domain::JobState;
use crate::store::StoredChange;

/// Events a listener may fall behind by before it is told it lagged.
const CAPACITY: usize = 1024;
/// Events kept for listeners that reconnect.
pub const REPLAY: usize = 1024;
/// A shared feed's numbers: the stored position `<< SUB_BITS`, plus the standings
/// published since it.
pub const SUB_BITS: u32 = 20;

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

impl Sequenced {
    /// A stored change as a shared feed numbers it.
    pub fn stored(change: StoredChange) -> Sequenced {
        let StoredChange {
            position,
            job_id,
            team,
            entry,
        } = change;
        Sequenced {
            seq: seq_of_position(position),
            event: JobEvent::State {
                job_id,
                team,
                from: entry.from,
                to: entry.to,
                reason: entry.reason,
                at_ms: entry.at_ms,
            },
        }
    }
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
    /// Shared feeds: the newest stored position published.
    position: i64,
}

#[derive(Debug)]
pub(crate) struct Inner {
    tx: broadcast::Sender<Arc<Sequenced>>,
    log: Mutex<Log>,
    shared: bool,
}

/// The broadcast side of the feed.
#[derive(Debug, Clone)]
pub struct JobFeed {
    inner: Arc<Inner>,
}

impl Default for JobFeed {
    /// A local feed.
    fn default() -> Self {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2));
        JobFeed::with(start, false)
    }
}

/// The number of stored position `position`.
pub fn seq_of_position(position: i64) -> u64 {
    u64::try_from(position).unwrap_or(0) << SUB_BITS
}

impl JobFeed {
    fn with(next: u64, shared: bool) -> Self {
        JobFeed {
            inner: Arc::new(Inner {
                tx: broadcast::channel(CAPACITY).0,
                log: Mutex::new(Log {
                    next,
                    recent: VecDeque::with_capacity(REPLAY),
                    position: 0,
                }),
                shared,
            }),
        }
    }

    /// A shared feed: its state changes come from [`JobFeed::publish_stored`].
    pub fn shared() -> Self {
        JobFeed::with(0, true)
    }

    /// Whether this feed is fed from the store (replicas).
    pub fn is_shared(&self) -> bool {
        self.inner.shared
    }

    /// A handle that does not keep the feed alive (its tail stops when it is gone).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<Inner> {
        Arc::downgrade(&self.inner)
    }

    /// The feed behind a handle from [`JobFeed::downgrade`], while it exists.
    pub(crate) fn upgrade(weak: &std::sync::Weak<Inner>) -> Option<JobFeed> {
        weak.upgrade().map(|inner| JobFeed { inner })
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.inner.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shared feeds: the newest stored position published (0 before the first).
    pub fn position(&self) -> i64 {
        self.log().position
    }

    /// Shared feeds: starts at stored position `position` (the changes up to it are
    /// history, not news). Ignored once a change was published.
    pub fn start_at(&self, position: i64) {
        let mut log = self.log();
        if log.position == 0 && log.recent.is_empty() {
            log.position = position;
            log.next = seq_of_position(position) + 1;
        }
    }

    /// Shared feeds: publishes a change read from the store (ignored when its position
    /// was published already).
    pub(crate) fn publish_stored(&self, change: StoredChange) {
        let mut log = self.log();
        if change.position <= log.position {
            return;
        }
        log.position = change.position;
        let stored = Sequenced::stored(change);
        log.next = stored.seq;
        let event = stored.event;
        self.push(&mut log, event);
    }

    /// Appends `event` with the log's next number and sends it (under the lock:
    /// listeners see events in sequence order).
    fn push(&self, log: &mut Log, event: JobEvent) {
        let item = Arc::new(Sequenced {
            seq: log.next,
            event,
        });
        log.next += 1;
        if log.recent.len() == REPLAY {
            log.recent.pop_front();
        }
        log.recent.push_back(item.clone());
        let _ = self.inner.tx.send(item);
    }

    /// A new listener: it sees every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Sequenced>> {
        self.inner.tx.subscribe()
    }

    /// A listener resuming after event `last`: what it missed, and a receiver of every
    /// later event (taken together, so nothing falls between them).
    pub fn resume(&self, last: u64) -> (Resume, broadcast::Receiver<Arc<Sequenced>>) {
        let log = self.log();
        let rx = self.inner.tx.subscribe();
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

    /// Publishes an event (dropped when nobody listens, but kept for replay). A shared
    /// feed takes only standings here: its state changes come from the store.
    pub(crate) fn publish(&self, event: JobEvent) {
        if self.inner.shared && matches!(event, JobEvent::State { .. }) {
            return;
        }
        let mut log = self.log();
        if self.inner.shared && log.next + 1 >= seq_of_position(log.position + 1) {
            // 2^20 standings since the last change: the rest wait for the next one.
            return;
        }
        self.push(&mut log, event);
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

    fn stored(position: i64, job: &str) -> StoredChange {
        StoredChange {
            position,
            job_id: job.into(),
            team: "t".into(),
            entry: crate::store::HistoryEntry {
                from: None,
                to: JobState::Queued,
                reason: None,
                at_ms: 0,
            },
        }
    }

    fn standing(job: &str) -> JobEvent {
        JobEvent::Standing {
            job_id: job.into(),
            team: "t".into(),
            queue: QueueEntry {
                team: "t".into(),
                series: "h100".into(),
                gpus: 8,
                position: 1,
                code: "capacity.no-room".into(),
                reason: "no room".into(),
                standing: None,
            },
        }
    }

    #[test]
    fn a_shared_feed_numbers_changes_by_their_stored_position() {
        let feed = JobFeed::shared();
        feed.start_at(7);
        let mut rx = feed.subscribe();
        // A state change made here is not news until it is read back from the store.
        feed.publish(event(1));
        assert!(rx.try_recv().is_err());
        feed.publish_stored(stored(9, "a"));
        feed.publish(standing("a"));
        feed.publish(standing("a"));
        feed.publish_stored(stored(9, "a")); // read twice: published once
        feed.publish_stored(stored(12, "b"));
        let seqs: Vec<(u64, String)> = std::iter::from_fn(|| rx.try_recv().ok())
            .map(|e| (e.seq, e.job_id().to_string()))
            .collect();
        assert_eq!(
            seqs,
            [
                (9 << SUB_BITS, "a".into()),
                ((9 << SUB_BITS) + 1, "a".into()),
                ((9 << SUB_BITS) + 2, "a".into()),
                (12 << SUB_BITS, "b".into()),
            ]
        );
        assert_eq!(feed.position(), 12);
        // A resume after the first change replays the rest; after a number this replica
        // has not reached, it cannot say (the watch then reads the store).
        let Resume::Missed(missed) = feed.resume(9 << SUB_BITS).0 else {
            panic!("expected a replay")
        };
        assert_eq!(missed.len(), 3);
        assert!(matches!(feed.resume(13 << SUB_BITS), (Resume::Gap, _)));
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
