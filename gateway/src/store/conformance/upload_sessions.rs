//! Conformance of [`crate::store::UploadSessionStore`]: a session and its parts are
//! seen from another handle (another replica); a repeated part replaces the first; a
//! completion is claimed by one caller at a time; a removal is done once; the expired
//! are those untouched and not being completed.

use super::Harness;
use crate::domain::Digest;
use crate::store::{Database, PartRecord, UploadRecord};

fn upload(id: &str, team: &str, touched_at_ms: i64) -> UploadRecord {
    UploadRecord {
        id: id.into(),
        team: team.into(),
        digest: Digest::parse(&"ab".repeat(32)).expect("digest"),
        size: 20 << 20,
        part_bytes: 8 << 20,
        multipart_id: format!("mp-{id}"),
        created_at_ms: touched_at_ms,
        touched_at_ms,
    }
}

fn part(number: u32, etag: &str) -> PartRecord {
    PartRecord {
        number,
        len: 8 << 20,
        etag: etag.into(),
    }
}

pub async fn upload_sessions_are_shared_claimed_once_and_removed_once(h: &dyn Harness) {
    let a = h.open().await;
    a.uploads
        .create_upload(&upload("u1", "team-a", 1_000))
        .await
        .expect("create");
    a.uploads
        .create_upload(&upload("u2", "team-a", 2_000))
        .await
        .expect("create");
    a.uploads
        .create_upload(&upload("u3", "team-b", 3_000))
        .await
        .expect("create");
    // Another replica sees them, by id and by team.
    let b = h.open().await;
    assert_eq!(
        b.uploads.upload("u1").await.expect("read"),
        Some(upload("u1", "team-a", 1_000))
    );
    assert_eq!(b.uploads.upload("nope").await.expect("read"), None);
    let ids: Vec<String> = b
        .uploads
        .team_uploads("team-a")
        .await
        .expect("team")
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(ids, ["u1", "u2"]);

    parts_from_any_replica_and_a_repeat_replaces(&a, &b).await;
    one_completion_claim_at_a_time(&a, &b).await;
    expired_are_untouched_and_unclaimed(&b).await;
    removed_once_with_its_parts(&a, &b).await;
}

async fn parts_from_any_replica_and_a_repeat_replaces(a: &Database, b: &Database) {
    // Parts from both replicas, in any order; a repeat replaces.
    assert!(
        a.uploads
            .record_part("u1", &part(2, "e2"), 5_000)
            .await
            .expect("part")
    );
    assert!(
        b.uploads
            .record_part("u1", &part(1, "e1"), 6_000)
            .await
            .expect("part")
    );
    assert!(
        a.uploads
            .record_part("u1", &part(2, "e2-again"), 7_000)
            .await
            .expect("part")
    );
    assert_eq!(
        b.uploads.upload_parts("u1").await.expect("parts"),
        vec![part(1, "e1"), part(2, "e2-again")]
    );
    assert_eq!(
        b.uploads
            .upload("u1")
            .await
            .expect("read")
            .expect("u1")
            .touched_at_ms,
        7_000
    );
    assert!(
        !a.uploads
            .record_part("nope", &part(1, "x"), 7_000)
            .await
            .expect("part")
    );
}

async fn one_completion_claim_at_a_time(a: &Database, b: &Database) {
    // One completion at a time; a released or lapsed claim can be taken again.
    assert!(
        a.uploads
            .claim_upload("u1", 8_000, 9_000)
            .await
            .expect("claim")
    );
    assert!(
        !b.uploads
            .claim_upload("u1", 8_500, 9_500)
            .await
            .expect("claim")
    );
    assert!(
        b.uploads
            .claim_upload("u1", 9_000, 10_000)
            .await
            .expect("claim")
    );
    b.uploads.release_upload("u1").await.expect("release");
    assert!(
        a.uploads
            .claim_upload("u1", 9_100, 20_000)
            .await
            .expect("claim")
    );
}

async fn expired_are_untouched_and_unclaimed(b: &Database) {
    // Expired: untouched since the bound and not being completed.
    let expired: Vec<String> = b
        .uploads
        .expired_uploads(7_000, 9_200)
        .await
        .expect("expired")
        .into_iter()
        .map(|u| u.id)
        .collect();
    assert_eq!(expired, ["u2", "u3"], "u1 is claimed until 20 000");
}

async fn removed_once_with_its_parts(a: &Database, b: &Database) {
    // Removed once, with its parts.
    assert!(a.uploads.delete_upload("u1").await.expect("delete"));
    assert!(!b.uploads.delete_upload("u1").await.expect("delete"));
    assert_eq!(b.uploads.upload("u1").await.expect("read"), None);
    assert!(
        b.uploads
            .upload_parts("u1")
            .await
            .expect("parts")
            .is_empty()
    );
    assert!(
        !a.uploads
            .claim_upload("u1", 30_000, 40_000)
            .await
            .expect("claim")
    );
}
