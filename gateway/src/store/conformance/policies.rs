//! Conformance of [`PolicyStore`]: versions are compare-and-set (also between two
//! handles), survive a reopen and are announced where the backend can; plugin
//! versions are immutable; decisions are replayable and shadow results counted.

use std::time::Duration;

use serde_json::json;

use super::Harness;
use super::jobs::new_job;
use crate::domain::FairShareSettings;
use crate::store::{LinkRef, NewDecision, NewVersion, PluginRecord, ShadowResult, StoreError};

fn link(name: &str) -> LinkRef {
    LinkRef {
        owner: "global".into(),
        name: name.into(),
        version: "1".into(),
        digest: "sha256:00".into(),
        settings: json!({"limit": 3, "nested": {"b": [1, 2], "a": null}}),
    }
}

fn weights() -> FairShareSettings {
    FairShareSettings {
        weights: [("team-a".to_string(), 2.0), ("team-b".to_string(), 0.5)].into(),
    }
}

fn new_version(scope: &str, expected: u64, name: &str) -> NewVersion {
    NewVersion {
        scope: scope.into(),
        expected,
        plugins: vec![link(name)],
        fair_share: Default::default(),
        action: "put",
        author: "ops".into(),
        comment: format!("to {name}"),
    }
}

fn plugin(owner: &str, name: &str, version: &str, digest: &str, size: u64) -> PluginRecord {
    PluginRecord {
        owner: owner.into(),
        name: name.into(),
        version: version.into(),
        digest: digest.into(),
        size,
        description: "a plugin".into(),
        world: "forge:policy/policy@0.1.0".into(),
        uploaded_by: owner.into(),
        uploaded_at_ms: 1_700_000_000_000,
        memory_mib: None,
        deadline_ms: None,
    }
}

/// A plugin's own limits (chosen at upload) are stored with its record; absent limits
/// read back as absent (the operator's defaults apply).
pub async fn per_plugin_limits_are_stored_with_the_record(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.policies.as_ref();
    let rec = PluginRecord {
        memory_mib: Some(128),
        deadline_ms: Some(250),
        ..plugin("ml", "py", "1", "sha256:cc", 18 << 20)
    };
    store.insert_plugin(rec.clone()).await.expect("insert");
    let plain = plugin("ml", "rs", "1", "sha256:dd", 1 << 10);
    store.insert_plugin(plain.clone()).await.expect("insert");
    let back = store
        .plugin("ml", "py", "1")
        .await
        .expect("get")
        .expect("found");
    assert_eq!(back, rec);
    let listed = store.plugins(None).await.expect("list");
    assert!(
        listed.contains(&rec) && listed.contains(&plain),
        "{listed:?}"
    );
}

pub async fn append_is_compare_and_set_and_survives_reopen(h: &dyn Harness) {
    {
        let db = h.open().await;
        let store = db.policies.as_ref();
        assert!(store.heads().await.expect("heads").is_empty());
        assert!(store.version("global", None).await.expect("none").is_none());
        let v1 = store
            .append(new_version("global", 0, "a"))
            .await
            .expect("v1");
        assert_eq!((v1.version, v1.from_version), (1, 0));
        let stale = store.append(new_version("global", 0, "b")).await;
        assert!(
            matches!(
                stale,
                Err(StoreError::VersionConflict {
                    expected: 0,
                    current: 1,
                    ..
                })
            ),
            "{stale:?}"
        );
        let weighted = NewVersion {
            fair_share: weights(),
            ..new_version("global", 1, "b")
        };
        assert_eq!(
            store.append(weighted).await.expect("v2").fair_share,
            weights()
        );
        store
            .append(new_version("team:ml", 0, "t"))
            .await
            .expect("team v1");
    }
    let db = h.open().await;
    let store = db.policies.as_ref();
    let heads = store.heads().await.expect("heads");
    assert_eq!(heads.get("global"), Some(&2));
    assert_eq!(heads.get("team:ml"), Some(&1));
    let cur = store
        .version("global", None)
        .await
        .expect("get")
        .expect("v2");
    assert_eq!(cur.plugins, vec![link("b")], "links read back as written");
    assert_eq!(cur.from_version, 1);
    assert_eq!(cur.action, "put");
    assert_eq!(cur.comment, "to b");
    assert_eq!(cur.fair_share, weights(), "fair-share weights read back");
    let v1 = store
        .version("global", Some(1))
        .await
        .expect("get")
        .expect("v1");
    assert_eq!(v1.plugins[0].name, "a");
    assert!(v1.fair_share.is_default(), "{:?}", v1.fair_share);
    assert!(
        store
            .version("global", Some(9))
            .await
            .expect("get")
            .is_none()
    );
    let hist = store.history("global", 10).await.expect("history");
    assert_eq!(
        hist.iter().map(|v| v.version).collect::<Vec<_>>(),
        vec![2, 1]
    );
    assert_eq!(store.history("global", 1).await.expect("history").len(), 1);
}

