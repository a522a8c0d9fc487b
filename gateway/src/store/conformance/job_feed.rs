//! Conformance of the stored job feed (`JobStore::changes_since`/`changes_head`):
//! every submission and transition is a change with its job's team, and a reader
//! following the feed while two replicas write never skips one — positions are handed
//! out in commit order.

use std::time::Duration;

use super::Harness;
use super::jobs::{new_job, t};
use crate::domain::JobState;
use crate::store::job_feed::MAX_CHANGES_READ;

/// Jobs each of the two writers submits and dispatches.
const PER_WRITER: usize = 25;

pub async fn a_reader_following_the_feed_misses_no_change(h: &dyn Harness) {
    let db = h.open().await;
    assert_eq!(db.jobs.changes_head().await.expect("head"), 0);
    let mut writers = Vec::new();
    for team in ["team-a", "team-b"] {
        let store = h.open().await.jobs;
        writers.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..PER_WRITER {
                let job = store
                    .insert(new_job(team, &format!("{team}-{i}"), "h100"), None)
                    .await
                    .expect("insert");
                store
                    .transition(t(&job.id, JobState::Queued, JobState::Dispatched))
                    .await
                    .expect("transition");
                ids.push((job.id, team));
            }
            ids
        }));
    }
    // The reader follows along, always from the last position it saw.
    let reader = db.jobs.clone();
    let expected = 2 * PER_WRITER * 2;
    let followed = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut last = 0;
        while seen.len() < expected {
            let changes = reader
                .changes_since(last, MAX_CHANGES_READ)
                .await
                .expect("read");
            if let Some(c) = changes.last() {
                last = c.position;
            }
            seen.extend(changes);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        seen
    });
    let mut team_of = std::collections::BTreeMap::new();
    for w in writers {
        team_of.extend(w.await.expect("writer"));
    }
    let followed = tokio::time::timeout(Duration::from_secs(30), followed)
        .await
        .expect("the reader saw every change (none skipped)")
        .expect("reader");
    let all = db
        .jobs
        .changes_since(0, MAX_CHANGES_READ)
        .await
        .expect("read");
    assert_eq!(followed, all, "the reader saw the feed as it is stored");
    assert_eq!(all.len(), expected);
    assert_eq!(
        db.jobs.changes_head().await.expect("head"),
        all.last().expect("changes").position
    );
    // Each change carries its job's team, and a job's submission comes before its
    // dispatch.
    for c in &all {
        assert_eq!(Some(&c.team.as_str()), team_of.get(&c.job_id), "{c:?}");
        if c.entry.to == JobState::Dispatched {
            let submitted = all
                .iter()
                .position(|s| s.job_id == c.job_id && s.entry.from.is_none());
            let dispatched = all.iter().position(|s| s == c);
            assert!(submitted < dispatched, "{c:?}");
        }
    }
    let second = all[1].position;
    let after = db.jobs.changes_since(second, 3).await.expect("read");
    assert_eq!(after, all[2..5]);
}
