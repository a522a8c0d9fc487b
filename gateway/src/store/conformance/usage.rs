//! Conformance of the usage ledger ([`crate::store::usage`]): an accrual decays each
//! row to its time before it adds, rows are per team and series, what is written is
//! read back by another handle, and a stale leader's accrual is refused whole.

use super::Harness;
use super::coord::{LEASE, LONG, acquired};
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