/// Two handles append to one scope at the same expected version: one wins, the other
/// is told the current version.
pub async fn replicas_race_one_append(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    for round in 0..10u64 {
        let (ra, rb) = tokio::join!(
            a.policies.append(new_version("global", round, "a")),
            b.policies.append(new_version("global", round, "b")),
        );
        match (ra, rb) {
            (Ok(v), Err(StoreError::VersionConflict { current, .. }))
            | (Err(StoreError::VersionConflict { current, .. }), Ok(v)) => {
                assert_eq!(v.version, round + 1);
                assert_eq!(current, round + 1);
            }
            other => panic!("round {round}: expected one winner: {other:?}"),
        }
    }
    assert_eq!(a.policies.heads().await.expect("heads")["global"], 10);
}

pub async fn plugins_are_immutable_per_version(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.policies.as_ref();
    let rec = plugin("ml", "p", "1.0.0", "sha256:aa", 10);
    assert!(store.insert_plugin(rec.clone()).await.expect("first").1);
    let (again, new) = store.insert_plugin(rec.clone()).await.expect("again");
    assert!(!new);
    assert_eq!(again, rec);
    let other = PluginRecord {
        digest: "sha256:bb".into(),
        ..rec.clone()
    };
    match store.insert_plugin(other).await {
        Err(StoreError::PluginVersionExists { digest, .. }) => assert_eq!(digest, "sha256:aa"),
        other => panic!("{other:?}"),
    }
    store
        .insert_plugin(plugin("ml", "p", "1.1.0", "sha256:cc", 5))
        .await
        .expect("second version");
    store
        .insert_plugin(plugin("global", "q", "1", "sha256:aa", 7))
        .await
        .expect("global");
    assert_eq!(store.owner_usage("ml").await.expect("usage"), (2, 15));
    assert_eq!(store.owner_usage("nobody").await.expect("usage"), (0, 0));
    assert_eq!(
        store
            .plugin("ml", "p", "1.0.0")
            .await
            .expect("get")
            .as_ref(),
        Some(&rec)
    );
    assert!(store.plugin("ml", "p", "9").await.expect("get").is_none());
    let by_digest = store
        .plugin_by_digest(vec!["global".into(), "ml".into()], "sha256:aa")
        .await
        .expect("by digest")
        .expect("found");
    assert_eq!(by_digest.owner, "global", "owners are tried in order");
    assert!(
        store
            .plugin_by_digest(vec!["other".into()], "sha256:aa")
            .await
            .expect("by digest")
            .is_none()
    );
    let names = |l: Vec<PluginRecord>| {
        l.into_iter()
            .map(|p| format!("{}/{}@{}", p.owner, p.name, p.version))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(store.plugins(None).await.expect("all")),
        vec!["global/q@1", "ml/p@1.0.0", "ml/p@1.1.0"]
    );
    assert_eq!(
        names(
            store
                .plugins(Some(vec!["global".into()]))
                .await
                .expect("some")
        ),
        vec!["global/q@1"]
    );
}

