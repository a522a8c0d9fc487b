//! Shared helpers of the object-store tests: the in-process S3 server (from
//! `forge-testkit`, shared with the workspace's end-to-end tests) and a store config
//! for it, and capsule-like files with their content address. The stores only see
//! "a file whose SHA-256 is `digest`", so the tests need no real capsule.

use std::path::{Path, PathBuf};

use forge_object_store::{LOGS, MAX_LIST_PAGE, ObjectStore, S3Config, StoreError, job_logs_prefix};
use sha2::{Digest, Sha256};

pub use forge_testkit::s3::S3Server;

/// The S3 store settings for `srv` (defaults for everything else).
pub fn s3_config(srv: &S3Server) -> S3Config {
    S3Config::new(&srv.endpoint, &srv.bucket, &srv.access_key, &srv.secret_key)
}

/// A file on disk and the content address it is stored under.
pub struct Blob {
    pub path: PathBuf,
    /// Hex SHA-256 of the bytes.
    pub digest: String,
    pub size: u64,
}

/// Write `bytes` to `dir/name`.
pub fn blob(dir: &Path, name: &str, bytes: &[u8]) -> Blob {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write blob");
    Blob {
        path,
        digest: hex::encode(Sha256::digest(bytes)),
        size: bytes.len() as u64,
    }
}

/// `mib` MiB of incompressible pseudo-random bytes (xorshift) written to `dir/name`
/// 1 MiB at a time, hashed as they are written.
pub fn incompressible_blob(dir: &Path, name: &str, mib: u64) -> Blob {
    use std::io::Write;
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).expect("create blob");
    let mut sha = Sha256::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            chunk.copy_from_slice(&x.to_le_bytes());
        }
        f.write_all(&buf).expect("write blob");
        sha.update(&buf);
    }
    Blob {
        path,
        digest: hex::encode(sha.finalize()),
        size: mib << 20,
    }
}

/// A small zip-like file standing in for a capsule.
pub fn small_capsule(dir: &Path) -> Blob {
    blob(
        dir,
        "capsule.zip",
        b"PK\x03\x04 capsule/train.py print('hi')\n",
    )
}

/// The listing and delete contract both stores keep: a folder is listed in key order
/// with each object's size and write time, in pages continued after the last key; a
/// prefix lists only its folder; deleting removes the object, and deleting it again (or
/// any absent key) is not an error; keys outside the scheme are refused.
pub async fn listing_pages_and_deletes(store: &dyn ObjectStore) {
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let keys = [
        "logs/job-1/pods.json",
        "logs/job-1/pods/p-head/ray-head.log",
        "logs/job-1/pods/p-worker/ray-worker.log",
        "logs/job-2/driver.log",
        "plugins/x.wasm",
    ];
    for (i, key) in keys.iter().enumerate() {
        store
            .put_object(key, bytes::Bytes::from(vec![b'x'; i + 1]))
            .await
            .expect("put");
    }
    let all = store
        .list_page(LOGS, None, MAX_LIST_PAGE)
        .await
        .expect("list");
    let listed: Vec<(&str, u64)> = all.iter().map(|o| (o.key.as_str(), o.size)).collect();
    assert_eq!(
        listed,
        vec![
            ("logs/job-1/pods.json", 1),
            ("logs/job-1/pods/p-head/ray-head.log", 2),
            ("logs/job-1/pods/p-worker/ray-worker.log", 3),
            ("logs/job-2/driver.log", 4),
        ]
    );
    let before = i64::try_from(before).expect("ms") - 5_000;
    assert!(all.iter().all(|o| o.modified_ms >= before), "{all:?}");
    // Pages of two, continued after the last key.
    let first = store.list_page(LOGS, None, 2).await.expect("page 1");
    assert_eq!(first.len(), 2);
    let rest = store
        .list_page(LOGS, Some(&first[1].key), 2)
        .await
        .expect("page 2");
    assert_eq!(
        rest.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(),
        vec![
            "logs/job-1/pods/p-worker/ray-worker.log",
            "logs/job-2/driver.log"
        ]
    );
    // One job's folder.
    let job1 = job_logs_prefix("job-1").expect("prefix");
    let mine = store
        .list_page(&job1, None, MAX_LIST_PAGE)
        .await
        .expect("job-1");
    assert_eq!(mine.len(), 3, "{mine:?}");
    for o in &mine {
        store.delete_object(&o.key).await.expect("delete");
    }
    store
        .delete_object("logs/job-1/pods.json")
        .await
        .expect("deleting an absent object is not an error");
    assert!(
        store
            .list_page(&job1, None, MAX_LIST_PAGE)
            .await
            .expect("job-1 again")
            .is_empty()
    );
    assert!(matches!(
        store.get_object("logs/job-1/pods.json").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(
        store
            .list_page(LOGS, None, MAX_LIST_PAGE)
            .await
            .expect("logs")
            .len(),
        1,
        "the other job's log stays"
    );
    assert!(matches!(
        store.delete_object("../x").await,
        Err(StoreError::InvalidKey(_))
    ));
}

/// A multipart upload filled part by part, out of order and with a part sent twice,
/// is assembled in part order; an aborted one is gone.
pub async fn multipart_parts_assemble_in_order_and_abort(store: &dyn ObjectStore, part: usize) {
    let key = forge_object_store::upload_key("session-1").expect("key");
    let bytes: Vec<u8> = (0..part * 2 + 10).map(|i| (i % 251) as u8).collect();
    let pieces = [&bytes[..part], &bytes[part..2 * part], &bytes[2 * part..]];
    let id = store.start_multipart(&key).await.expect("start");
    let mut tags = Vec::new();
    for (number, piece) in [(3u32, pieces[2]), (1, pieces[0]), (2, pieces[1])] {
        let tag = store
            .put_part(&key, &id, number, bytes::Bytes::copy_from_slice(piece))
            .await
            .expect("part");
        tags.push((number, tag));
    }
    // A repeated part replaces the first: the tag of the last one counts.
    let again = store
        .put_part(&key, &id, 1, bytes::Bytes::copy_from_slice(pieces[0]))
        .await
        .expect("part again");
    tags.retain(|(n, _)| *n != 1);
    tags.push((1, again));
    tags.sort();
    store
        .complete_multipart(&key, &id, &tags)
        .await
        .expect("complete");
    assert_eq!(
        store.get_object(&key).await.expect("get").as_ref(),
        &bytes[..]
    );
    store.delete_object(&key).await.expect("delete");

    // Aborted: its parts are gone and completing it fails.
    let id = store.start_multipart(&key).await.expect("start");
    let tag = store
        .put_part(&key, &id, 1, bytes::Bytes::from_static(b"abc"))
        .await
        .expect("part");
    store.abort_multipart(&key, &id).await.expect("abort");
    assert!(
        store
            .complete_multipart(&key, &id, &[(1, tag)])
            .await
            .is_err()
    );
    assert!(matches!(
        store.get_object(&key).await,
        Err(StoreError::NotFound(_))
    ));
}
