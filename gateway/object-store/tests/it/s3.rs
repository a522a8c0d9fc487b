//! The S3 store against a real S3-compatible server (s3s-fs in-process, strict
//! SigV4): upload, dedupe, presigned URLs (fetched, expired, tampered), start-up
//! checks, multipart with end-to-end verification, log objects.

use std::time::Duration;

use forge_object_store::{ObjectStore, PutOutcome, S3Store, StoreError, capsule_key, log_key};
use sha2::{Digest, Sha256};

use crate::support::{
    S3Server, blob, incompressible_blob, listing_pages_and_deletes, s3_config, small_capsule,
};

async fn store(srv: &S3Server) -> S3Store {
    let s = S3Store::connect(s3_config(srv)).await.expect("connect");
    s.check()
        .await
        .expect("check passes with the right credentials");
    s
}

async fn last_modified(s: &S3Store, bucket: &str, key: &str) -> String {
    let h = s
        .client()
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("head");
    format!("{:?}/{:?}", h.last_modified(), h.e_tag())
}

#[tokio::test]
async fn upload_then_dedupe_uploads_nothing() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let cap = small_capsule(tmp.path());
    assert!(!s.exists(&cap.digest).await.expect("exists"));
    assert_eq!(
        s.put_file(&cap.digest, &cap.path).await.expect("put"),
        PutOutcome::Uploaded { parts: 1 }
    );
    assert!(s.exists(&cap.digest).await.expect("exists"));
    let key = capsule_key(&cap.digest).expect("key");
    let stored = s.get_object(&key).await.expect("get");
    assert_eq!(
        stored.as_ref(),
        std::fs::read(&cap.path).expect("read").as_slice()
    );
    // The object is on the server's disk under the documented key.
    assert!(srv.root.path().join(&srv.bucket).join(&key).is_file());
    let before = last_modified(&s, &srv.bucket, &key).await;

    // The same bytes again (another file): same digest, nothing uploaded.
    let again = blob(
        tmp.path(),
        "again.zip",
        &std::fs::read(&cap.path).expect("read"),
    );
    assert_eq!(again.digest, cap.digest);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        s.put_file(&again.digest, &again.path).await.expect("put"),
        PutOutcome::AlreadyPresent
    );
    let stats = s.stats();
    assert_eq!(
        (stats.uploads(), stats.skipped(), stats.parts_uploaded()),
        (1, 1, 1)
    );
    assert_eq!(
        last_modified(&s, &srv.bucket, &key).await,
        before,
        "object untouched"
    );
}

#[tokio::test]
async fn presigned_url_fetch_expiry_and_tampering() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let cap = small_capsule(tmp.path());
    s.put_file(&cap.digest, &cap.path).await.expect("put");
    let http = reqwest::Client::new();

    // A TTL beyond 7 days is clamped, not refused.
    let url = s
        .get_url(&cap.digest, Duration::from_secs(30 * 24 * 3600))
        .await
        .expect("presign");
    let expires: u64 = url
        .query_pairs()
        .find(|(k, _)| k == "X-Amz-Expires")
        .expect("expiry param")
        .1
        .parse()
        .expect("int");
    assert_eq!(expires, 7 * 24 * 3600);
    let r = http.get(url.clone()).send().await.expect("GET");
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.expect("body");
    assert_eq!(
        hex::encode(Sha256::digest(&body)),
        cap.digest,
        "exact bytes"
    );

    // Tampered signature.
    let mut bad = url.clone();
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "X-Amz-Signature" {
                let mut c: Vec<char> = v.chars().collect();
                c[0] = if c[0] == '0' { '1' } else { '0' };
                c.into_iter().collect()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    bad.query_pairs_mut().clear().extend_pairs(pairs);
    assert_eq!(http.get(bad).send().await.expect("GET").status(), 403);

    // Another key with the same signature.
    let other = url.as_str().replace(&cap.digest, &"0".repeat(64));
    assert_eq!(http.get(other).send().await.expect("GET").status(), 403);

    // Expired.
    let short = s
        .get_url(&cap.digest, Duration::from_secs(1))
        .await
        .expect("presign");
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(http.get(short).send().await.expect("GET").status(), 403);
}

