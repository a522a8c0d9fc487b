//! The tail of the stored job feed: on a shared feed (PostgreSQL, replicas), the task
//! that reads every state change any replica recorded (`store/job_feed.rs`) and
//! publishes it on this replica's [`JobFeed`], in the store's commit order. It wakes on
//! the store's notification (`NOTIFY forge_jobs`) and, as the fallback for a missed
//! one or a lost listener connection, every [`POLL`]. It starts at the feed's newest
//! position when the gateway starts (older changes are history, not news) and stops
//! when the feed is gone.

use std::sync::Arc;
use std::time::Duration;

use super::feed::JobFeed;
use crate::store::job_feed::MAX_CHANGES_READ;
use crate::store::{JobStore, StoreError};

/// Longest a change waits when its notification was missed.
pub const POLL: Duration = Duration::from_secs(2);
/// Wait after a failed read.
const RETRY: Duration = Duration::from_millis(500);

/// A shared feed for `store` with its tail running, or a local feed when the store has
/// no shared change feed (SQLite: this process publishes its own changes).
///
/// The feed's start is read here, before the feed is handed out: a watcher's snapshot
/// (read after the gateway serves) is then never older than the feed's start, so no
/// change can fall between the two.
pub async fn feed_for(store: &Arc<dyn JobStore>) -> Result<JobFeed, StoreError> {
    let Some(changes) = store.state_changes() else {
        return Ok(JobFeed::default());
    };
    let feed = JobFeed::shared();
    feed.start_at(store.changes_head().await?);
    tokio::spawn(tail(store.clone(), feed.downgrade(), changes));
    Ok(feed)
}

async fn tail(
    store: Arc<dyn JobStore>,
    feed: std::sync::Weak<super::feed::Inner>,
    mut changes: tokio::sync::watch::Receiver<u64>,
) {
    loop {
        let Some(f) = JobFeed::upgrade(&feed) else {
            return;
        };
        catch_up(store.as_ref(), &f).await;
        drop(f);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    tokio::time::sleep(POLL).await;
                }
            }
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Publishes every stored change after the feed's position.
async fn catch_up(store: &dyn JobStore, feed: &JobFeed) {
    loop {
        match store.changes_since(feed.position(), MAX_CHANGES_READ).await {
            Ok(changes) => {
                let n = changes.len();
                for c in changes {
                    feed.publish_stored(c);
                }
                if n < MAX_CHANGES_READ as usize {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!("job feed: reading stored changes: {e}; retrying");
                tokio::time::sleep(RETRY).await;
                return;
            }
        }
    }
}
