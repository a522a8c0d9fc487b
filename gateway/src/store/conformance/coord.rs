//! Conformance of [`CoordStore`] and of fenced writes: lease terms grow, renewals are
//! compare-and-set on (holder, epoch), a fenced transition commits only under the
//! current epoch, the installation identity is recorded once, and replicas opening a
//! fresh database at once migrate it once.

use std::time::Duration;

use super::Harness;
use super::jobs::{new_job, t};
use crate::domain::JobState;
use crate::store::{Acquire, CoordStore, Fence, StoreError};

pub(super) const LEASE: &str = "forge-gateway-leader";
pub(super) const LONG: Duration = Duration::from_secs(60);
const SHORT: Duration = Duration::from_millis(300);

pub(super) async fn acquired(
    store: &dyn CoordStore,
    holder: &str,
    ttl: Duration,
) -> crate::store::Lease {
    match store.acquire(LEASE, holder, ttl).await.expect("acquire") {
        Acquire::Acquired(l) => l,
        Acquire::Held(l) => panic!("{holder} could not acquire: held by {l:?}"),
    }
}

/// Waits until `lease`'s term has expired by the store's clock.
async fn until_expired(store: &dyn CoordStore) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match store
            .acquire(LEASE, "probe-nobody-wins", Duration::ZERO)
            .await
        {
            // A zero-length term taken by the probe is itself expired at once.
            Ok(Acquire::Acquired(_)) => return,
            Ok(Acquire::Held(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn lease_terms_and_renewals(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    assert!(a.coord.lease(LEASE).await.expect("read").is_none());
    a.coord.ping().await.expect("ping");

    let first = acquired(a.coord.as_ref(), "a", LONG).await;
    assert_eq!((first.holder.as_str(), first.epoch), ("a", 1));
    assert!(first.expires_at_ms > first.renewed_at_ms);
    match b.coord.acquire(LEASE, "b", LONG).await.expect("acquire") {
        Acquire::Held(l) => assert_eq!((l.holder.as_str(), l.epoch), ("a", 1)),
        other => panic!("b took a held lease: {other:?}"),
    }
    // Even its holder cannot start a new term while the lease runs.
    assert!(matches!(
        a.coord.acquire(LEASE, "a", LONG).await.expect("acquire"),
        Acquire::Held(_)
    ));
    let renewed = a
        .coord
        .renew(&first, LONG)
        .await
        .expect("renew")
        .expect("still held");
    assert_eq!(renewed.epoch, 1);
    assert!(renewed.renewed_at_ms >= first.renewed_at_ms);

    // A clean release lets the next replica in at once, in a new epoch.
    a.coord.release(&renewed).await.expect("release");
    let second = acquired(b.coord.as_ref(), "b", SHORT).await;
    assert_eq!((second.holder.as_str(), second.epoch), ("b", 2));
    assert!(
        a.coord
            .renew(&renewed, LONG)
            .await
            .expect("renew")
            .is_none(),
        "a deposed holder cannot renew"
    );
    // A term that ran out is taken by the next one; its holder cannot renew it back,
    // not even after the successor let it expire.
    until_expired(b.coord.as_ref()).await;
    let probe_epoch = b
        .coord
        .lease(LEASE)
        .await
        .expect("read")
        .expect("row")
        .epoch;
    assert!(probe_epoch > 2);
    assert!(b.coord.renew(&second, LONG).await.expect("renew").is_none());
    let third = acquired(a.coord.as_ref(), "a", LONG).await;
    assert_eq!(third.epoch, probe_epoch + 1, "epochs only grow");
    let stored = b.coord.lease(LEASE).await.expect("read").expect("row");
    assert_eq!(stored, third);
    // Releasing a stale term changes nothing.
    b.coord.release(&second).await.expect("release");
    assert_eq!(b.coord.lease(LEASE).await.expect("read"), Some(third));
}

pub async fn fenced_writes_stop_at_a_newer_epoch(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let lease = acquired(a.coord.as_ref(), "a", LONG).await;
    let fence = Fence {
        lease: LEASE.into(),
        epoch: lease.epoch,
    };
    let j1 = a
        .jobs
        .insert(new_job("a", "f1", "h200"), None)
        .await
        .expect("insert");
    let j2 = a
        .jobs
        .insert(new_job("a", "f2", "h200"), None)
        .await
        .expect("insert");
    let mut tr = t(&j1.id, JobState::Queued, JobState::Dispatched);
    tr.fence = Some(fence.clone());
    a.jobs
        .transition(tr)
        .await
        .expect("the current epoch writes");

    // Another replica takes over (the old term is released or has expired).
    a.coord.release(&lease).await.expect("release");
    let next = acquired(b.coord.as_ref(), "b", LONG).await;
    let mut stale = t(&j2.id, JobState::Queued, JobState::Dispatched);
    stale.fence = Some(fence.clone());
    match a.jobs.transition(stale).await {
        Err(StoreError::Fenced { epoch, current, .. }) => {
            assert_eq!((epoch, current), (lease.epoch, next.epoch))
        }
        other => panic!("a stale leader wrote: {other:?}"),
    }
    let j2_now = b.jobs.get(&j2.id).await.expect("get").expect("job");
    assert_eq!(
        j2_now.state,
        JobState::Queued,
        "nothing of the refused write"
    );
    assert_eq!(b.jobs.history(&j2.id).await.expect("history").len(), 1);
    // The new leader's fenced write goes through; unfenced writes (API) are unaffected.
    let mut fresh = t(&j2.id, JobState::Queued, JobState::Dispatched);
    fresh.fence = Some(Fence {
        lease: LEASE.into(),
        epoch: next.epoch,
    });
    b.jobs.transition(fresh).await.expect("new epoch writes");
    a.jobs
        .transition(t(&j1.id, JobState::Dispatched, JobState::Cancelled))
        .await
        .expect("an unfenced cancel");
    // A fence on a lease nobody ever took is refused too.
    let mut unknown = t(&j2.id, JobState::Dispatched, JobState::Running);
    unknown.fence = Some(Fence {
        lease: "no-such-lease".into(),
        epoch: 1,
    });
    assert!(matches!(
        b.jobs.transition(unknown).await,
        Err(StoreError::Fenced { current: 0, .. })
    ));
}

pub async fn installation_identity_is_recorded_once(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let first = a
        .coord
        .instance(None, "generated-1".into())
        .await
        .expect("instance");
    assert_eq!(first, "generated-1");
    let again = b
        .coord
        .instance(None, "generated-2".into())
        .await
        .expect("instance");
    assert_eq!(again, "generated-1", "recorded on first start, kept after");
    assert_eq!(
        b.coord
            .instance(Some("generated-1".into()), "x".into())
            .await
            .expect("instance"),
        "generated-1"
    );
    match a.coord.instance(Some("prod".into()), "x".into()).await {
        Err(StoreError::InstanceMismatch { stored, wanted }) => {
            assert_eq!((stored.as_str(), wanted.as_str()), ("generated-1", "prod"));
        }
        other => panic!("{other:?}"),
    }
    // Other shared values are kept apart from the identity, each recorded once.
    assert_eq!(
        a.coord
            .shared_value("capsule-link-key", "k1".into())
            .await
            .expect("shared"),
        "k1"
    );
    assert_eq!(
        b.coord
            .shared_value("capsule-link-key", "k2".into())
            .await
            .expect("shared"),
        "k1"
    );
    let c = h.open().await;
    assert_eq!(
        c.coord.instance(None, "z".into()).await.expect("instance"),
        "generated-1"
    );
}

/// Several replicas open a fresh database at once: each migration runs once and all
/// of them work.
pub async fn replicas_migrate_once(h: &dyn Harness) {
    let opened = futures::future::join_all((0..4).map(|_| h.open())).await;
    for db in &opened {
        db.coord.ping().await.expect("ping");
        db.jobs.queued(None).await.expect("queue");
    }
    let job = opened[0]
        .jobs
        .insert(new_job("a", "m", "h200"), None)
        .await
        .expect("insert");
    assert!(opened[3].jobs.get(&job.id).await.expect("get").is_some());
}