pub async fn decisions_replay_and_shadow_results(h: &dyn Harness) {
    let db = h.open().await;
    for (i, team) in ["a", "b", "a"].iter().enumerate() {
        let job = new_job(team, &format!("d{i}"), "h200");
        let d = NewDecision {
            job_id: job.id.clone(),
            team: team.to_string(),
            kind: "queue".into(),
            code: Some(format!("code-{i}")),
            message: None,
            field: None,
            plugins: json!([]),
            chain_version: "global@1".into(),
            request: Some(json!({"job": {"name": format!("d{i}")}})),
        };
        db.jobs.insert(job, Some(d)).await.expect("insert");
    }
    let recent = db
        .policies
        .recent_decisions(None, 10)
        .await
        .expect("recent");
    assert_eq!(
        recent
            .iter()
            .map(|d| d.code.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
        vec!["code-2", "code-1", "code-0"],
        "newest first"
    );
    assert_eq!(recent[0].request["job"]["name"], "d2");
    let team_a = db
        .policies
        .recent_decisions(Some("a".into()), 1)
        .await
        .expect("recent");
    assert_eq!(team_a.len(), 1);
    assert_eq!(team_a[0].team, "a");

    for (i, agree) in [true, false, true, false].into_iter().enumerate() {
        let r = ShadowResult {
            job_id: format!("j{i}"),
            team: "a".into(),
            live: "admit".into(),
            shadow: if agree { "admit" } else { "reject:x" }.into(),
            agree,
            at_ms: i64::try_from(i).expect("small"),
        };
        db.policies
            .record_shadow("cand-1", r)
            .await
            .expect("shadow");
    }
    let (counts, diffs) = db
        .policies
        .shadow_report("cand-1", None, 1)
        .await
        .expect("report");
    assert_eq!((counts.compared, counts.agreed), (4, 2));
    assert_eq!(diffs.len(), 1);
    assert_eq!(diffs[0].job_id, "j3", "latest disagreement first");
    assert!(!diffs[0].agree);
    // Another team's result: counted over all teams, never in team a's report.
    let b = ShadowResult {
        job_id: "jb".into(),
        team: "b".into(),
        live: "admit".into(),
        shadow: "reject:x".into(),
        agree: false,
        at_ms: 9,
    };
    db.policies
        .record_shadow("cand-1", b)
        .await
        .expect("shadow");
    let (all, _) = db
        .policies
        .shadow_report("cand-1", None, 10)
        .await
        .expect("report");
    assert_eq!(all.compared, 5);
    let (only_a, diffs_a) = db
        .policies
        .shadow_report("cand-1", Some("a".into()), 10)
        .await
        .expect("report");
    assert_eq!((only_a.compared, only_a.agreed), (4, 2));
    assert!(diffs_a.iter().all(|d| d.team == "a"), "{diffs_a:?}");
    let (none, _) = db
        .policies
        .shadow_report("other", None, 5)
        .await
        .expect("report");
    assert_eq!((none.compared, none.agreed), (0, 0));
}

/// A backend with a change feed announces another handle's append promptly.
pub async fn appends_are_announced_to_replicas(h: &dyn Harness) {
    let (a, b) = (h.open().await, h.open().await);
    let Some(mut feed) = b.policies.changes() else {
        return; // Polling backend: nothing to announce with.
    };
    // The feed connects in the background: append until it has seen one.
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        let mut expected = 0;
        loop {
            let before = *feed.borrow_and_update();
            a.policies
                .append(new_version("global", expected, "x"))
                .await
                .expect("append");
            expected += 1;
            if tokio::time::timeout(Duration::from_millis(500), feed.changed())
                .await
                .is_ok()
                && *feed.borrow() > before
            {
                return expected;
            }
        }
    })
    .await
    .expect("a change notification within 10 s");
    assert!(seen >= 1);
}
