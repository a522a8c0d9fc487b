//! S3-compatible object store (aws-sdk-s3), tuned for production
//! S3-compatible servers (Garage, MinIO, Ceph RGW) as well as AWS.
//!
//! Choices, and why:
//! - Path-style addressing: self-hosted stores rarely have wildcard DNS.
//! - `request_checksum_calculation` / `response_checksum_validation` =
//!   `WhenRequired`: recent SDKs otherwise add CRC32 checksums to every
//!   request and, for streamed bodies, switch to `aws-chunked` encoding with a
//!   *trailing* checksum — which several S3-compatible servers reject or
//!   mishandle, especially over plain http (unsigned-payload trailers).
//!   Instead we send an explicit `x-amz-checksum-sha256` *header* (computed
//!   by us: the capsule's own digest for a single PUT, a per-part SHA-256 for
//!   multipart), which the server verifies on receipt, with a plain
//!   Content-Length body.
//! - End-to-end integrity: after upload the object is HEADed with checksum
//!   mode on; when the store reports a SHA-256 (full-object or the
//!   multipart composite `sha256(part digests)-N`) it must equal ours, and the
//!   size and our `x-amz-meta-forge-sha256` metadata must match. A multipart
//!   upload also re-hashes the file while reading parts and aborts when that
//!   does not equal the digest; any failure aborts the multipart upload.
//! - Retries with exponential backoff via the SDK's standard retry config.
//! - Presigned GET URLs are capped by SigV4 at 7 days: longer TTLs are clamped
//!   to [`MAX_PRESIGN_TTL`] (the gateway should prefer re-presigning or the
//!   init-container mode for jobs whose clusters may add nodes later).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{
    BehaviorVersion, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    retry::RetryConfig, timeout::TimeoutConfig,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use url::Url;

use crate::error::StoreError;
use crate::file_digest::sha256_file;
use crate::keys::{capsule_key, validate_digest, validate_key};
use crate::store::{MAX_LIST_PAGE, ObjectInfo, ObjectRange, ObjectStore, PutOutcome, StoreStats};

/// SigV4 presigned URLs cannot outlive 7 days.
pub const MAX_PRESIGN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Metadata key (`x-amz-meta-forge-sha256`) holding the hex SHA-256.
pub const META_SHA256: &str = "forge-sha256";
const MIN_PART: u64 = 5 * 1024 * 1024;

/// Connection settings (`FORGE_S3_*`). `Debug` redacts the secret.
#[derive(Clone)]
pub struct S3Config {
    pub endpoint: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    pub region: String,
    /// Files at least this large are uploaded in parts.
    pub multipart_threshold: u64,
    /// Part size (≥ 5 MiB; one part is held in memory at a time).
    pub part_size: u64,
    /// Attempts per request, including the first.
    pub max_attempts: u32,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .field("region", &self.region)
            .field("multipart_threshold", &self.multipart_threshold)
            .field("part_size", &self.part_size)
            .finish()
    }
}

impl S3Config {
    /// Defaults besides the four required settings.
    pub fn new(endpoint: &str, bucket: &str, access_key: &str, secret_key: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            bucket: bucket.to_owned(),
            access_key: access_key.to_owned(),
            secret_key: secret_key.to_owned(),
            region: "us-east-1".into(),
            multipart_threshold: 64 * 1024 * 1024,
            part_size: 64 * 1024 * 1024,
            max_attempts: 5,
        }
    }

    /// From `FORGE_S3_ENDPOINT`, `FORGE_S3_BUCKET`, `FORGE_S3_ACCESS_KEY`,
    /// `FORGE_S3_SECRET_KEY` and optional `FORGE_S3_REGION`.
    pub fn from_env() -> Result<Self, StoreError> {
        let var =
            |k: &str| std::env::var(k).map_err(|_| StoreError::Config(format!("{k} is not set")));
        let mut c = Self::new(
            &var("FORGE_S3_ENDPOINT")?,
            &var("FORGE_S3_BUCKET")?,
            &var("FORGE_S3_ACCESS_KEY")?,
            &var("FORGE_S3_SECRET_KEY")?,
        );
        if let Ok(r) = std::env::var("FORGE_S3_REGION") {
            c.region = r;
        }
        Ok(c)
    }

    /// True for a plain `http://` endpoint: pods must then fetch capsules via
    /// the verifying init container (see `init_container`).
    pub fn is_plain_http(&self) -> bool {
        self.endpoint.starts_with("http://")
    }
}

