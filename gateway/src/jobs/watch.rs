//! Watching one job: a snapshot, then every change from the job feed — state changes,
//! queue standing — and, while a dispatched job starts, its pending reason (from
//! Kubernetes' events and pod states, which are not on the feed: read every
//! [`PENDING_EVERY`] while it is starting, and sent only when it changes). Ends after
//! the job's terminal state. The HTTP edge serves it as server-sent events
//! (`GET /v1/jobs/{id}/watch`); any other consumer (the web console) uses the same
//! stream.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::error::JobError;
use super::feed::{JobEvent, REPLAY, Resume, SUB_BITS, Sequenced, seq_of_position};
use super::logs::diagnosis::PendingReason;
use super::queue::QueueEntry;
use super::service::Jobs;
use crate::domain::JobState;
use crate::store::JobRecord;

/// How often a starting job's pending reason is re-read.
pub const PENDING_EVERY: Duration = Duration::from_secs(2);

/// What a watcher is told.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum WatchEvent {
    /// The job as it is now (first, and again after the watcher fell behind).
    #[serde(rename_all = "camelCase")]
    Snapshot {
        job: Box<JobRecord>,
        #[serde(skip_serializing_if = "Option::is_none")]
        queue: Option<QueueEntry>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pending: Option<PendingReason>,
    },
    /// A change from the feed (with its sequence number, the stream's event id).
    Change(#[serde(serialize_with = "bare_event")] Arc<Sequenced>),
    /// Why the dispatched job is not running yet (when it changes).
    Pending(PendingReason),
    /// The watcher fell behind and missed changes: re-read what it shows.
    Resync,
}

impl WatchEvent {
    /// The event's name on the wire (`snapshot`, `state`, `standing`, `pending`).
    pub fn name(&self) -> &'static str {
        match self {
            WatchEvent::Snapshot { .. } => "snapshot",
            WatchEvent::Change(e) => match e.event {
                JobEvent::State { .. } => "state",
                JobEvent::Standing { .. } => "standing",
            },
            WatchEvent::Pending(_) => "pending",
            WatchEvent::Resync => "resync",
        }
    }
}

/// A change is sent as the bare event (its number is the stream's event id).
fn bare_event<S: serde::Serializer>(e: &Arc<Sequenced>, s: S) -> Result<S::Ok, S::Error> {
    e.event.serialize(s)
}

impl WatchEvent {
    /// The feed's sequence number of a change (a resuming listener names the last one).
    pub fn id(&self) -> Option<u64> {
        match self {
            WatchEvent::Change(e) => Some(e.seq),
            _ => None,
        }
    }
}

