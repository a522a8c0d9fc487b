//! Conformance of [`CapsuleStore`]: owners are per team, recording one twice is not an
//! error, the same bytes uploaded by two teams belong to both, and only an owner's use
//! is recorded.

use super::Harness;
use crate::domain::Digest;

pub async fn owners_are_per_team_and_idempotent(h: &dyn Harness) {
    let db = h.open().await;
    let store = db.capsules.as_ref();
    let d = Digest::parse(&"ab".repeat(32)).expect("digest");
    let other = Digest::parse(&"cd".repeat(32)).expect("digest");
    assert!(!store.use_capsule(&d, "team-a").await.expect("use"));
    assert_eq!(
        store.grant_capsule(&d, "team-a").await.expect("grant"),
        None
    );
    assert_eq!(
        store
            .grant_capsule(&d, "team-a")
            .await
            .expect("grant again"),
        None
    );
    assert!(store.use_capsule(&d, "team-a").await.expect("use"));
    assert!(!store.use_capsule(&d, "team-b").await.expect("use"));
    assert!(!store.use_capsule(&other, "team-a").await.expect("use"));
    // The same bytes uploaded by a second team: both own them.
    store.grant_capsule(&d, "team-b").await.expect("grant b");
    assert!(store.use_capsule(&d, "team-b").await.expect("use"));
    assert!(store.use_capsule(&d, "team-a").await.expect("use"));
    assert_eq!(store.capsule_deletion(&d).await.expect("deletion"), None);
}
