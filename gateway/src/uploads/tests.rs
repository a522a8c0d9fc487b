//! The upload sessions against a real local object store and a real store: parts out
//! of order, repeated, short or misaligned; resuming by digest; a session begun on one
//! gateway and completed on another (two handles on one database and one object
//! store, as replicas are); completion's checks (missing ranges, digest, canonical
//! capsule) and its one-at-a-time claim; the per-team session limit and the sweeper.

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
    dir: tempfile::TempDir,
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
    let objects = local_store(dir.path());
    let uploads = gateway(dir.path(), objects.clone(), max_sessions, ttl);
    Fixture {
        uploads,
        objects,
        capsule: std::fs::read(&cap.path).expect("capsule"),
        digest: cap.digest,
        dir,
    }
}

fn local_store(root: &std::path::Path) -> Arc<LocalStore> {
    Arc::new(
        LocalStore::new(
            root.join("objects"),
            vec![7; 32],
            "http://127.0.0.1:1".parse().expect("url"),
        )
        .expect("store"),
    )
}

/// One gateway's sessions over the database and object store under `root` (a second
/// call is another replica).
fn gateway(
    root: &std::path::Path,
    objects: Arc<LocalStore>,
    max_sessions: u64,
    ttl: Duration,
) -> Uploads {
    let db = crate::store::Database::open_sqlite(&root.join("data").join("forge.sqlite3"))
        .expect("database");
    Uploads::new(
        root.join("spool"),
        objects,
        db.uploads.clone(),
        db.capsules.clone(),
        Arc::new(Metrics::new()),
        UploadLimits {
            max_sessions_per_team: max_sessions,
            ttl,
            max_size: 1 << 30,
            max_chunk: super::MAX_CHUNK_BYTES,
        },
    )
}

fn body(bytes: &[u8]) -> futures::stream::Iter<std::vec::IntoIter<Result<Bytes, String>>> {
    futures::stream::iter(vec![Ok(Bytes::copy_from_slice(bytes))])
}

impl Fixture {
    /// Parts of a third of the capsule: three of them.
    fn part(&self) -> u64 {
        (self.capsule.len() as u64).div_ceil(3)
    }

    /// Part `n` (1-based) of the capsule.
    fn bytes_of(&self, n: u64) -> (u64, &[u8]) {
        let size = self.capsule.len() as u64;
        let start = (n - 1) * self.part();
        let end = (start + self.part()).min(size);
        (start, &self.capsule[start as usize..end as usize])
    }
}

impl Fixture {
    /// Where part `n` (1-based) goes, and its bytes.
    fn range_of(&self, n: u64) -> (ChunkRange, &[u8]) {
        let (offset, bytes) = self.bytes_of(n);
        let range = ChunkRange {
            offset,
            len: bytes.len() as u64,
            total: Some(self.capsule.len() as u64),
        };
        (range, bytes)
    }

    /// A new session of team-a for the capsule, in parts of a third of it.
    async fn session(&self) -> super::SessionView {
        self.uploads
            .start(
                "team-a",
                &self.digest,
                self.capsule.len() as u64,
                Some(self.part()),
            )
            .await
            .expect("start")
    }
}

async fn put(
    uploads: &Uploads,
    f: &Fixture,
    id: &str,
    n: u64,
) -> Result<super::SessionView, UploadError> {
    let (range, bytes) = f.range_of(n);
    uploads.put_chunk("team-a", id, range, body(bytes)).await
}

#[tokio::test]
async fn parts_in_any_order_repeated_then_completed_and_stored() {
    let f = fixture(4, Duration::from_secs(60));
    let size = f.capsule.len() as u64;
    let s = f.session().await;
    assert!(!s.resumed);
    assert_eq!(s.part_bytes, f.part());
    put(&f.uploads, &f, &s.id, 3)
        .await
        .expect("the last part first");
    let view = put(&f.uploads, &f, &s.id, 2)
        .await
        .expect("then the second");
    assert_eq!(view.missing, vec![[0, f.part()]]);
    // Completing now names what is missing.
    match f.uploads.complete("team-a", &s.id).await {
        Err(UploadError::Incomplete { missing }) => assert_eq!(missing, vec![[0, f.part()]]),
        other => panic!("expected incomplete, got {other:?}"),
    }
    // Resuming by digest finds the session, its part size and its progress.
    let again = f
        .uploads
        .start("team-a", &f.digest, size, Some(1))
        .await
        .expect("resume");
    assert!(again.resumed);
    assert_eq!(again.id, s.id);
    assert_eq!(again.part_bytes, f.part());
    assert_eq!(again.received_bytes, size - f.part());
    put(&f.uploads, &f, &s.id, 1).await.expect("first part");
    put(&f.uploads, &f, &s.id, 1)
        .await
        .expect("a repeated part is harmless");
    assert!(!f.objects.exists(&f.digest).await.expect("exists"));
    let done = f.uploads.complete("team-a", &s.id).await.expect("complete");
    assert_eq!(done.capsule.as_str(), f.digest);
    assert!(!done.deduplicated);
    assert!(f.objects.exists(&f.digest).await.expect("exists"));
    // The session is gone, and so are its parts and its assembled object.
    assert!(matches!(
        f.uploads.status("team-a", &s.id).await,
        Err(UploadError::NotFound(_))
    ));
    let key = crate::objects::upload_key(&s.id).expect("key");
    assert_eq!(f.objects.object_len(&key).await.expect("len"), None);
    assert_eq!(leftover_parts(&f), 0);
}

