//! Removing abandoned upload sessions: one untouched for the TTL
//! (`FORGE_UPLOAD_TTL_S`) and not being completed loses its row, then its multipart
//! upload is aborted and its assembled object deleted — on a timer on every replica
//! and whenever a team hits its session limit. Replicas sweeping at once remove each
//! session once (the row's delete decides who cleans up).

use std::time::Duration;

use super::service::Uploads;
use crate::store::now_ms;

impl Uploads {
    /// Removes every expired session; returns how many this call removed.
    pub async fn sweep(&self) -> usize {
        let now = now_ms();
        let before = now.saturating_sub(self.ttl_ms());
        let expired = match self.inner.sessions.expired_uploads(before, now).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("listing expired uploads: {e}");
                return 0;
            }
        };
        let mut removed = 0;
        for u in expired {
            match self.remove(&u, "expired").await {
                Ok(true) => {
                    tracing::info!(upload = %u.id, team = %u.team, "removed an abandoned upload");
                    removed += 1;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(upload = %u.id, "removing an abandoned upload: {e}"),
            }
        }
        removed
    }

    /// Sweeps every quarter TTL (between 1 s and 5 min).
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let uploads = self.clone();
        let every =
            (self.inner.limits.ttl / 4).clamp(Duration::from_secs(1), Duration::from_secs(300));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                uploads.sweep().await;
            }
        })
    }
}
