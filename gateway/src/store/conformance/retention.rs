//! Conformance of [`RetentionStore`]: rejected submissions go with their history and
//! decisions and nothing else does; ended jobs' logs are due once, oldest first;
//! ownerships expire by last use except while a live job uses the capsule; a capsule is
//! claimed only when unowned and unused, a grant after the claim learns of it, and
//! finished deletions are forgotten.

use super::Harness;
use super::jobs::{new_job, t};
use crate::domain::{Digest, JobState};
use crate::store::{CapsuleStore, Deletion, NewDecision, NewJob, RetentionStore, now_ms};

fn rejected(team: &str) -> NewJob {
    NewJob {
        state: JobState::Rejected,
        reason: Some("quota.exceeded: no".into()),
        capsule_sha256: None,
        ..new_job(team, "refused", "h200")
    }
}

fn decision(id: &str) -> NewDecision {
    NewDecision {
        job_id: id.to_string(),
        team: "team-a".into(),
        kind: "reject".into(),
        code: Some("quota.exceeded".into()),
        message: None,
        field: None,
        plugins: serde_json::json!([]),
        chain_version: "global@1".into(),
        request: None,
    }
}

pub async fn rejected_records_and_ended_logs_are_due(h: &dyn Harness) {
    let db = h.open().await;
    let (jobs, retention) = (db.jobs.as_ref(), db.retention.as_ref());
    let refused = rejected("team-a");
    let refused_id = refused.id.clone();
    jobs.insert(refused, Some(decision(&refused_id)))
        .await
        .expect("insert rejected");
    let waiting = jobs
        .insert(new_job("team-a", "waits", "h200"), None)
        .await
        .expect("insert queued");
    let ended = jobs
        .insert(new_job("team-a", "ends", "h200"), None)
        .await
        .expect("insert");
    jobs.transition(t(&ended.id, JobState::Queued, JobState::Cancelled))
        .await
        .expect("cancel");

    // Nothing is due before its time.
    assert_eq!(retention.purge_rejected(0, 10).await.expect("purge"), 0);
    assert!(retention.logs_due(0, 10).await.expect("due").is_empty());

    let later = now_ms() + 60_000;
    assert_eq!(retention.purge_rejected(later, 10).await.expect("purge"), 1);
    assert!(jobs.get(&refused_id).await.expect("get").is_none());
    assert!(jobs.history(&refused_id).await.expect("history").is_empty());
    assert!(
        jobs.decisions(&refused_id)
            .await
            .expect("decisions")
            .is_empty()
    );
    assert!(jobs.get(&waiting.id).await.expect("get").is_some());
    assert!(jobs.get(&ended.id).await.expect("get").is_some());
    assert_eq!(retention.purge_rejected(later, 10).await.expect("again"), 0);

    // Only the ended job's logs are due, once.
    let due = retention.logs_due(later, 10).await.expect("due");
    assert_eq!(
        due.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        vec![ended.id.as_str()]
    );
    let ended_at = jobs
        .get(&ended.id)
        .await
        .expect("get")
        .expect("job")
        .updated_at_ms;
    assert_eq!(due[0].1, ended_at, "when it ended");
    assert_eq!(
        retention.logs_deleted_at(&ended.id).await.expect("at"),
        None
    );
    retention.logs_deleted(&ended.id, 42).await.expect("mark");
    assert_eq!(
        retention.logs_deleted_at(&ended.id).await.expect("at"),
        Some(42)
    );
    assert!(retention.logs_due(later, 10).await.expect("due").is_empty());
    assert_eq!(
        retention.logs_deleted_at(&waiting.id).await.expect("at"),
        None
    );
}