/// Files left in the local store's multipart area.
fn leftover_parts(f: &Fixture) -> usize {
    walk(&f.dir.path().join("objects/.multipart"))
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| {
                if e.path().is_dir() {
                    walk(&e.path())
                } else {
                    1
                }
            })
            .sum()
    })
}

#[tokio::test]
async fn a_session_begun_on_one_gateway_is_resumed_and_completed_on_another() {
    let f = fixture(4, Duration::from_secs(60));
    let b = gateway(
        f.dir.path(),
        local_store(f.dir.path()),
        4,
        Duration::from_secs(60),
    );
    let size = f.capsule.len() as u64;
    let s = f
        .uploads
        .start("team-a", &f.digest, size, Some(f.part()))
        .await
        .expect("start on A");
    put(&f.uploads, &f, &s.id, 1).await.expect("part 1 on A");
    // B knows the session: asking again resumes it there.
    let on_b = b
        .start("team-a", &f.digest, size, None)
        .await
        .expect("resume on B");
    assert!(on_b.resumed);
    assert_eq!(
        (on_b.id.as_str(), on_b.received_bytes),
        (s.id.as_str(), f.part())
    );
    put(&b, &f, &s.id, 2).await.expect("part 2 on B");
    put(&f.uploads, &f, &s.id, 3).await.expect("part 3 on A");
    // Asked on both at once: one completes, the other is told so (or finds it done).
    let (on_a, on_b) = tokio::join!(
        f.uploads.complete("team-a", &s.id),
        b.complete("team-a", &s.id)
    );
    let results = [on_a, on_b];
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    for r in &results {
        assert!(
            matches!(
                r,
                Ok(_) | Err(UploadError::Completing(_) | UploadError::NotFound(_))
            ),
            "{r:?}"
        );
    }
    assert!(f.objects.exists(&f.digest).await.expect("exists"));
    assert!(b.has_capsule("team-a", &s.digest).await.expect("owned"));
}

#[tokio::test]
async fn another_team_does_not_see_the_session() {
    let f = fixture(4, Duration::from_secs(60));
    let s = f
        .uploads
        .start("team-a", &f.digest, f.capsule.len() as u64, None)
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
    let part = f.part();
    let s = f
        .uploads
        .start("team-a", &f.digest, size, Some(part))
        .await
        .expect("start");
    let chunk = |offset, len, total| ChunkRange { offset, len, total };
    for (range, what) in [
        (chunk(size - 1, 2, Some(size)), "past the end"),
        (chunk(0, part, Some(size + 1)), "another total"),
        (chunk(1, part, None), "not at a part's start"),
        (chunk(0, part - 1, None), "not a whole part"),
        (chunk(0, 2 * part, None), "two parts"),
    ] {
        let r = f
            .uploads
            .put_chunk("team-a", &s.id, range, body(&vec![0; range.len as usize]))
            .await;
        assert!(matches!(r, Err(UploadError::BadRange(_))), "{what}: {r:?}");
    }
    let r = f
        .uploads
        .put_chunk("team-a", &s.id, chunk(0, part, None), body(b"abc"))
        .await;
    assert!(
        matches!(r, Err(UploadError::BodyLength { expected, got: 3 }) if expected == part),
        "{r:?}"
    );
    let broken = futures::stream::iter(vec![
        Ok(Bytes::from_static(b"ab")),
        Err("reset".to_string()),
    ]);
    let r = f
        .uploads
        .put_chunk("team-a", &s.id, chunk(0, part, None), broken)
        .await;
    assert!(matches!(r, Err(UploadError::Interrupted(_))), "{r:?}");
    let status = f.uploads.status("team-a", &s.id).await.expect("status");
    assert_eq!(status.received_bytes, 0, "nothing was recorded");
    let r = f.uploads.start("team-a", "not-a-digest", 10, None).await;
    assert!(matches!(r, Err(UploadError::InvalidDigest)), "{r:?}");
    let r = f.uploads.start("team-a", &f.digest, 0, None).await;
    assert!(matches!(r, Err(UploadError::BadSize { .. })), "{r:?}");
    let r = f
        .uploads
        .start("team-a", &hex::encode([9; 32]), 1 << 20, Some(0))
        .await;
    assert!(matches!(r, Err(UploadError::BadPartSize { .. })), "{r:?}");
    // A wish for more than 10 000 parts gets the smallest part size that works.
    let s = f
        .uploads
        .start("team-a", &hex::encode([9; 32]), 1 << 20, Some(1))
        .await
        .expect("start");
    assert_eq!(s.part_bytes, 105);
}

