//! One upload session on local disk: `<data dir>/uploads/<id>/session.json` (this
//! record, replaced atomically after every accepted chunk) beside `data` (a sparse
//! file of the declared size that chunks are written into at their offsets). Both
//! survive a gateway restart, so a client resumes an upload across one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::UploadError;
use super::ranges::RangeSet;
use crate::domain::Digest;

/// The record of one session.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: String,
    pub team: String,
    /// The SHA-256 the finished bytes must have.
    pub digest: Digest,
    /// Total bytes.
    pub size: u64,
    pub created_at_ms: i64,
    /// Last accepted chunk (or the start): the age the sweeper goes by.
    pub touched_at_ms: i64,
    /// What has arrived.
    pub received: RangeSet,
    /// Set once completed or aborted: late chunks find the session gone.
    #[serde(skip)]
    pub gone: bool,
}

/// What the API shows of a session.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub id: String,
    pub digest: Digest,
    pub size: u64,
    /// Byte ranges present (`[start, end)`), merged.
    pub received: Vec<[u64; 2]>,
    pub received_bytes: u64,
    /// Byte ranges still to send (`[start, end)`).
    pub missing: Vec<[u64; 2]>,
    /// Largest chunk one PUT may carry.
    pub max_chunk_bytes: u64,
    /// When the session is removed if nothing more arrives (Unix ms).
    pub expires_at_ms: i64,
    /// Whether an open session for the same digest was found (a resumed upload).
    pub resumed: bool,
}

impl Session {
    /// The session's directory under `root`.
    pub fn dir(root: &Path, id: &str) -> PathBuf {
        root.join(id)
    }

    /// The data file under `root`.
    pub fn data(root: &Path, id: &str) -> PathBuf {
        Self::dir(root, id).join("data")
    }

    /// The view the API returns.
    pub fn view(&self, max_chunk: u64, ttl_ms: i64, resumed: bool) -> SessionView {
        SessionView {
            id: self.id.clone(),
            digest: self.digest.clone(),
            size: self.size,
            received: self.received.ranges().to_vec(),
            received_bytes: self.received.covered(),
            missing: self.received.missing(self.size),
            max_chunk_bytes: max_chunk,
            expires_at_ms: self.touched_at_ms.saturating_add(ttl_ms),
            resumed,
        }
    }

    /// Writes the record atomically (temp file + rename).
    pub async fn persist(&self, root: &Path) -> Result<(), UploadError> {
        let dir = Self::dir(root, &self.id);
        let bytes = serde_json::to_vec(self).map_err(|e| UploadError::io("session record", e))?;
        let tmp = dir.join("session.json.tmp");
        tokio::fs::write(&tmp, bytes)
            .await
            .map_err(|e| UploadError::io("writing the session record", e))?;
        tokio::fs::rename(&tmp, dir.join("session.json"))
            .await
            .map_err(|e| UploadError::io("writing the session record", e))
    }

    /// Reads every session under `root` (at start-up); a directory without a
    /// readable record is removed.
    pub fn load_all(root: &Path) -> Vec<Session> {
        let Ok(entries) = std::fs::read_dir(root) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let record = std::fs::read(path.join("session.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Session>(&b).ok());
            match record {
                Some(s) if path.file_name().is_some_and(|n| n == s.id.as_str()) => out.push(s),
                _ => {
                    tracing::warn!(dir = %path.display(), "removing an unreadable upload session");
                    if let Err(e) = std::fs::remove_dir_all(&path) {
                        tracing::warn!(dir = %path.display(), "removing it failed: {e}");
                    }
                }
            }
        }
        out
    }
}
