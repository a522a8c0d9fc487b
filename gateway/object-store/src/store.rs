//! The object-store interface shared by the S3 and local (dev) stores: capsules by
//! content address (stored once, handed out as expiring URLs) and plain objects
//! (archived logs, policy plugin components) under keys from [`crate::keys`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_core::Stream;
use url::Url;

use crate::error::StoreError;

/// What `put_file` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The bytes were uploaded (`parts` = 1 for a single PUT).
    Uploaded { parts: u32 },
    /// The object already existed (content-addressed): nothing was sent.
    AlreadyPresent,
}

/// A streamed byte range of an object (see [`ObjectStore::get_object_range`]).
pub struct ObjectRange {
    /// The object's whole length.
    pub total: u64,
    /// The bytes of the range, in chunks (never the whole object at once).
    pub body: std::pin::Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>,
}

impl std::fmt::Debug for ObjectRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRange")
            .field("total", &self.total)
            .finish_non_exhaustive()
    }
}

/// One stored object, as a listing gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its key.
    pub key: String,
    /// Its length in bytes.
    pub size: u64,
    /// When it was last written (Unix ms; 0 when the store does not say).
    pub modified_ms: i64,
}

/// Most objects one [`ObjectStore::list_page`] returns (S3's own page size).
pub const MAX_LIST_PAGE: u32 = 1000;

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

/// Object storage: content-addressed capsules plus plain objects (archived logs,
/// policy plugin components).
#[async_trait::async_trait]
pub trait ObjectStore: Send + Sync {
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
    /// The bytes `start..end` of an object (`end` = its length when `None`; both
    /// clamped to it), streamed in chunks, with the object's length: reading an
    /// archived log does not hold it whole. `NotFound` when there is no object.
    async fn get_object_range(
        &self,
        key: &str,
        start: u64,
        end: Option<u64>,
    ) -> Result<ObjectRange, StoreError>;
    /// The length of an object, `None` when there is none.
    async fn object_len(&self, key: &str) -> Result<Option<u64>, StoreError>;
    /// Up to `max` (at most [`MAX_LIST_PAGE`]) objects whose keys start with
    /// `prefix` and sort after `start_after`, in key order: page through a folder by
    /// passing the last key of one page as the next page's `start_after`.
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: u32,
    ) -> Result<Vec<ObjectInfo>, StoreError>;
    /// Deletes the object `key`; deleting one that is not there is not an error.
    async fn delete_object(&self, key: &str) -> Result<(), StoreError>;
    /// Starts a multipart upload of `key` that is filled over many requests, maybe
    /// by several gateways (a resumable upload); returns its id.
    async fn start_multipart(&self, key: &str) -> Result<String, StoreError>;
    /// Stores part `number` (1-based; every part but the last at least 5 MiB on S3)
    /// of the multipart upload `upload_id`, replacing an earlier one; returns its
    /// tag, opaque, to be named again in [`ObjectStore::complete_multipart`].
    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StoreError>;
    /// Assembles `parts` (number and tag, in order) into the object `key`.
    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StoreError>;
    /// Abandons a multipart upload and its parts; an unknown one is not an error.
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StoreError>;
    /// The smallest part but the last this store accepts (S3: 5 MiB).
    fn min_part_bytes(&self) -> u64;
    /// Counters.
    fn stats(&self) -> Arc<StoreStats>;
}