/// A client that goes away once its chunk's body arrived whole (killed right after
/// sending it) still has that chunk stored and recorded: its resume sees it and does
/// not send it again, and every byte is counted once.
#[tokio::test]
async fn a_whole_chunk_is_stored_though_its_client_goes_away() {
    let f = fixture(4, Duration::from_secs(60));
    let s = f.session().await;
    let (range, bytes) = f.range_of(1);
    // The body's end, once read, tells the test to drop the request.
    let (ended, client_gone) = tokio::sync::oneshot::channel::<()>();
    let first = (Some(Bytes::copy_from_slice(bytes)), Some(ended));
    let body = Box::pin(futures::stream::unfold(
        first,
        |(chunk, ended)| async move {
            match chunk {
                Some(b) => Some((Ok::<_, String>(b), (None, ended))),
                None => {
                    if let Some(tx) = ended {
                        let _ = tx.send(());
                    }
                    None
                }
            }
        },
    ));
    tokio::select! {
        biased;
        r = f.uploads.put_chunk("team-a", &s.id, range, body) => {
            panic!("the request ended before its client went away: {r:?}")
        }
        _ = client_gone => {}
    }
    // The request is gone; its chunk's task goes on: recorded, then counted.
    let scrape = crate::metrics::Scrape {
        queue_depth: Default::default(),
        team_depth: Default::default(),
        capacity: &[],
        fleets: &[],
        policy_version: 0,
    };
    let counted = format!("forge_upload_bytes_total {}", range.len);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = f.uploads.inner.metrics.render(&scrape, false);
        if text.lines().any(|l| l == counted) {
            break;
        }
        let upload: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("forge_upload"))
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the chunk was never counted once: {upload:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let view = f.uploads.status("team-a", &s.id).await.expect("status");
    assert_eq!(view.received_bytes, range.len, "recorded once: {view:?}");
}

#[tokio::test]
async fn corrupted_or_foreign_bytes_are_not_stored() {
    let f = fixture(4, Duration::from_secs(60));
    let size = f.capsule.len();
    // Bytes that do not hash to the declared digest.
    let s = f
        .uploads
        .start("team-a", &f.digest, size as u64, None)
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
    assert!(matches!(
        f.uploads.status("team-a", &s.id).await,
        Err(UploadError::NotFound(_))
    ));

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
        .start("team-a", &digest, foreign.len() as u64, None)
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
    assert_eq!(leftover_parts(&f), 0);
}

#[tokio::test]
async fn sessions_are_bounded_per_team_and_abandoned_ones_are_swept() {
    let f = fixture(2, Duration::from_millis(1));
    let d = |i: u8| hex::encode([i; 32]);
    let a = f
        .uploads
        .start("team-a", &d(1), 10, None)
        .await
        .expect("first");
    f.uploads
        .start("team-a", &d(2), 10, None)
        .await
        .expect("second");
    f.uploads
        .start("team-b", &d(3), 10, None)
        .await
        .expect("another team has its own budget");
    // At the limit, expired sessions are swept first (the TTL here is 1 ms).
    tokio::time::sleep(Duration::from_millis(5)).await;
    f.uploads
        .start("team-a", &d(4), 10, None)
        .await
        .expect("after the sweep");
    assert!(matches!(
        f.uploads.status("team-a", &a.id).await,
        Err(UploadError::NotFound(_))
    ));
    assert_eq!(leftover_parts(&f), 0, "its multipart upload is aborted");

    let f = fixture(1, Duration::from_secs(3600));
    f.uploads
        .start("team-a", &d(1), 10, None)
        .await
        .expect("first");
    match f.uploads.start("team-a", &d(2), 10, None).await {
        Err(UploadError::TooManySessions { limit: 1, open }) => assert_eq!(open.len(), 1),
        other => panic!("expected the limit, got {other:?}"),
    }
    assert_eq!(f.uploads.sweep().await, 0, "nothing has expired");
}
