//! The queue board of a follower (the dispatch service's publishing, without a pass).
//! The leader's dispatcher publishes the board (queue standings, the usage ledger
//! admission reads) after every pass; a follower runs no dispatcher, so this loop
//! keeps its board current from the shared store instead: the ledger exactly as the
//! dispatcher counts it (active jobs as running, queued ones as queued), and each
//! queued job's standing in its series in the leader's fair order — priority, then
//! its team's use over its weight (the usage ledger's last write), then submission —
//! with its stored reason, so a member reads the same position and sentence from any
//! replica. It runs every [`REFRESH`] and whenever the local queue is woken (a
//! submission here).

use std::sync::Arc;
use std::time::Duration;

use super::Dispatcher;
use super::demand::ledger_of;
use super::fair_order::{Class, FairOrder, series_of};
use super::fair_share::Usage;
use super::standing::Standing;
use crate::jobs::error::JobError;
use crate::jobs::fair_shares::{Entitlement, for_policies, table};
use crate::store::now_ms;

/// How often a follower refreshes its board.
pub const REFRESH: Duration = Duration::from_secs(1);

impl Dispatcher {
    /// Rebuilds the board from the store.
    async fn refresh_board(&self) -> Result<(), JobError> {
        // Only the records that changed are read (as the dispatcher does).
        let unfinished = self.records.unfinished(self.core.store.as_ref()).await?;
        let (queued, active) = (unfinished.queued, unfinished.active);
        let ledger = ledger_of(&active, &queued, &self.core.config);
        let half_life = self.core.config.gateway.fair_share_half_life_s;
        let rows = match self.core.store.usage().await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!("reading the usage ledger (follower's standings): {e}");
                Vec::new()
            }
        };
        let now = now_ms();
        let usage = Usage::of_rows(&rows, half_life, now);
        let snapshot = self.fleets.capacity().snapshot();
        let weights = self.admission.fair_share();
        let shares = table(
            &snapshot,
            &ledger,
            &rows,
            weights.clone(),
            half_life,
            now,
            None,
        );
        self.admission
            .usage()
            .publish_shares(&for_policies(&shares));
        let entitled = Entitlement::new(&snapshot, &ledger, weights);
        let rank = |team: &str, series: &str| usage.weighted_rank(&ledger, &entitled, team, series);
        // The priority the leader orders by: as admitted before (a preempted job),
        // else the spec's.
        let class = |j: &Arc<crate::store::JobRecord>| {
            Class::new(
                false,
                j.terms.as_ref().map_or(j.spec.priority, |t| t.priority),
            )
        };
        let mut order = FairOrder::new(&queued, class, rank);
        let mut standing = Standing::default();
        while let Some(job) = order.next(rank) {
            let series = series_of(job).to_string();
            let reason = job.reason.clone().unwrap_or_default();
            let code = reason
                .split_once(": ")
                .map_or("queued", |(code, _)| code)
                .to_string();
            let shares = (
                usage.share(&ledger, &job.team, &series),
                entitled.fair_share(&job.team, &series, true),
            );
            standing.waits(job, series, &code, reason, shares);
        }
        self.core.queue.publish(standing.entries);
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
