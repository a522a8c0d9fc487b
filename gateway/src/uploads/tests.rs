//! The upload sessions against a real local object store: out-of-order, repeated and
//! short chunks; resuming by digest; completion's checks (missing ranges, digest,
//! canonical capsule); the per-team session limit and the sweeper.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use forge_capsule::{CapsuleLimits, CodeSource, assemble};

use super::{ChunkRange, UploadError, UploadLimits, Uploads};
use crate::metrics::Metrics;
use crate::objects::{LocalStore, ObjectStore};

struct Fixture {
    uploads: Uploads,
    objects: Arc<LocalStore>,
    capsule: Vec<u8>,
    digest: String,
    _dir: tempfile::TempDir,
}

fn fixture(max_sessions: u64, ttl: Duration) -> Fixture {
    let dir = tempfile::tempdir().expect("tmp");
    let code = dir.path().join("code");
    std::fs::create_dir_all(&code).expect("mkdir");
    std::fs::write(code.join("train.py"), "print('hi')\n".repeat(4000)).expect("write");
    let cap = assemble(
        CodeSource::Dir(code),
        b"{}",
        None,
        &CapsuleLimits::default(),
        &dir.path().join("packed"),
    )
    .expect("assemble");
    let objects = Arc::new(
        LocalStore::new(
            dir.path().join("objects"),
            vec![7; 32],
            "http://127.0.0.1:1".parse().expect("url"),
        )
        .expect("store"),
    );
    let db = crate::store::Database::open_sqlite(&dir.path().join("data").join("forge.sqlite3"))
        .expect("database");
    let uploads = Uploads::open(
        &dir.path().join("data"),
        objects.clone(),
        db.capsules.clone(),
        Arc::new(Metrics::new()),
        UploadLimits {
            max_sessions_per_team: max_sessions,
            ttl,
            max_size: 1 << 30,
            max_chunk: super::MAX_CHUNK_BYTES,
        },
    )
    .expect("uploads");
    Fixture {
        uploads,
        objects,
        capsule: std::fs::read(&cap.path).expect("capsule"),
        digest: cap.digest,
        _dir: dir,
    }
}

fn body(bytes: &[u8]) -> futures::stream::Iter<std::vec::IntoIter<Result<Bytes, String>>> {
    futures::stream::iter(vec![Ok(Bytes::copy_from_slice(bytes))])
}

async fn put(
    f: &Fixture,
    id: &str,
    from: usize,
    to: usize,
) -> Result<super::SessionView, UploadError> {
    let range = ChunkRange {
        offset: from as u64,
        len: (to - from) as u64,
        total: Some(f.capsule.len() as u64),
    };
    f.uploads
        .put_chunk("team-a", id, range, body(&f.capsule[from..to]))
        .await
}

#[tokio::test]
async fn chunks_in_any_order_repeated_then_completed_and_stored() {
    let f = fixture(4, Duration::from_secs(60));
    let size = f.capsule.len();
    let s = f
        .uploads
        .start("team-a", &f.digest, size as u64)
        .await
        .expect("start");
    assert!(!s.resumed);
    let half = size / 2;
    let view = put(&f, &s.id, half, size).await.expect("second half first");
    assert_eq!(view.missing, vec![[0, half as u64]]);
    // Completing now names what is missing.
    match f.uploads.complete("team-a", &s.id).await {
        Err(UploadError::Incomplete { missing }) => assert_eq!(missing, vec![[0, half as u64]]),
        other => panic!("expected incomplete, got {other:?}"),
    }
    // Resuming by digest finds the session and its progress.
    let again = f
        .uploads
        .start("team-a", &f.digest, size as u64)
        .await
        .expect("resume");
    assert!(again.resumed);
    assert_eq!(again.id, s.id);
    assert_eq!(again.received_bytes, (size - half) as u64);
    put(&f, &s.id, 0, half).await.expect("first half");
    put(&f, &s.id, 0, half)
        .await
        .expect("a repeated chunk is harmless");
    assert!(!f.objects.exists(&f.digest).await.expect("exists"));
    let done = f.uploads.complete("team-a", &s.id).await.expect("complete");
    assert_eq!(done.capsule.as_str(), f.digest);
    assert!(!done.deduplicated);
    assert!(f.objects.exists(&f.digest).await.expect("exists"));
    // The session is gone.
    assert!(matches!(
        f.uploads.status("team-a", &s.id).await,
        Err(UploadError::NotFound(_))
    ));
}

#[tokio::test]
async fn another_team_does_not_see_the_session() {
    let f = fixture(4, Duration::from_secs(60));
    let s = f
        .uploads
        .start("team-a", &f.digest, f.capsule.len() as u64)
        .await
        .expect("start");
    for r in [
        f.uploads.status("team-b", &s.id).await.map(|_| ()),
        f.uploads.abort("team-b", &s.id).await,
        f.uploads.complete("team-b", &s.id).await.map(|_| ()),
    ] {
        assert!(matches!(r, Err(UploadError::NotFound(_))), "{r:?}");
    }
}