impl Jobs {
    /// The events of `job` (already checked visible to the caller) until it ends.
    pub fn watch(&self, job: JobRecord) -> impl Stream<Item = WatchEvent> + Send + 'static + use<> {
        // Subscribed before the snapshot is read: no change can fall between them.
        let feed = self.core.feed.subscribe();
        let (tx, rx) = mpsc::channel(32);
        let jobs = self.clone();
        tokio::spawn(async move {
            if let Err(e) = jobs.run_watch(job, feed, &tx).await {
                tracing::warn!("job watch ended: {e}");
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
    }

    /// Every change of the jobs of `team` (every team's for `None`, admins) from now
    /// on — or, resuming, from after the feed's event `after` (what was missed first;
    /// `resync` when that is no longer known) — until the receiver is dropped. On a
    /// shared feed a resume this replica's recent events cannot serve (the listener was
    /// on another replica, or away long) reads the stored changes instead.
    pub fn watch_team(
        &self,
        team: Option<String>,
        after: Option<u64>,
    ) -> impl Stream<Item = WatchEvent> + Send + 'static + use<> {
        let jobs = self.clone();
        let mine = {
            let team = team.clone();
            move |e: &Sequenced| team.as_deref().is_none_or(|t| t == e.team())
        };
        futures::stream::once(async move { jobs.resume_team(after).await }).flat_map(
            move |(first, feed, replayed_up_to)| {
                let mine = mine.clone();
                let first: Vec<WatchEvent> = first
                    .into_iter()
                    .filter(|e| match e {
                        WatchEvent::Change(c) => mine(c),
                        _ => true,
                    })
                    .collect();
                // The replay and the receiver were taken together: an event in both
                // (a stored change the tail published after the read) is skipped.
                let live = futures::stream::unfold(feed, move |mut feed| {
                    let mine = mine.clone();
                    async move {
                        loop {
                            match feed.recv().await {
                                Ok(e) if e.seq <= replayed_up_to => {}
                                Ok(e) if mine(&e) => {
                                    return Some((WatchEvent::Change(e), feed));
                                }
                                Ok(_) => {}
                                Err(RecvError::Lagged(_)) => {
                                    return Some((WatchEvent::Resync, feed));
                                }
                                Err(RecvError::Closed) => return None,
                            }
                        }
                    }
                });
                futures::stream::iter(first).chain(live)
            },
        )
    }

    /// Where a team watch starts: the events it missed (or `resync`), the receiver of
    /// later ones, and the newest number replayed (later duplicates are skipped).
    async fn resume_team(
        &self,
        after: Option<u64>,
    ) -> (Vec<WatchEvent>, broadcast::Receiver<Arc<Sequenced>>, u64) {
        let feed = &self.core.feed;
        let Some(last) = after else {
            return (Vec::new(), feed.subscribe(), 0);
        };
        match feed.resume(last) {
            (Resume::Missed(missed), rx) => {
                (missed.into_iter().map(WatchEvent::Change).collect(), rx, 0)
            }
            (Resume::Gap, rx) if feed.is_shared() => match self.stored_since(last).await {
                Some((missed, up_to)) => (missed, rx, up_to),
                None => (vec![WatchEvent::Resync], rx, 0),
            },
            (Resume::Gap, rx) => (vec![WatchEvent::Resync], rx, 0),
        }
    }

    /// A shared feed's changes after event `last`, read from the store, and the number
    /// of the newest; `None` when they cannot be (more than [`REPLAY`], a number the
    /// store never gave, or the store failed).
    async fn stored_since(&self, last: u64) -> Option<(Vec<WatchEvent>, u64)> {
        let store = &self.core.store;
        let position = i64::try_from(last >> SUB_BITS).ok()?;
        let head = store.changes_head().await.ok()?;
        if position > head {
            return None;
        }
        let limit = u32::try_from(REPLAY + 1).unwrap_or(u32::MAX);
        let changes = store.changes_since(position, limit).await.ok()?;
        if changes.len() > REPLAY {
            return None;
        }
        let up_to = replayed_up_to(last, &changes);
        let events = changes
            .into_iter()
            .map(|c| WatchEvent::Change(Arc::new(Sequenced::stored(c))))
            .collect();
        Some((events, up_to))
    }

    async fn snapshot(&self, id: &str) -> Result<(JobRecord, WatchEvent), JobError> {
        let job = self
            .core
            .store
            .get(id)
            .await?
            .ok_or_else(|| JobError::NotFound(id.to_string()))?;
        let queue = self.core.queue.entry(&job.id);
        let pending = self.pending_of(&job).await;
        let event = WatchEvent::Snapshot {
            job: Box::new(job.clone()),
            queue,
            pending,
        };
        Ok((job, event))
    }

    async fn pending_of(&self, job: &JobRecord) -> Option<PendingReason> {
        if !matches!(job.state, JobState::Dispatched | JobState::Initializing) {
            return None;
        }
        match self.logs.diagnose(job).await {
            Ok(d) => d.pending,
            Err(e) => {
                tracing::debug!(job = %job.id, "pending diagnosis: {e}");
                None
            }
        }
    }

    async fn run_watch(
        &self,
        job: JobRecord,
        mut feed: tokio::sync::broadcast::Receiver<Arc<Sequenced>>,
        tx: &mpsc::Sender<WatchEvent>,
    ) -> Result<(), JobError> {
        let (mut job, first) = self.snapshot(&job.id).await?;
        let mut pending = match &first {
            WatchEvent::Snapshot { pending, .. } => pending.clone(),
            _ => None,
        };
        if tx.send(first).await.is_err() {
            return Ok(());
        }
        let mut tick = tokio::time::interval(PENDING_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !job.state.is_terminal() {
            let event = tokio::select! {
                () = tx.closed() => return Ok(()),
                received = feed.recv() => match received {
                    Ok(e) if e.job_id() == job.id => {
                        if let JobEvent::State { to, .. } = &e.event {
                            // One read per change (the RayJob name arrives with
                            // `dispatched`), never a polling loop.
                            job = match self.core.store.get(&job.id).await? {
                                Some(j) => j,
                                None => return Ok(()),
                            };
                            job.state = *to;
                        }
                        WatchEvent::Change(e.clone())
                    }
                    Ok(_) => continue,
                    Err(RecvError::Lagged(_)) => {
                        let (now, snap) = self.snapshot(&job.id).await?;
                        job = now;
                        snap
                    }
                    Err(RecvError::Closed) => return Ok(()),
                },
                _ = tick.tick() => {
                    let now = self.pending_of(&job).await;
                    if now.is_none() || now == pending {
                        continue;
                    }
                    pending = now.clone();
                    match now {
                        Some(p) => WatchEvent::Pending(p),
                        None => continue,
                    }
                }
            };
            if tx.send(event).await.is_err() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// The newest number a resume read from the store covers: its newest change's, or —
/// none being newer — the number the listener named. This replica's tail may not have
/// published that one yet (another replica did); when it does, it is skipped, not
/// sent a second time.
fn replayed_up_to(last: u64, changes: &[crate::store::StoredChange]) -> u64 {
    changes
        .last()
        .map_or(last, |c| seq_of_position(c.position).max(last))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{HistoryEntry, StoredChange};

    fn change(position: i64) -> StoredChange {
        StoredChange {
            position,
            job_id: "j".into(),
            team: "t".into(),
            entry: HistoryEntry {
                from: None,
                to: JobState::Queued,
                reason: None,
                at_ms: 0,
            },
        }
    }

    #[test]
    fn a_resume_covers_what_it_read_or_at_least_what_the_listener_saw() {
        let seen = seq_of_position(7);
        // Nothing newer in the store: the change the listener saw (published by another
        // replica) is still covered when this replica's tail publishes it.
        assert_eq!(replayed_up_to(seen, &[]), seen);
        assert_eq!(replayed_up_to(seen + 3, &[]), seen + 3);
        // Newer changes: up to the newest read.
        assert_eq!(
            replayed_up_to(seen, &[change(8), change(9)]),
            seq_of_position(9)
        );
    }
}
