//! The embedded local store (dev mode): signed, expiring URLs served by the
//! gateway's own router; tampered/expired URLs get 403.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use forge_object_store::{LocalStore, ObjectStore, PutOutcome, StoreError, UrlError, local_routes};
use sha2::{Digest, Sha256};

use crate::support::small_capsule;

async fn serve(store: Arc<LocalStore>) -> (tokio::task::JoinHandle<()>, u16) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let app = local_routes(store);
    let h = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("serve");
    });
    (h, port)
}

#[tokio::test]
async fn signed_urls_work_and_tampered_or_expired_get_403() {
    let data = tempfile::tempdir().expect("tmp");
    let tmp = tempfile::tempdir().expect("tmp");
    let cap = small_capsule(tmp.path());

    // Bind first to learn the port, then build the store with that base URL.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let base = url::Url::parse(&format!("http://127.0.0.1:{port}/")).expect("url");
    let store = Arc::new(
        LocalStore::new(data.path(), b"0123456789abcdef-test-key".to_vec(), base).expect("store"),
    );
    let app = local_routes(store.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });

    assert_eq!(
        store.put_file(&cap.digest, &cap.path).await.expect("put"),
        PutOutcome::Uploaded { parts: 1 }
    );
    assert_eq!(
        store.put_file(&cap.digest, &cap.path).await.expect("put"),
        PutOutcome::AlreadyPresent
    );
    assert_eq!((store.stats().uploads(), store.stats().skipped()), (1, 1));

    let url = store
        .get_url(&cap.digest, Duration::from_secs(300))
        .await
        .expect("url");
    assert!(
        url.path()
            .ends_with(&format!("/v1/capsules/{}.zip", cap.digest))
    );
    let r = reqwest::get(url.clone()).await.expect("GET");
    assert_eq!(r.status(), 200);
    let body = r.bytes().await.expect("body");
    assert_eq!(hex::encode(Sha256::digest(&body)), cap.digest);

    // Tampered signature, tampered expiry, no signature.
    let sig: String = url
        .query_pairs()
        .find(|(k, _)| k == "sig")
        .expect("sig")
        .1
        .into_owned();
    let flipped = format!(
        "{}{}",
        if sig.starts_with('0') { '1' } else { '0' },
        &sig[1..]
    );
    let t1 = url.as_str().replace(&sig, &flipped);
    assert_eq!(reqwest::get(t1).await.expect("GET").status(), 403);
    let exp: String = url
        .query_pairs()
        .find(|(k, _)| k == "expires")
        .expect("expires")
        .1
        .into_owned();
    let later: u64 = exp.parse::<u64>().expect("int") + 10_000;
    let t2 = url
        .as_str()
        .replace(&format!("expires={exp}"), &format!("expires={later}"));
    assert_eq!(reqwest::get(t2).await.expect("GET").status(), 403);
    let bare = format!("http://127.0.0.1:{port}/v1/capsules/{}.zip", cap.digest);
    assert_eq!(reqwest::get(bare).await.expect("GET").status(), 403);

    // Expired (validly signed for a time in the past).
    let past = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        - 5;
    let expired = store.signed_url(&cap.digest, past).expect("url");
    let r = reqwest::get(expired).await.expect("GET");
    assert_eq!(r.status(), 403);
    assert!(r.text().await.expect("text").contains("expired"));
    assert_eq!(
        store.verify(&cap.digest, past, &sig),
        Err(UrlError::BadSignature)
    );
    server.abort();
}

#[tokio::test]
async fn local_store_refuses_wrong_digest_and_bad_keys() {
    let data = tempfile::tempdir().expect("tmp");
    let base = url::Url::parse("http://127.0.0.1:1/").expect("url");
    let store = Arc::new(LocalStore::new(data.path(), vec![7u8; 32], base).expect("store"));
    let (server, _port) = serve(store.clone()).await;
    let f = data.path().join("x.zip");
    std::fs::write(&f, b"bytes").expect("write");
    let digest = hex::encode(Sha256::digest(b"other bytes"));
    let e = store.put_file(&digest, &f).await.expect_err("mismatch");
    assert!(matches!(e, StoreError::Integrity { .. }), "{e:?}");
    assert!(!store.exists(&digest).await.expect("exists"));
    assert!(matches!(
        store.put_file("../../etc", &f).await,
        Err(StoreError::InvalidKey(_))
    ));
    assert!(
        LocalStore::new(
            data.path(),
            b"short".to_vec(),
            url::Url::parse("http://x/").expect("url")
        )
        .is_err()
    );
    store
        .put_object("logs/j1/head.log", bytes::Bytes::from_static(b"log"))
        .await
        .expect("put");
    assert_eq!(
        store
            .get_object("logs/j1/head.log")
            .await
            .expect("get")
            .as_ref(),
        b"log"
    );
    server.abort();
}

#[tokio::test]
async fn objects_are_listed_in_pages_and_deleted() {
    let data = tempfile::tempdir().expect("tmp");
    let base = url::Url::parse("http://127.0.0.1:1/").expect("url");
    let store = LocalStore::new(data.path(), vec![7u8; 32], base).expect("store");
    crate::support::listing_pages_and_deletes(&store).await;
    // The emptied job folder went with its last object; the store's folders stay.
    assert!(!data.path().join("logs/job-1").exists());
    assert!(data.path().join("logs/job-2").is_dir());
}

#[tokio::test]
async fn multipart_uploads_filled_part_by_part_assemble_and_abort() {
    let data = tempfile::tempdir().expect("tmp");
    let base = url::Url::parse("http://127.0.0.1:1/").expect("url");
    let store = LocalStore::new(data.path(), vec![7u8; 32], base).expect("store");
    crate::support::multipart_parts_assemble_in_order_and_abort(&store, 1000).await;
    // Aborting an upload that is gone is fine (as S3's NoSuchUpload is, here).
    let key = forge_object_store::upload_key("session-2").expect("key");
    let id = store.start_multipart(&key).await.expect("start");
    store.abort_multipart(&key, &id).await.expect("abort");
    store.abort_multipart(&key, &id).await.expect("abort twice");
    // Nothing is left of either upload.
    let left = std::fs::read_dir(data.path().join(".multipart")).map_or(0, |d| d.count());
    assert_eq!(left, 0);
}