/// The S3 store.
pub struct S3Store {
    client: Client,
    cfg: S3Config,
    stats: Arc<StoreStats>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn classify<E: ProvideErrorMetadata + std::fmt::Debug>(
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
    cfg: &S3Config,
    key: &str,
) -> StoreError {
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code().map(str::to_owned);
    match (&err, status) {
        (SdkError::DispatchFailure(_) | SdkError::TimeoutError(_), _) => StoreError::Unreachable {
            endpoint: cfg.endpoint.clone(),
            message: format!("{err:?}"),
        },
        (_, Some(403)) => StoreError::Credentials(code.unwrap_or_else(|| "403 Forbidden".into())),
        (_, Some(404)) if code.as_deref() == Some("NoSuchBucket") || key.is_empty() => {
            StoreError::BucketMissing(cfg.bucket.clone())
        }
        (_, Some(404)) => StoreError::NotFound(key.to_owned()),
        _ => StoreError::Request(format!(
            "{key}: status {status:?}, code {code:?}, {}",
            err.message()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{err:?}"))
        )),
    }
}

impl S3Store {
    /// Build the client. No request is made; call [`S3Store::check`].
    pub async fn connect(cfg: S3Config) -> Result<Self, StoreError> {
        if cfg.part_size < MIN_PART || cfg.multipart_threshold < cfg.part_size.min(MIN_PART) {
            return Err(StoreError::Config(
                "part size and multipart threshold must be at least 5 MiB".into(),
            ));
        }
        Url::parse(&cfg.endpoint)
            .map_err(|e| StoreError::Config(format!("FORGE_S3_ENDPOINT: {e}")))?;
        let creds = Credentials::new(&cfg.access_key, &cfg.secret_key, None, None, "forge-config");
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(cfg.region.clone()))
            .endpoint_url(&cfg.endpoint)
            .force_path_style(true)
            .credentials_provider(creds)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(cfg.max_attempts.max(1))
                    .with_initial_backoff(Duration::from_millis(200))
                    .with_max_backoff(Duration::from_secs(10)),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .build(),
            )
            .build();
        Ok(Self {
            client: Client::from_conf(conf),
            cfg,
            stats: Arc::default(),
        })
    }

    /// Start-up check: the endpoint answers, the credentials are accepted and
    /// the bucket exists (HeadBucket). Typed errors say which one failed.
    pub async fn check(&self) -> Result<(), StoreError> {
        self.client
            .head_bucket()
            .bucket(&self.cfg.bucket)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, ""))?;
        Ok(())
    }

    /// The configuration in use.
    pub fn config(&self) -> &S3Config {
        &self.cfg
    }

    /// The underlying SDK client (tests, admin tasks).
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn head(
        &self,
        key: &str,
    ) -> Result<Option<aws_sdk_s3::operation::head_object::HeadObjectOutput>, StoreError> {
        match self
            .client
            .head_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
        {
            Ok(h) => Ok(Some(h)),
            Err(e) => match classify(e, &self.cfg, key) {
                StoreError::NotFound(_) => Ok(None),
                other => Err(other),
            },
        }
    }

    /// Compare the stored object with what we uploaded.
    async fn verify_stored(
        &self,
        key: &str,
        digest: &str,
        size: u64,
        expected_checksum: &str,
    ) -> Result<(), StoreError> {
        let head = self
            .head(key)
            .await?
            .ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        let integrity = |expected: &str, actual: &str| StoreError::Integrity {
            key: key.to_owned(),
            expected: expected.to_owned(),
            actual: actual.to_owned(),
        };
        let len = head.content_length().unwrap_or(-1);
        if u64::try_from(len).ok() != Some(size) {
            return Err(integrity(&format!("{size} bytes"), &format!("{len} bytes")));
        }
        if let Some(meta) = head.metadata().and_then(|m| m.get(META_SHA256))
            && meta != digest
        {
            return Err(integrity(digest, meta));
        }
        if let Some(stored) = head.checksum_sha256()
            && stored != expected_checksum
        {
            return Err(integrity(expected_checksum, stored));
        }
        tracing::debug!(
            key,
            checksum_reported = head.checksum_sha256().is_some(),
            "capsule verified in store"
        );
        Ok(())
    }

    async fn put_single(
        &self,
        key: &str,
        digest: &str,
        path: &Path,
        size: u64,
    ) -> Result<(), StoreError> {
        let raw = hex::decode(digest).map_err(|_| StoreError::InvalidKey(digest.to_owned()))?;
        // Not every S3-compatible store checks `x-amz-checksum-sha256` against the
        // body, so the bytes are hashed here first: a mismatch uploads nothing.
        let (actual, _) = sha256_file(path).await?;
        if actual != digest {
            return Err(StoreError::Integrity {
                key: key.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        let checksum = B64.encode(raw);
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        self.client
            .put_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .content_type("application/zip")
            .content_length(
                i64::try_from(size).map_err(|_| StoreError::Config("file too large".into()))?,
            )
            .checksum_sha256(&checksum)
            .metadata(META_SHA256, digest)
            .body(body)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        self.stats.parts_uploaded.fetch_add(1, Ordering::Relaxed);
        let verified = self.verify_stored(key, digest, size, &checksum).await;
        self.discard_on_failure(key, verified).await
    }

    /// A stored object that failed verification is deleted (best effort), so
    /// a store that does not check `x-amz-checksum-sha256` itself never keeps
    /// bad bytes under a content address.
    async fn discard_on_failure(
        &self,
        key: &str,
        result: Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        if result.is_err()
            && let Err(e) = self
                .client
                .delete_object()
                .bucket(&self.cfg.bucket)
                .key(key)
                .send()
                .await
        {
            tracing::warn!(key, error = ?e, "could not delete object that failed verification");
        }
        result
    }

    async fn put_multipart(
        &self,
        key: &str,
        digest: &str,
        path: &Path,
        size: u64,
    ) -> Result<u32, StoreError> {
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.cfg.bucket)
            .key(key)
            .content_type("application/zip")
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .metadata(META_SHA256, digest)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        let upload_id = created
            .upload_id()
            .ok_or_else(|| {
                StoreError::Request("CreateMultipartUpload returned no upload id".into())
            })?
            .to_owned();
        let result = self.upload_parts(key, digest, path, size, &upload_id).await;
        if result.is_err() {
            let abort = self
                .client
                .abort_multipart_upload()
                .bucket(&self.cfg.bucket)
                .key(key)
                .upload_id(&upload_id)
                .send()
                .await;
            if let Err(e) = abort {
                tracing::warn!(key, error = ?e, "abort of failed multipart upload failed");
            }
        }
        result
    }

    async fn upload_parts(
        &self,
        key: &str,
        digest: &str,
        path: &Path,
        size: u64,
        upload_id: &str,
    ) -> Result<u32, StoreError> {
        let mut file = tokio::fs::File::open(path).await?;
        let mut whole = Sha256::new();
        let mut part_digests = Vec::new();
        let mut parts = Vec::new();
        let mut sent = 0u64;
        let mut number = 1i32;
        while sent < size {
            let len = usize::try_from((size - sent).min(self.cfg.part_size))
                .expect("part size fits in memory");
            let mut buf = vec![0u8; len];
            file.read_exact(&mut buf).await?;
            whole.update(&buf);
            let part_sha = Sha256::digest(&buf);
            let checksum = B64.encode(part_sha);
            part_digests.extend_from_slice(&part_sha);
            let etag = self
                .send_part(key, upload_id, number, Bytes::from(buf), &checksum)
                .await?;
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .set_e_tag(etag)
                    .checksum_sha256(checksum)
                    .build(),
            );
            self.stats.parts_uploaded.fetch_add(1, Ordering::Relaxed);
            sent += len as u64;
            number += 1;
        }
        let actual = hex::encode(whole.finalize());
        if actual != digest {
            return Err(StoreError::Integrity {
                key: key.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        let n_parts = parts.len();
        self.finish_multipart(key, upload_id, parts).await?;
        let composite = format!("{}-{n_parts}", B64.encode(Sha256::digest(&part_digests)));
        let verified = self.verify_stored(key, digest, size, &composite).await;
        self.discard_on_failure(key, verified).await?;
        Ok(u32::try_from(n_parts).expect("at most 10 000 parts"))
    }
}

impl S3Store {
    /// UploadPart of `body` with its SHA-256 (`checksum`, base64), which the server
    /// checks on receipt and echoes (checked too); the part's ETag.
    async fn send_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Bytes,
        checksum: &str,
    ) -> Result<Option<String>, StoreError> {
        let len = i64::try_from(body.len()).unwrap_or(i64::MAX);
        let out = self
            .client
            .upload_part()
            .bucket(&self.cfg.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .checksum_sha256(checksum)
            .content_length(len)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        if let Some(echo) = out.checksum_sha256()
            && echo != checksum
        {
            return Err(StoreError::Integrity {
                key: format!("{key} part {number}"),
                expected: checksum.to_owned(),
                actual: echo.to_owned(),
            });
        }
        Ok(out.e_tag().map(str::to_owned))
    }

    /// CompleteMultipartUpload of `parts`, in order.
    async fn finish_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<(), StoreError> {
        self.client
            .complete_multipart_upload()
            .bucket(&self.cfg.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ObjectStore for S3Store {
    async fn exists(&self, digest: &str) -> Result<bool, StoreError> {
        let key = capsule_key(digest)?;
        Ok(match self.head(&key).await? {
            // A foreign object under our key with another digest is not ours.
            Some(h) => h
                .metadata()
                .and_then(|m| m.get(META_SHA256))
                .is_none_or(|m| m == digest),
            None => false,
        })
    }

    async fn put_file(&self, digest: &str, path: &Path) -> Result<PutOutcome, StoreError> {
        let key = capsule_key(digest)?;
        if self.exists(digest).await? {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(PutOutcome::AlreadyPresent);
        }
        let size = tokio::fs::metadata(path).await?.len();
        let parts = if size >= self.cfg.multipart_threshold {
            self.put_multipart(&key, digest, path, size).await?
        } else {
            self.put_single(&key, digest, path, size).await?;
            1
        };
        self.stats.uploads.fetch_add(1, Ordering::Relaxed);
        self.stats.bytes_uploaded.fetch_add(size, Ordering::Relaxed);
        tracing::info!(key, size, parts, "capsule uploaded");
        Ok(PutOutcome::Uploaded { parts })
    }

    async fn get_url(&self, digest: &str, ttl: Duration) -> Result<Url, StoreError> {
        validate_digest(digest)?;
        let key = capsule_key(digest)?;
        let ttl = ttl.clamp(Duration::from_secs(1), MAX_PRESIGN_TTL);
        let presign =
            PresigningConfig::expires_in(ttl).map_err(|e| StoreError::Config(e.to_string()))?;
        let req = self
            .client
            .get_object()
            .bucket(&self.cfg.bucket)
            .key(&key)
            .presigned(presign)
            .await
            .map_err(|e| classify(e, &self.cfg, &key))?;
        Url::parse(req.uri()).map_err(|e| StoreError::Request(format!("presigned url: {e}")))
    }

    async fn put_object(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        validate_key(key)?;
        let checksum = B64.encode(Sha256::digest(&body));
        self.client
            .put_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .checksum_sha256(checksum)
            .content_length(body.len() as i64)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        Ok(())
    }

    async fn put_object_file(&self, key: &str, path: &Path) -> Result<(), StoreError> {
        validate_key(key)?;
        let (digest, size) = sha256_file(path).await?;
        if size >= self.cfg.multipart_threshold {
            self.put_multipart(key, &digest, path, size).await?;
        } else {
            self.put_single(key, &digest, path, size).await?;
        }
        Ok(())
    }

    async fn get_object(&self, key: &str) -> Result<Bytes, StoreError> {
        validate_key(key)?;
        let out = self
            .client
            .get_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| match classify(e, &self.cfg, key) {
                StoreError::BucketMissing(_) => StoreError::NotFound(key.to_owned()),
                other => other,
            })?;
        let data = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::Request(format!("{key}: {e}")))?;
        Ok(data.into_bytes())
    }

    async fn get_object_range(
        &self,
        key: &str,
        start: u64,
        end: Option<u64>,
    ) -> Result<ObjectRange, StoreError> {
        validate_key(key)?;
        let total = self
            .object_len(key)
            .await?
            .ok_or_else(|| StoreError::NotFound(key.to_owned()))?;
        let end = end.unwrap_or(total).min(total);
        let start = start.min(end);
        if start == end {
            return Ok(ObjectRange {
                total,
                body: Box::pin(tokio_util::io::ReaderStream::new(tokio::io::empty())),
            });
        }
        // An HTTP range is inclusive of its last byte.
        let out = self
            .client
            .get_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .range(format!("bytes={start}-{}", end - 1))
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        let reader = out.body.into_async_read();
        Ok(ObjectRange {
            total,
            body: Box::pin(tokio_util::io::ReaderStream::new(reader)),
        })
    }

    async fn object_len(&self, key: &str) -> Result<Option<u64>, StoreError> {
        validate_key(key)?;
        let head = match self
            .client
            .head_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(h) => h,
            Err(e) => {
                return match classify(e, &self.cfg, key) {
                    StoreError::NotFound(_) | StoreError::BucketMissing(_) => Ok(None),
                    other => Err(other),
                };
            }
        };
        Ok(Some(
            head.content_length()
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0),
        ))
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: u32,
    ) -> Result<Vec<ObjectInfo>, StoreError> {
        let max = i32::try_from(max.clamp(1, MAX_LIST_PAGE)).unwrap_or(1000);
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.cfg.bucket)
            .prefix(prefix)
            .set_start_after(start_after.map(str::to_owned))
            .max_keys(max)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, ""))?;
        Ok(out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(ObjectInfo {
                    key: o.key()?.to_owned(),
                    size: o.size().and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
                    modified_ms: o
                        .last_modified()
                        .and_then(|t| t.to_millis().ok())
                        .unwrap_or(0),
                })
            })
            .collect())
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        // S3 answers 204 for a key that is not there: deleting is idempotent.
        self.client
            .delete_object()
            .bucket(&self.cfg.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        Ok(())
    }

    async fn start_multipart(&self, key: &str) -> Result<String, StoreError> {
        validate_key(key)?;
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.cfg.bucket)
            .key(key)
            .content_type("application/zip")
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .send()
            .await
            .map_err(|e| classify(e, &self.cfg, key))?;
        created.upload_id().map(str::to_owned).ok_or_else(|| {
            StoreError::Request("CreateMultipartUpload returned no upload id".into())
        })
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        validate_key(key)?;
        // The server checks the part against its SHA-256 on receipt.
        let checksum = B64.encode(Sha256::digest(&body));
        let number = i32::try_from(number).unwrap_or(i32::MAX);
        let etag = self
            .send_part(key, upload_id, number, body, &checksum)
            .await?;
        self.stats.parts_uploaded.fetch_add(1, Ordering::Relaxed);
        // The tag completing needs: the ETag and the part's checksum.
        Ok(format!("{}|{checksum}", etag.unwrap_or_default()))
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let parts = parts
            .iter()
            .map(|(number, tag)| {
                let (etag, checksum) = tag.split_once('|').unwrap_or((tag.as_str(), ""));
                CompletedPart::builder()
                    .part_number(i32::try_from(*number).unwrap_or(i32::MAX))
                    .e_tag(etag)
                    .checksum_sha256(checksum)
                    .build()
            })
            .collect();
        self.finish_multipart(key, upload_id, parts).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        match self
            .client
            .abort_multipart_upload()
            .bucket(&self.cfg.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("NoSuchUpload") => Ok(()),
            Err(e) => Err(classify(e, &self.cfg, key)),
        }
    }

    fn min_part_bytes(&self) -> u64 {
        MIN_PART
    }

    fn stats(&self) -> Arc<StoreStats> {
        self.stats.clone()
    }
}
