//! Errors of the object stores, one enum callers branch on: start-up configuration
//! problems (`Credentials`, `BucketMissing`, `Unreachable`, `Config`), a missing
//! object, a refused key, an integrity failure, or a failed request / local I/O.

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