#[tokio::test]
async fn bad_ranges_and_bodies_are_refused_and_not_recorded() {
    let f = fixture(4, Duration::from_secs(60));
    let size = f.capsule.len() as u64;
    let s = f
        .uploads
        .start("team-a", &f.digest, size)
        .await
        .expect("start");
    let beyond = ChunkRange {
        offset: size - 1,
        len: 2,
        total: Some(size),
    };
    let r = f
        .uploads
        .put_chunk("team-a", &s.id, beyond, body(b"ab"))
        .await;
    assert!(matches!(r, Err(UploadError::BadRange(_))), "{r:?}");
    let wrong_total = ChunkRange {
        offset: 0,
        len: 2,
        total: Some(size + 1),
    };
    let r = f
        .uploads
        .put_chunk("team-a", &s.id, wrong_total, body(b"ab"))
        .await;
    assert!(matches!(r, Err(UploadError::BadRange(_))), "{r:?}");
    let short = ChunkRange {
        offset: 0,
        len: 10,
        total: None,
    };
    let r = f
        .uploads
        .put_chunk("team-a", &s.id, short, body(b"abc"))
        .await;
    assert!(
        matches!(
            r,
            Err(UploadError::BodyLength {
                expected: 10,
                got: 3
            })
        ),
        "{r:?}"
    );
    let broken = futures::stream::iter(vec![
        Ok(Bytes::from_static(b"ab")),
        Err("reset".to_string()),
    ]);
    let r = f
        .uploads
        .put_chunk(
            "team-a",
            &s.id,
            ChunkRange {
                offset: 0,
                len: 4,
                total: None,
            },
            broken,
        )
        .await;
    assert!(matches!(r, Err(UploadError::Interrupted(_))), "{r:?}");
    let status = f.uploads.status("team-a", &s.id).await.expect("status");
    assert_eq!(status.received_bytes, 0, "nothing was recorded");
    let r = f.uploads.start("team-a", "not-a-digest", 10).await;
    assert!(matches!(r, Err(UploadError::InvalidDigest)), "{r:?}");
    let r = f.uploads.start("team-a", &f.digest, 0).await;
    assert!(matches!(r, Err(UploadError::BadSize { .. })), "{r:?}");
}

#[tokio::test]
async fn corrupted_or_foreign_bytes_are_not_stored() {
    let f = fixture(4, Duration::from_secs(60));
    let size = f.capsule.len();
    // Bytes that do not hash to the declared digest.
    let s = f
        .uploads
        .start("team-a", &f.digest, size as u64)
        .await
        .expect("start");
    let mut bad = f.capsule.clone();
    bad[size / 2] ^= 0xff;
    let range = ChunkRange {
        offset: 0,
        len: size as u64,
        total: None,
    };
    f.uploads
        .put_chunk("team-a", &s.id, range, body(&bad))
        .await
        .expect("chunk");
    let r = f.uploads.complete("team-a", &s.id).await;
    assert!(
        matches!(r, Err(UploadError::DigestMismatch { .. })),
        "{r:?}"
    );
    assert!(!f.objects.exists(&f.digest).await.expect("exists"));

    // A zip that hashes right but is not a capsule this packer builds.
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    zip.start_file(
        "capsule/.forge/jobspec.json",
        zip::write::SimpleFileOptions::default(),
    )
    .expect("entry");
    std::io::Write::write_all(&mut zip, b"{}").expect("write");
    zip.start_file("capsule/a.py", zip::write::SimpleFileOptions::default())
        .expect("entry");
    std::io::Write::write_all(&mut zip, b"print(1)\n").expect("write");
    let foreign = zip.finish().expect("zip").into_inner();
    let digest = {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(&foreign))
    };
    let s = f
        .uploads
        .start("team-a", &digest, foreign.len() as u64)
        .await
        .expect("start");
    let range = ChunkRange {
        offset: 0,
        len: foreign.len() as u64,
        total: None,
    };
    f.uploads
        .put_chunk("team-a", &s.id, range, body(&foreign))
        .await
        .expect("chunk");
    let r = f.uploads.complete("team-a", &s.id).await;
    assert!(matches!(r, Err(UploadError::NotCanonical { .. })), "{r:?}");
    assert!(!f.objects.exists(&digest).await.expect("exists"));
}

#[tokio::test]
async fn sessions_are_bounded_per_team_and_abandoned_ones_are_swept() {
    let f = fixture(2, Duration::from_millis(1));
    let d = |i: u8| hex::encode([i; 32]);
    let a = f.uploads.start("team-a", &d(1), 10).await.expect("first");
    f.uploads.start("team-a", &d(2), 10).await.expect("second");
    f.uploads
        .start("team-b", &d(3), 10)
        .await
        .expect("another team has its own budget");
    // At the limit, expired sessions are swept first (the TTL here is 1 ms).
    tokio::time::sleep(Duration::from_millis(5)).await;
    f.uploads
        .start("team-a", &d(4), 10)
        .await
        .expect("after the sweep");
    assert!(matches!(
        f.uploads.status("team-a", &a.id).await,
        Err(UploadError::NotFound(_))
    ));

    let f = fixture(1, Duration::from_secs(3600));
    f.uploads.start("team-a", &d(1), 10).await.expect("first");
    match f.uploads.start("team-a", &d(2), 10).await {
        Err(UploadError::TooManySessions { limit: 1, open }) => assert_eq!(open.len(), 1),
        other => panic!("expected the limit, got {other:?}"),
    }
    assert_eq!(f.uploads.sweep().await, 0, "nothing has expired");
}
