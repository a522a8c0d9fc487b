//! Conformance of [`crate::store::SessionStore`]: a session is seen from another handle
//! (a restarted gateway or another replica) until it expires or is closed, and opening
//! one forgets the expired.

use super::Harness;
use crate::store::SessionRecord;

fn record(token: &str, expires_at_ms: i64) -> SessionRecord {
    SessionRecord {
        token_sha256: token.into(),
        csrf: format!("csrf-of-{token}"),
        expires_at_ms,
    }
}

pub async fn sessions_outlive_a_handle_until_they_expire_or_close(h: &dyn Harness) {
    let a = h.open().await;
    a.sessions
        .open_session("id-1", &record("t1", 2_000), 1_000)
        .await
        .expect("open");
    a.sessions
        .open_session("id-2", &record("t2", 5_000), 1_000)
        .await
        .expect("open");
    // Another handle on the same database: a restarted gateway, another replica.
    let b = h.open().await;
    assert_eq!(
        b.sessions.session("id-1", 1_500).await.expect("read"),
        Some(record("t1", 2_000))
    );
    assert_eq!(
        b.sessions.session("unknown", 1_500).await.expect("read"),
        None
    );
    // Expired: gone, even before anything forgets the row.
    assert_eq!(b.sessions.session("id-1", 2_000).await.expect("read"), None);
    // The same id cannot be opened twice while its row is kept.
    assert!(
        a.sessions
            .open_session("id-2", &record("t3", 9_000), 1_000)
            .await
            .is_err()
    );
    // Opening forgets the expired: id-1's row goes, and its id can be opened again.
    b.sessions
        .open_session("id-3", &record("t3", 9_000), 3_000)
        .await
        .expect("open");
    a.sessions
        .open_session("id-1", &record("t4", 9_000), 3_000)
        .await
        .expect("the expired row was forgotten");
    // Closed on one handle: gone on the other.
    a.sessions.close_session("id-2").await.expect("close");
    a.sessions.close_session("id-2").await.expect("close twice");
    assert_eq!(b.sessions.session("id-2", 3_000).await.expect("read"), None);
    assert_eq!(
        b.sessions.session("id-3", 3_000).await.expect("read"),
        Some(record("t3", 9_000))
    );
}