#[tokio::test]
async fn check_reports_wrong_credentials_missing_bucket_and_unreachable() {
    let srv = S3Server::start();
    let mut cfg = s3_config(&srv);
    cfg.secret_key = "wrong-secret-key-0000000000000000".into();
    let s = S3Store::connect(cfg).await.expect("connect");
    let e = s.check().await.expect_err("wrong secret");
    assert!(matches!(e, StoreError::Credentials(_)), "{e:?}");
    assert!(e.to_string().contains("credentials"), "{e}");

    let mut cfg = s3_config(&srv);
    cfg.access_key = "NOSUCHKEY".into();
    let e = S3Store::connect(cfg)
        .await
        .expect("connect")
        .check()
        .await
        .expect_err("unknown key");
    assert!(matches!(e, StoreError::Credentials(_)), "{e:?}");

    let mut cfg = s3_config(&srv);
    cfg.bucket = "missing".into();
    let e = S3Store::connect(cfg)
        .await
        .expect("connect")
        .check()
        .await
        .expect_err("no bucket");
    assert!(
        matches!(e, StoreError::BucketMissing(ref b) if b == "missing"),
        "{e:?}"
    );

    let mut cfg = s3_config(&srv);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    cfg.endpoint = format!("http://127.0.0.1:{port}");
    cfg.max_attempts = 1;
    let e = S3Store::connect(cfg)
        .await
        .expect("connect")
        .check()
        .await
        .expect_err("nothing listens");
    assert!(matches!(e, StoreError::Unreachable { .. }), "{e:?}");
}

#[tokio::test]
async fn multipart_upload_of_a_capsule_over_100_mib() {
    let srv = S3Server::start();
    let mut cfg = s3_config(&srv);
    cfg.part_size = 32 << 20;
    cfg.multipart_threshold = 64 << 20;
    let s = S3Store::connect(cfg).await.expect("connect");
    s.check().await.expect("check");
    let tmp = tempfile::tempdir().expect("tmp");
    let cap = incompressible_blob(tmp.path(), "big.zip", 110);
    assert!(cap.size > 100 << 20);
    let outcome = s
        .put_file(&cap.digest, &cap.path)
        .await
        .expect("multipart put");
    assert_eq!(outcome, PutOutcome::Uploaded { parts: 4 });
    assert_eq!(s.stats().parts_uploaded(), 4);

    let url = s
        .get_url(&cap.digest, Duration::from_secs(600))
        .await
        .expect("presign");
    let body = reqwest::get(url)
        .await
        .expect("GET")
        .bytes()
        .await
        .expect("body");
    assert_eq!(body.len() as u64, cap.size);
    assert_eq!(hex::encode(Sha256::digest(&body)), cap.digest);
    // Dedupe holds for multipart objects too.
    assert_eq!(
        s.put_file(&cap.digest, &cap.path).await.expect("put"),
        PutOutcome::AlreadyPresent
    );
}

#[tokio::test]
async fn put_file_refuses_bytes_that_do_not_match_the_digest() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join("x.zip");
    std::fs::write(&p, b"not what the digest says").expect("write");
    let digest = hex::encode(Sha256::digest(b"something else"));
    let e = s.put_file(&digest, &p).await.expect_err("mismatch refused");
    assert!(
        matches!(e, StoreError::Request(_) | StoreError::Integrity { .. }),
        "{e:?}"
    );
    assert!(!s.exists(&digest).await.expect("exists"), "nothing stored");
}

#[tokio::test]
async fn log_objects_round_trip() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    let key = log_key("job-42", "head").expect("key");
    s.put_object(&key, bytes::Bytes::from_static(b"line 1\nline 2\n"))
        .await
        .expect("put");
    assert_eq!(
        s.get_object(&key).await.expect("get").as_ref(),
        b"line 1\nline 2\n"
    );
    let e = s
        .get_object("logs/job-42/missing.log")
        .await
        .expect_err("missing");
    assert!(matches!(e, StoreError::NotFound(_)), "{e:?}");
    assert!(matches!(
        s.put_object("../x", bytes::Bytes::new()).await,
        Err(StoreError::InvalidKey(_))
    ));
}

#[tokio::test]
async fn objects_are_listed_in_pages_and_deleted() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    listing_pages_and_deletes(&s).await;
}

#[tokio::test]
async fn multipart_uploads_filled_part_by_part_assemble_and_abort() {
    let srv = S3Server::start();
    let s = store(&srv).await;
    assert_eq!(s.min_part_bytes(), 5 << 20);
    crate::support::multipart_parts_assemble_in_order_and_abort(&s, 5 << 20).await;
}
