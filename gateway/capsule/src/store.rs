//! The object-store interface shared by the S3 and local (dev) stores, and
//! the key scheme of everything Forge archives.
//!
//! Key scheme (one function each, so every component agrees):
//! - capsules: `capsules/<sha256 hex>.zip` ([`capsule_key`])
//! - job logs: `logs/<job-id>/<name>.log` ([`log_key`])
//! - policy plugins: `plugins/<sha256 hex>.wasm` ([`plugin_key`])

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use url::Url;

/// Errors of object stores. `Credentials`/`BucketMissing`/`Unreachable` are
/// start-up configuration problems reported by `check()`.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("object store rejected the credentials (access key / secret key): {0}")]
    Credentials(String),
    #[error("bucket {0:?} does not exist")]
    BucketMissing(String),
    #[error("object store unreachable at {endpoint}: {message}")]
    Unreachable { endpoint: String, message: String },
    #[error("object {0:?} not found")]
    NotFound(String),
    #[error("invalid key or digest {0:?}")]
    InvalidKey(String),
    #[error("integrity check failed for {key}: expected {expected}, got {actual}")]
    Integrity {
        key: String,
        expected: String,
        actual: String,
    },
    #[error("invalid store configuration: {0}")]
    Config(String),
    #[error("object store request failed: {0}")]
    Request(String),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// What `put_file` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The bytes were uploaded (`parts` = 1 for a single PUT).
    Uploaded { parts: u32 },
    /// The object already existed (content-addressed): nothing was sent.
    AlreadyPresent,
}

/// Counters of one store instance (for metrics and tests).
#[derive(Debug, Default)]
pub struct StoreStats {
    pub uploads: AtomicU64,
    pub skipped: AtomicU64,
    pub bytes_uploaded: AtomicU64,
    pub parts_uploaded: AtomicU64,
}

impl StoreStats {
    pub fn uploads(&self) -> u64 {
        self.uploads.load(Ordering::Relaxed)
    }
    pub fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
    pub fn bytes_uploaded(&self) -> u64 {
        self.bytes_uploaded.load(Ordering::Relaxed)
    }
    pub fn parts_uploaded(&self) -> u64 {
        self.parts_uploaded.load(Ordering::Relaxed)
    }
}

/// A content-addressed capsule store plus plain objects (logs).
#[async_trait::async_trait]
pub trait CapsuleStore: Send + Sync {
    /// Whether the capsule `digest` is stored.
    async fn exists(&self, digest: &str) -> Result<bool, StoreError>;
    /// Store the capsule file at `path` whose SHA-256 is `digest`; skipped when
    /// it already exists. The bytes are verified against `digest`.
    async fn put_file(&self, digest: &str, path: &Path) -> Result<PutOutcome, StoreError>;
    /// A URL any HTTP client can GET the capsule from until `ttl` elapses
    /// (S3 caps this at 7 days; see `S3Store`).
    async fn get_url(&self, digest: &str, ttl: Duration) -> Result<Url, StoreError>;
    /// Store an arbitrary object (e.g. an archived log) under `key`.
    async fn put_object(&self, key: &str, body: Bytes) -> Result<(), StoreError>;
    /// Store a file under `key`, streaming it.
    async fn put_object_file(&self, key: &str, path: &Path) -> Result<(), StoreError>;
    /// Fetch an object stored with `put_object*` or `put_file`.
    async fn get_object(&self, key: &str) -> Result<Bytes, StoreError>;
    /// Counters.
    fn stats(&self) -> Arc<StoreStats>;
}

/// `capsules/<sha256>.zip`; errors unless `digest` is 64 lowercase hex chars.
pub fn capsule_key(digest: &str) -> Result<String, StoreError> {
    validate_digest(digest)?;
    Ok(format!("capsules/{digest}.zip"))
}

/// `logs/<job-id>/<name>.log`; both parts must be `[A-Za-z0-9._-]+` and not
/// start with a dot.
pub fn log_key(job_id: &str, name: &str) -> Result<String, StoreError> {
    for part in [job_id, name] {
        let ok = !part.is_empty()
            && part.len() <= 128
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !ok {
            return Err(StoreError::InvalidKey(part.to_owned()));
        }
    }
    Ok(format!("logs/{job_id}/{name}.log"))
}

/// Check a capsule digest: 64 lowercase hex characters.
pub fn validate_digest(digest: &str) -> Result<(), StoreError> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(StoreError::InvalidKey(digest.to_owned()))
    }
}

/// Key of a policy plugin component by its `sha256:<hex>` (or bare hex) digest.
pub fn plugin_key(digest: &str) -> Result<String, StoreError> {
    let hexd = digest.trim_start_matches("sha256:");
    validate_digest(hexd)?;
    Ok(format!("plugins/{hexd}.wasm"))
}

/// Check a generic object key: relative, `/`-separated, no empty, `.` or
/// `..` components, limited charset.
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    let ok = !key.is_empty()
        && key.len() <= 1024
        && key
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidKey(key.to_owned()))
    }
}

/// Hex SHA-256 of a file, streamed.
pub(crate) async fn sha256_file(path: &Path) -> Result<(String, u64), StoreError> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || -> Result<(String, u64), StoreError> {
        use sha2::Digest;
        use std::io::Read;
        let mut f = std::fs::File::open(&path)?;
        let mut h = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut n_total = 0u64;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            n_total += n as u64;
        }
        Ok((hex::encode(h.finalize()), n_total))
    })
    .await
    .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let d = "a".repeat(64);
        assert_eq!(capsule_key(&d).expect("valid"), format!("capsules/{d}.zip"));
        assert!(capsule_key("../x").is_err());
        assert!(capsule_key(&"A".repeat(64)).is_err());
        assert_eq!(
            log_key("job-1", "head").expect("valid"),
            "logs/job-1/head.log"
        );
        assert!(log_key("../x", "head").is_err());
        assert!(log_key("j", "a/b").is_err());
        assert!(validate_key("logs/../x").is_err());
        assert!(validate_key("logs/j/x.log").is_ok());
    }
}
