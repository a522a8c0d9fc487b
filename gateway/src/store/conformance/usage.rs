//! Conformance of the usage ledger ([`crate::store::usage`]): an accrual decays each
//! row to its time before it adds, rows are per team and series, what is written is
//! read back by another handle, and a stale leader's accrual is refused whole; the
//! dispatch journal keeps passes in time order, forgets old ones, and is fenced too.

use super::Harness;
use super::coord::{LEASE, LONG, acquired};
use crate::store::dispatch_journal::{
    DecidedJob, Outcome, PassRecord, SeriesGpus, TeamUsageAtPass,
};
use crate::store::usage::{Accrual, UsageCharge, UsageRecord};
use crate::store::{Fence, StoreError};

fn charge(team: &str, series: &str, gpu_seconds: f64) -> UsageCharge {
    UsageCharge {
        team: team.into(),
        series: series.into(),
        gpu_seconds,
    }
}

fn accrual(charges: Vec<UsageCharge>, at_ms: i64) -> Accrual {
    Accrual {
        charges,
        at_ms,
        half_life_s: 60,
    }
}

fn row(team: &str, series: &str, gpu_seconds: f64, at_ms: i64) -> UsageRecord {
    UsageRecord {
        team: team.into(),
        series: series.into(),
        gpu_seconds,
        at_ms,
    }
}

pub async fn usage_accrues_decayed_per_team_and_series(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    assert!(a.jobs.usage().await.expect("empty").is_empty());
    let first = vec![
        charge("team-a", "h100", 800.0),
        charge("team-b", "h100", 80.0),
        charge("team-a", "a100", 8.0),
    ];
    a.jobs
        .accrue_usage(accrual(first, 1_000), None)
        .await
        .expect("accrue");
    // One half-life later team-a's h100 row halves before its charge is added.
    a.jobs
        .accrue_usage(accrual(vec![charge("team-a", "h100", 100.0)], 61_000), None)
        .await
        .expect("accrue");
    let rows = b.jobs.usage().await.expect("read");
    assert_eq!(
        rows,
        vec![
            row("team-a", "a100", 8.0, 1_000),
            row("team-a", "h100", 500.0, 61_000),
            row("team-b", "h100", 80.0, 1_000),
        ]
    );
    assert_eq!(rows[2].at(121_000, 60), 20.0, "read decayed to its time");
}

pub async fn a_stale_leaders_accrual_is_refused(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let lease = acquired(a.coord.as_ref(), "a", LONG).await;
    let fence = Fence {
        lease: LEASE.into(),
        epoch: lease.epoch,
    };
    a.jobs
        .accrue_usage(
            accrual(vec![charge("team-a", "h100", 10.0)], 1_000),
            Some(fence.clone()),
        )
        .await
        .expect("the current term accrues");
    a.coord.release(&lease).await.expect("release");
    let next = acquired(b.coord.as_ref(), "b", LONG).await;
    let stale = accrual(
        vec![
            charge("team-b", "h100", 10.0),
            charge("team-a", "h100", 10.0),
        ],
        2_000,
    );
    match a.jobs.accrue_usage(stale, Some(fence)).await {
        Err(StoreError::Fenced { epoch, current, .. }) => {
            assert_eq!((epoch, current), (lease.epoch, next.epoch));
        }
        other => panic!("a stale leader accrued: {other:?}"),
    }
    assert_eq!(
        b.jobs.usage().await.expect("read"),
        vec![row("team-a", "h100", 10.0, 1_000)],
        "nothing of the refused accrual"
    );
}

fn pass(at_ms: i64, job: &str) -> PassRecord {
    PassRecord {
        at_ms,
        weights: [("team-a".to_string(), 2.0)].into(),
        free: [("h100".to_string(), 8)].into(),
        teams: vec![TeamUsageAtPass {
            team: "team-a".into(),
            series: "h100".into(),
            used: 1.0 / 3.0,
            held: 0,
        }],
        omitted: 0,
        decided: vec![DecidedJob {
            job: job.into(),
            team: "team-a".into(),
            series: "h100".into(),
            priority: 0,
            holding: false,
            seq: at_ms,
            outcome: Outcome::Dispatched {
                gpus: vec![SeriesGpus {
                    series: "h100".into(),
                    gpus: 8,
                }],
            },
        }],
    }
}

pub async fn the_dispatch_journal_keeps_passes_in_order_and_forgets_old_ones(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    for (at, job) in [(1_000, "j1"), (3_000, "j3"), (2_000, "j2")] {
        a.jobs
            .record_pass(pass(at, job), 0, None)
            .await
            .expect("record");
    }
    let read = b.jobs.passes(0, i64::MAX, 10).await.expect("read");
    assert_eq!(
        read,
        vec![pass(1_000, "j1"), pass(2_000, "j2"), pass(3_000, "j3")]
    );
    let window = b.jobs.passes(1_500, 3_000, 1).await.expect("read");
    assert_eq!(window, vec![pass(2_000, "j2")], "from, to and limit");
    // A write forgets what is older than it keeps.
    a.jobs
        .record_pass(pass(4_000, "j4"), 2_500, None)
        .await
        .expect("record");
    let kept = b.jobs.passes(0, i64::MAX, 10).await.expect("read");
    assert_eq!(kept, vec![pass(3_000, "j3"), pass(4_000, "j4")]);
}

pub async fn a_stale_leaders_pass_is_not_journaled(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let lease = acquired(a.coord.as_ref(), "a", LONG).await;
    let fence = Fence {
        lease: LEASE.into(),
        epoch: lease.epoch,
    };
    a.jobs
        .record_pass(pass(1_000, "j1"), 0, Some(fence.clone()))
        .await
        .expect("the current term records");
    a.coord.release(&lease).await.expect("release");
    acquired(b.coord.as_ref(), "b", LONG).await;
    let refused = a
        .jobs
        .record_pass(pass(2_000, "j2"), 1_500, Some(fence))
        .await;
    assert!(
        matches!(refused, Err(StoreError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(
        b.jobs.passes(0, i64::MAX, 10).await.expect("read"),
        vec![pass(1_000, "j1")],
        "nothing written, nothing forgotten"
    );
}
