//! Conformance of [`CapsuleStore`]: owners are per team, recording one twice is not an
//! error, and the same bytes uploaded by two teams belong to both.

use super::Harness;
use crate::domain::Digest;

pub async fn owners_are_per_team_and_idempotent(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.capsules.as_ref();
    let d = Digest::parse(&"ab".repeat(32)).expect("digest");
    let other = Digest::parse(&"cd".repeat(32)).expect("digest");
    assert!(!store.capsule_owned_by(&d, "team-a").await.expect("owned"));
    store.grant_capsule(&d, "team-a").await.expect("grant");
    store
        .grant_capsule(&d, "team-a")
        .await
        .expect("grant again");
    assert!(store.capsule_owned_by(&d, "team-a").await.expect("owned"));
    assert!(!store.capsule_owned_by(&d, "team-b").await.expect("owned"));
    assert!(
        !store
            .capsule_owned_by(&other, "team-a")
            .await
            .expect("owned")
    );
    // The same bytes uploaded by a second team: both own them.
    store.grant_capsule(&d, "team-b").await.expect("grant b");
    assert!(store.capsule_owned_by(&d, "team-b").await.expect("owned"));
    assert!(store.capsule_owned_by(&d, "team-a").await.expect("owned"));
}
