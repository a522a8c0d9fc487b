//! Removing abandoned upload sessions: one untouched for the TTL
//! (`FORGE_UPLOAD_TTL_S`) is deleted with its bytes, on a timer and whenever a team
//! hits its session limit.

use std::time::Duration;

use super::service::{Uploads, now_ms};

impl Uploads {
    /// Removes every expired session; returns how many.
    pub async fn sweep(&self) -> usize {
        let ttl = self.ttl_ms();
        let now = now_ms();
        let all: Vec<_> = self.map().values().cloned().collect();
        let mut removed = 0;
        for shared in all {
            let mut s = shared.session.lock().await;
            if !s.gone && s.touched_at_ms.saturating_add(ttl) <= now {
                tracing::info!(upload = %s.id, team = %s.team, "removing an abandoned upload");
                self.remove(&mut s, "expired").await;
                removed += 1;
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
