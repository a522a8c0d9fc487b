//! Conformance of [`PlaygroundStore`]: a playground starts pending with its idle clock
//! at creation, lists per team newest first, state changes are compare-and-set (two
//! reclaimers end it once, with one reason), extend and touch only move live
//! playgrounds' clocks (touch never backwards) and clear the warning, the warning is
//! given once, and everything survives a restart.

use super::Harness;
use crate::domain::{EndReason, PlaygroundState};
use crate::store::{NewPlayground, PlaygroundStore, StoreError};

fn new(id: &str, team: &str, at: i64) -> NewPlayground {
    NewPlayground {
        id: id.into(),
        team: team.into(),
        created_by: format!("{team}-token"),
        model: "meta/llama-3-8b".into(),
        series: Some("h100".into()),
        gpus: 2,
        args: vec!["--max-model-len".into(), "4096".into()],
        created_at_ms: at,
        expires_at_ms: at + 3_600_000,
        idle_seconds: Some(600),
    }
}

pub async fn playground_clocks_and_states(h: &dyn Harness) {
    let db = h.open().await;
    let s = db.playgrounds.as_ref();
    let a = s
        .insert_playground(&new("pg-a", "team-a", 1_000))
        .await
        .expect("insert");
    assert_eq!(a.state, PlaygroundState::Pending);
    assert_eq!(a.last_request_at_ms, 1_000);
    // Pending (loading its model): only the hard TTL runs.
    assert_eq!(a.idle_deadline_ms(), None);
    assert_eq!(a.next_deadline_ms(), (3_601_000, EndReason::TtlExpired));
    let mut ready = a.clone();
    ready.state = PlaygroundState::Ready;
    assert_eq!(ready.idle_deadline_ms(), Some(601_000));
    assert_eq!(ready.next_deadline_ms(), (601_000, EndReason::Idle));
    assert!(matches!(
        s.insert_playground(&new("pg-a", "team-b", 5)).await,
        Err(StoreError::Duplicate(id)) if id == "pg-a"
    ));
    s.insert_playground(&new("pg-b", "team-b", 2_000))
        .await
        .expect("insert b");
    s.insert_playground(&new("pg-c", "team-a", 3_000))
        .await
        .expect("insert c");
    let ids =
        |v: Vec<crate::store::PlaygroundRecord>| v.into_iter().map(|p| p.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.list_playgrounds(Some("team-a"), 10).await.expect("list")),
        ["pg-c", "pg-a"]
    );
    assert_eq!(
        ids(s.list_playgrounds(None, 2).await.expect("list")),
        ["pg-c", "pg-b"]
    );
    assert_eq!(
        s.get_playground("pg-a").await.expect("get"),
        Some(a.clone())
    );
    assert_eq!(s.get_playground("nope").await.expect("get"), None);

    set_states_and_clocks(s).await;

    // A restart keeps everything.
    drop(db);
    let db = h.open().await;
    let got = db
        .playgrounds
        .get_playground("pg-a")
        .await
        .expect("get")
        .expect("some");
    assert_eq!(got.state, PlaygroundState::Expired);
    assert_eq!(got.reason.as_deref(), Some("idle"));
    assert_eq!(got.ended_at_ms, Some(7_000));
    assert_eq!(got.last_request_at_ms, 5_000);
    assert_eq!(got.expires_at_ms, 9_000_000);
    assert_eq!(got.args, ["--max-model-len", "4096"]);
    assert_eq!(got.series.as_deref(), Some("h100"));
    assert_eq!(got.gpus, 2);
}

/// The middle of [`playground_clocks_and_states`]: compare-and-set of states, the
/// clocks, and the end (pg-a, pg-b and pg-c are stored).
async fn set_states_and_clocks(s: &dyn PlaygroundStore) {
    let ids =
        |v: Vec<crate::store::PlaygroundRecord>| v.into_iter().map(|p| p.id).collect::<Vec<_>>();
    // Compare-and-set: the second mover loses, the first reason stays.
    assert!(
        s.set_playground_state(
            "pg-a",
            PlaygroundState::Pending,
            PlaygroundState::Ready,
            None,
            1_500
        )
        .await
        .expect("ready")
    );
    assert!(
        !s.set_playground_state(
            "pg-a",
            PlaygroundState::Pending,
            PlaygroundState::Failed,
            Some(EndReason::PodFailed),
            1_600
        )
        .await
        .expect("stale")
    );

    // Clocks: touch restarts the idle clock (never backwards) and clears the warning.
    assert!(s.warn_playground("pg-a", 2_000).await.expect("warn"));
    assert!(!s.warn_playground("pg-a", 2_100).await.expect("warned once"));
    s.touch_playground("pg-a", 5_000).await.expect("touch");
    s.touch_playground("pg-a", 4_000)
        .await
        .expect("older touch");
    let got = s.get_playground("pg-a").await.expect("get").expect("some");
    assert_eq!(got.last_request_at_ms, 5_000);
    assert_eq!(got.warned_at_ms, None);
    assert!(s.warn_playground("pg-a", 6_000).await.expect("warn again"));
    assert!(
        s.extend_playground("pg-a", 9_000_000)
            .await
            .expect("extend")
    );
    let got = s.get_playground("pg-a").await.expect("get").expect("some");
    assert_eq!((got.expires_at_ms, got.warned_at_ms), (9_000_000, None));

    // Ending: one reclaimer wins; an ended playground is no longer active and its
    // clocks do not move.
    let end = |who: EndReason| {
        s.set_playground_state(
            "pg-a",
            PlaygroundState::Ready,
            PlaygroundState::Expired,
            Some(who),
            7_000,
        )
    };
    assert!(end(EndReason::Idle).await.expect("end"));
    assert!(!end(EndReason::ReclaimedByAdmin).await.expect("second end"));
    assert!(
        !s.extend_playground("pg-a", 10_000_000)
            .await
            .expect("extend ended")
    );
    assert!(!s.warn_playground("pg-a", 7_100).await.expect("warn ended"));
    s.touch_playground("pg-a", 8_000)
        .await
        .expect("touch ended");
    let active = ids(s.active_playgrounds().await.expect("active"));
    assert_eq!(active, ["pg-b", "pg-c"]);
}