pub async fn capsules_are_claimed_only_when_unowned_and_unused(h: &dyn Harness) {
    let db = h.open().await;
    let (jobs, capsules, retention) = (
        db.jobs.as_ref(),
        db.capsules.as_ref(),
        db.retention.as_ref(),
    );
    // `new_job` uses capsule abab…: a queued job uses it.
    let d = Digest::parse(&"ab".repeat(32)).expect("digest");
    let unused = Digest::parse(&"cd".repeat(32)).expect("digest");
    capsules.grant_capsule(&d, "team-a").await.expect("grant");
    capsules
        .grant_capsule(&unused, "team-a")
        .await
        .expect("grant");
    let job = jobs
        .insert(new_job("team-a", "uses", "h200"), None)
        .await
        .expect("insert");
    let later = now_ms() + 60_000;

    // Owned: no claim. Old ownerships expire, except the one a live job uses.
    assert!(
        !retention
            .claim_capsule_deletion(&d, now_ms())
            .await
            .expect("claim")
    );
    assert_eq!(
        retention
            .expire_capsule_owners(0, 10)
            .await
            .expect("expire"),
        0
    );
    assert_eq!(
        retention
            .expire_capsule_owners(later, 10)
            .await
            .expect("expire"),
        1
    );
    assert!(!capsules.use_capsule(&unused, "team-a").await.expect("use"));
    assert!(capsules.use_capsule(&d, "team-a").await.expect("use"));

    // Unowned but used by the live job: still no claim, even with its owner gone.
    jobs.transition(t(&job.id, JobState::Queued, JobState::Cancelled))
        .await
        .expect("cancel");
    let waiting = jobs
        .insert(new_job("team-b", "waits", "h200"), None)
        .await
        .expect("insert");
    assert_eq!(
        retention
            .expire_capsule_owners(later, 10)
            .await
            .expect("expire"),
        0
    );
    jobs.transition(t(&waiting.id, JobState::Queued, JobState::Cancelled))
        .await
        .expect("cancel");
    assert_eq!(
        retention
            .expire_capsule_owners(later, 10)
            .await
            .expect("expire"),
        1
    );

    claimed_when_unowned_and_unused(capsules, retention, &d, &unused, later).await;
}

/// The rest of [`capsules_are_claimed_only_when_unowned_and_unused`]: `d` and `unused`
/// are now unowned and unused.
async fn claimed_when_unowned_and_unused(
    capsules: &dyn CapsuleStore,
    retention: &dyn RetentionStore,
    d: &Digest,
    unused: &Digest,
    later: i64,
) {
    // Unowned and unused: claimed. A grant after the claim is told of it, and then
    // the digest cannot be claimed again while owned.
    let at = now_ms();
    assert!(
        retention
            .claim_capsule_deletion(d, at)
            .await
            .expect("claim")
    );
    assert_eq!(
        capsules.capsule_deletion(d).await.expect("state"),
        Some(Deletion::Deleting)
    );
    assert_eq!(
        retention
            .stale_capsule_deletions(at + 1, 10)
            .await
            .expect("stale"),
        vec![d.clone()]
    );
    assert_eq!(
        capsules.grant_capsule(d, "team-b").await.expect("grant"),
        Some(Deletion::Deleting)
    );
    assert!(
        !retention
            .claim_capsule_deletion(d, at)
            .await
            .expect("claim")
    );
    retention.capsule_deleted(d, at).await.expect("deleted");
    assert_eq!(
        capsules.capsule_deletion(d).await.expect("state"),
        Some(Deletion::Deleted)
    );
    assert!(
        retention
            .stale_capsule_deletions(later, 10)
            .await
            .expect("stale")
            .is_empty()
    );

    // The unused capsule: claimed and deleted; finished deletions are forgotten.
    assert!(
        retention
            .claim_capsule_deletion(unused, at)
            .await
            .expect("claim")
    );
    retention
        .capsule_deleted(unused, at)
        .await
        .expect("deleted");
    assert_eq!(
        retention.prune_capsule_deletions(at).await.expect("prune"),
        0
    );
    assert_eq!(
        retention
            .prune_capsule_deletions(at + 1)
            .await
            .expect("prune"),
        2
    );
    assert_eq!(
        capsules.capsule_deletion(unused).await.expect("state"),
        None
    );
}
