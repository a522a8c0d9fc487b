//! The queue board of a follower (the dispatch service's publishing, without a pass). The leader's dispatcher publishes the board (queue
//! standings, the usage ledger admission reads) after every pass; a follower runs no
//! dispatcher, so this loop keeps its board current from the shared store instead: the
//! ledger exactly as the dispatcher counts it (active jobs as running, queued ones as
//! queued), and each queued job's position in its series with its stored reason.
//! It runs every [`REFRESH`] and whenever the local queue is woken (a submission here).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Dispatcher;
use super::demand::ledger_of;
use crate::jobs::error::JobError;
use crate::jobs::queue::{QueueEntry, Standings};

/// How often a follower refreshes its board.
pub const REFRESH: Duration = Duration::from_secs(1);

impl Dispatcher {
    /// Rebuilds the board from the store.
    async fn refresh_board(&self) -> Result<(), JobError> {
        // Only the records that changed are read (as the dispatcher does).
        let unfinished = self.records.unfinished(self.core.store.as_ref()).await?;
        let (queued, active) = (unfinished.queued, unfinished.active);
        let ledger = ledger_of(&active, &queued, &self.core.config);
        let mut positions: BTreeMap<String, u32> = BTreeMap::new();
        let mut entries = Standings::default();
        for job in &queued {
            let series = job
                .queue_series
                .clone()
                .unwrap_or_else(|| "unplaced".to_string());
            let p = positions.entry(series.clone()).or_default();
            *p += 1;
            let reason = job.reason.clone().unwrap_or_default();
            let code = reason
                .split_once(": ")
                .map_or("queued", |(code, _)| code)
                .to_string();
            entries.insert(
                job.id.clone(),
                QueueEntry {
                    team: job.team.clone(),
                    series,
                    position: *p,
                    code,
                    reason,
                    standing: None,
                },
            );
        }
        self.core.queue.publish(entries);
        self.admission.usage().publish(ledger);
        Ok(())
    }
}

/// Refreshes the board until the task is aborted.
pub fn spawn(jobs: Dispatcher) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Err(e) = jobs.refresh_board().await {
                tracing::warn!("refreshing the queue board from the store: {e}");
            }
            tokio::select! {
                () = jobs.core.queue.woken() => {}
                () = tokio::time::sleep(REFRESH) => {}
            }
        }
    })
}
