//! Uploading a capsule in resumable chunks (`/v1/uploads`): start (or find the open
//! session for the same digest — so an interrupted `forge submit` resumes by being
//! run again), send only the missing byte ranges, each retried on a network error,
//! then complete (the gateway checks the digest and the capsule).

use std::io::SeekFrom;
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::api::Api;
use crate::exit::CliError;
use crate::output::bytes;
use crate::progress::{Bar, note};

/// Attempts of one chunk.
const ATTEMPTS: u32 = 4;
/// How long to wait for the gateway to verify a completed upload.
const VERIFY_WAIT: Duration = Duration::from_secs(30 * 60);

/// The session as the gateway shows it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Session {
    id: String,
    received_bytes: u64,
    missing: Vec<[u64; 2]>,
    /// Every chunk is one part of this many bytes (the last one shorter).
    part_bytes: u64,
    resumed: bool,
}

/// Uploads the capsule at `path` (`size` bytes, SHA-256 `digest`) in chunks of
/// `chunk` bytes (the session's parts; a resumed session keeps the part size it was
/// started with); returns the stored capsule's digest.
pub async fn upload(
    api: &Api,
    path: &Path,
    digest: &str,
    size: u64,
    chunk: u64,
) -> Result<String, CliError> {
    let session: Session = api
        .call(
            Method::POST,
            "/v1/uploads",
            &json!({"size": size, "digest": digest, "partBytes": chunk.min(size).max(1)}),
        )
        .await?;
    if session.resumed {
        note(format!(
            "resuming upload {}: {} of {} already there",
            session.id,
            bytes(session.received_bytes),
            bytes(size)
        ));
    }
    // Each chunk is one whole part: missing ranges start at part boundaries.
    let chunk = session.part_bytes.max(1);
    let bar = Bar::new("uploading", size);
    bar.skip(session.received_bytes);
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| CliError::local(path.display(), e))?;
    for [start, end] in &session.missing {
        let mut at = *start;
        while at < *end {
            let len = chunk.min(end - at);
            let mut buf = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
            file.seek(SeekFrom::Start(at))
                .await
                .map_err(|e| CliError::local(path.display(), e))?;
            file.read_exact(&mut buf)
                .await
                .map_err(|e| CliError::local(path.display(), e))?;
            if let Err(e) = put_chunk(api, &session.id, at, buf, size).await {
                bar.abandon();
                return Err(e);
            }
            bar.inc(len);
            at += len;
        }
    }
    let done: Result<serde_json::Value, CliError> = api
        .call(
            Method::POST,
            &format!("/v1/uploads/{}/complete", session.id),
            &json!({}),
        )
        .await;
    let stored = match done {
        Ok(done) => done["capsule"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| CliError::Upload("the gateway did not name the stored capsule".into())),
        // A large capsule can take longer to verify than a request may last: the
        // gateway goes on, and the capsule appears when it is done. The same when
        // another request (an earlier run of this command) is completing it.
        Err(
            CliError::Unreachable { .. }
            | CliError::Api {
                status: 408 | 502..=504,
                ..
            },
        ) => wait_stored(api, &session.id, digest).await,
        Err(CliError::Api { code, .. }) if code == "upload.completing" => {
            wait_stored(api, &session.id, digest).await
        }
        Err(e) => Err(e),
    };
    match &stored {
        Ok(_) => bar.finish(&format!("uploaded {}", bytes(size))),
        Err(_) => bar.abandon(),
    }
    stored
}

/// Waits for the gateway to finish verifying session `id`: the capsule appears, or
/// the session disappears without it (refused).
async fn wait_stored(api: &Api, id: &str, digest: &str) -> Result<String, CliError> {
    note("the gateway is still verifying the upload; waiting");
    let deadline = tokio::time::Instant::now() + VERIFY_WAIT;
    loop {
        // The session first: once it is gone the capsule is stored, or never will be.
        let gone = match api
            .send(api.request(Method::GET, &format!("/v1/uploads/{id}")))
            .await
        {
            Err(CliError::Api { status: 404, .. }) => true,
            // Answered once the verification lets go of the session (or timed out).
            Ok(_)
            | Err(
                CliError::Unreachable { .. }
                | CliError::Api {
                    status: 408 | 502..=504,
                    ..
                },
            ) => false,
            Err(e) => return Err(e),
        };
        let capsule = api.send(api.request(Method::GET, &format!("/v1/team-capsules/{digest}")));
        match capsule.await {
            Ok(_) => return Ok(digest.to_string()),
            Err(CliError::Api { status: 404, .. }) if gone => {
                return Err(CliError::Upload(
                    "the gateway refused the upload after checking it; run the command again"
                        .into(),
                ));
            }
            Err(CliError::Api { status: 404, .. } | CliError::Unreachable { .. }) => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() > deadline {
            return Err(CliError::Upload(format!(
                "the gateway did not finish verifying the upload within {} minutes",
                VERIFY_WAIT.as_secs() / 60
            )));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// PUTs one chunk, retrying network failures and 5xx answers with a backoff.
async fn put_chunk(api: &Api, id: &str, at: u64, buf: Vec<u8>, size: u64) -> Result<(), CliError> {
    let last = at + buf.len() as u64 - 1;
    let body = bytes::Bytes::from(buf);
    let mut wait = Duration::from_millis(250);
    for attempt in 1..=ATTEMPTS {
        let req = api
            .request(Method::PUT, &format!("/v1/uploads/{id}"))
            .header("content-range", format!("bytes {at}-{last}/{size}"))
            .header("content-type", "application/octet-stream")
            .body(body.clone());
        match api.send(req).await {
            Ok(_) => return Ok(()),
            Err(
                e @ (CliError::Unreachable { .. }
                | CliError::Api {
                    status: 500..=599, ..
                }),
            ) if attempt < ATTEMPTS => {
                note(format!("chunk at {at}: {e}; retrying"));
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(CliError::Unreachable { url, detail }) => {
                return Err(CliError::Upload(format!(
                    "upload interrupted ({detail} at {url}); run the same command again to resume"
                )));
            }
            Err(e) => return Err(e),
        }
    }
    Err(CliError::Upload("upload failed".into()))
}
