//! Embedded local-directory store for `dev` mode.
//!
//! Objects live under a directory (`<dir>/<key>`, same key scheme as S3).
//! Capsule URLs are served by the gateway itself and signed:
//! `<base>/v1/capsules/<sha>.zip?expires=<unix secs>&sig=<hex HMAC-SHA256>`,
//! where the MAC covers `GET\n/v1/capsules/<sha>.zip\n<expires>`. The gateway
//! mounts [`crate::local_routes()`] (the HTTP side, in its own file) in its router;
//! this file only signs and verifies ([`UrlError`] says why a URL is refused).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::Url;

use crate::error::StoreError;
use crate::file_digest::sha256_file;
use crate::keys::{capsule_key, validate_digest, validate_key};
use crate::store::{MAX_LIST_PAGE, ObjectInfo, ObjectRange, ObjectStore, PutOutcome, StoreStats};

type HmacSha256 = Hmac<Sha256>;

/// Why a signed local URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("URL expired")]
    Expired,
    #[error("bad signature")]
    BadSignature,
    #[error("malformed URL")]
    Malformed,
    #[error("capsule not found")]
    NotFound,
}

/// Local-directory capsule store with HMAC-signed, expiring URLs.
pub struct LocalStore {
    dir: PathBuf,
    key: Vec<u8>,
    base_url: Url,
    stats: Arc<StoreStats>,
}

impl std::fmt::Debug for LocalStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The HMAC key is a secret: never printed.
        f.debug_struct("LocalStore")
            .field("dir", &self.dir)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl LocalStore {
    /// A store under `dir` signing URLs with `key` (≥ 16 bytes) for the
    /// gateway reachable at `base_url` (e.g. `http://forge-gateway:8080`).
    pub fn new(
        dir: impl Into<PathBuf>,
        key: impl Into<Vec<u8>>,
        base_url: Url,
    ) -> Result<Self, StoreError> {
        let key = key.into();
        if key.len() < 16 {
            return Err(StoreError::Config(
                "local store HMAC key must be at least 16 bytes".into(),
            ));
        }
        let dir = dir.into();
        std::fs::create_dir_all(dir.join("capsules"))?;
        Ok(Self {
            dir,
            key,
            base_url,
            stats: Arc::default(),
        })
    }

    fn mac(&self, digest: &str, expires: u64) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC accepts any key length");
        mac.update(format!("GET\n/v1/capsules/{digest}.zip\n{expires}").as_bytes());
        mac
    }

    /// Signed URL for `digest` valid until the unix time `expires`.
    pub fn signed_url(&self, digest: &str, expires: u64) -> Result<Url, StoreError> {
        validate_digest(digest)?;
        let sig = hex::encode(self.mac(digest, expires).finalize().into_bytes());
        let mut url = self
            .base_url
            .join(&format!("v1/capsules/{digest}.zip"))
            .map_err(|e| StoreError::Config(format!("base url: {e}")))?;
        url.query_pairs_mut()
            .append_pair("expires", &expires.to_string())
            .append_pair("sig", &sig);
        Ok(url)
    }

    /// Check a signed URL's parts; the capsule's path when valid and present.
    pub fn verify(&self, digest: &str, expires: u64, sig: &str) -> Result<PathBuf, UrlError> {
        validate_digest(digest).map_err(|_| UrlError::Malformed)?;
        let sig = hex::decode(sig).map_err(|_| UrlError::BadSignature)?;
        // Constant-time comparison.
        self.mac(digest, expires)
            .verify_slice(&sig)
            .map_err(|_| UrlError::BadSignature)?;
        if expires < now_secs() {
            return Err(UrlError::Expired);
        }
        let path = self.path_of(&format!("capsules/{digest}.zip"));
        if path.is_file() {
            Ok(path)
        } else {
            Err(UrlError::NotFound)
        }
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(key)
    }

    /// The parts of multipart upload `id`: `<dir>/.multipart/<id>/<number>` (no key
    /// starts with a dot, so no object lives there).
    fn multipart_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidKey(id.to_owned()));
        }
        Ok(self.dir.join(".multipart").join(id))
    }

    /// Write `src` to `key` through a temp file + rename (atomic).
    async fn install(&self, key: &str, src: &Path) -> Result<u64, StoreError> {
        let dst = self.path_of(key);
        let parent = dst
            .parent()
            .expect("keys have a parent directory")
            .to_owned();
        tokio::fs::create_dir_all(&parent).await?;
        let src = src.to_owned();
        let n = tokio::task::spawn_blocking(move || -> Result<u64, StoreError> {
            let tmp = tempfile::Builder::new()
                .prefix(".put-")
                .tempfile_in(&parent)?;
            let n = std::fs::copy(&src, tmp.path())?;
            tmp.persist(&dst).map_err(|e| StoreError::Io(e.error))?;
            Ok(n)
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        Ok(n)
    }
}

#[async_trait::async_trait]
impl ObjectStore for LocalStore {
    async fn exists(&self, digest: &str) -> Result<bool, StoreError> {
        Ok(tokio::fs::try_exists(self.path_of(&capsule_key(digest)?)).await?)
    }

    async fn put_file(&self, digest: &str, path: &Path) -> Result<PutOutcome, StoreError> {
        let key = capsule_key(digest)?;
        if self.exists(digest).await? {
            self.stats
                .skipped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(PutOutcome::AlreadyPresent);
        }
        let (actual, _) = sha256_file(path).await?;
        if actual != digest {
            return Err(StoreError::Integrity {
                key,
                expected: digest.to_owned(),
                actual,
            });
        }
        let n = self.install(&key, path).await?;
        self.stats
            .uploads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .bytes_uploaded
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        self.stats
            .parts_uploaded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(PutOutcome::Uploaded { parts: 1 })
    }

    async fn get_url(&self, digest: &str, ttl: Duration) -> Result<Url, StoreError> {
        self.signed_url(digest, now_secs().saturating_add(ttl.as_secs()))
    }

    async fn put_object(&self, key: &str, body: Bytes) -> Result<(), StoreError> {
        validate_key(key)?;
        let tmp_src = tempfile::NamedTempFile::new_in(&self.dir)?;
        tokio::fs::write(tmp_src.path(), &body).await?;
        self.install(key, tmp_src.path()).await?;
        Ok(())
    }

    async fn put_object_file(&self, key: &str, path: &Path) -> Result<(), StoreError> {
        validate_key(key)?;
        self.install(key, path).await?;
        Ok(())
    }

    async fn get_object(&self, key: &str) -> Result<Bytes, StoreError> {
        validate_key(key)?;
        match tokio::fs::read(self.path_of(key)).await {
            Ok(b) => Ok(Bytes::from(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(StoreError::NotFound(key.to_owned()))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn get_object_range(
        &self,
        key: &str,
        start: u64,
        end: Option<u64>,
    ) -> Result<ObjectRange, StoreError> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        validate_key(key)?;
        let mut file = match tokio::fs::File::open(self.path_of(key)).await {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(key.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        let total = file.metadata().await?.len();
        let end = end.unwrap_or(total).min(total);
        let start = start.min(end);
        file.seek(std::io::SeekFrom::Start(start)).await?;
        let body = tokio_util::io::ReaderStream::new(file.take(end - start));
        Ok(ObjectRange {
            total,
            body: Box::pin(body),
        })
    }

    async fn object_len(&self, key: &str) -> Result<Option<u64>, StoreError> {
        validate_key(key)?;
        match tokio::fs::metadata(self.path_of(key)).await {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: u32,
    ) -> Result<Vec<ObjectInfo>, StoreError> {
        let (dir, prefix) = (self.dir.clone(), prefix.to_owned());
        let start_after = start_after.map(str::to_owned);
        let max = usize::try_from(max.min(MAX_LIST_PAGE)).unwrap_or(usize::MAX);
        tokio::task::spawn_blocking(move || list_dir(&dir, &prefix, start_after.as_deref(), max))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        let path = self.path_of(key);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        // Empty folders left behind (a job's log folder) go too, up to the store's root.
        let mut dir = path.parent().map(Path::to_path_buf);
        while let Some(d) = dir {
            if d == self.dir || d.parent() == Some(self.dir.as_path()) {
                break;
            }
            if tokio::fs::remove_dir(&d).await.is_err() {
                break;
            }
            dir = d.parent().map(Path::to_path_buf);
        }
        Ok(())
    }

    async fn start_multipart(&self, key: &str) -> Result<String, StoreError> {
        validate_key(key)?;
        let id = hex::encode(rand::random::<[u8; 16]>());
        tokio::fs::create_dir_all(self.multipart_dir(&id)?).await?;
        Ok(id)
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Bytes,
    ) -> Result<String, StoreError> {
        validate_key(key)?;
        let dir = self.multipart_dir(upload_id)?;
        if !tokio::fs::try_exists(&dir).await? {
            return Err(StoreError::NotFound(format!(
                "multipart upload {upload_id}"
            )));
        }
        let tag = hex::encode(<Sha256 as sha2::Digest>::digest(&body));
        let tmp = dir.join(format!(".{number}.tmp"));
        tokio::fs::write(&tmp, &body).await?;
        tokio::fs::rename(&tmp, dir.join(number.to_string())).await?;
        Ok(tag)
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<(), StoreError> {
        validate_key(key)?;
        let dir = self.multipart_dir(upload_id)?;
        let whole = dir.join(".assembled");
        let (list, out) = (parts.to_vec(), whole.clone());
        tokio::task::spawn_blocking(move || assemble(&dir, &list, &out))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
        self.install(key, &whole).await?;
        self.abort_multipart(key, upload_id).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        validate_key(key)?;
        match tokio::fs::remove_dir_all(self.multipart_dir(upload_id)?).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    fn min_part_bytes(&self) -> u64 {
        1
    }

    fn stats(&self) -> Arc<StoreStats> {
        self.stats.clone()
    }
}

/// Concatenates the parts of a local multipart upload into `out`, each checked
/// against its tag (the part a client sent last under that number).
fn assemble(dir: &Path, parts: &[(u32, String)], out: &Path) -> Result<(), StoreError> {
    use std::io::Write as _;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out)?);
    for (number, tag) in parts {
        let bytes = match std::fs::read(dir.join(number.to_string())) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(format!("part {number}")));
            }
            Err(e) => return Err(e.into()),
        };
        let actual = hex::encode(<Sha256 as sha2::Digest>::digest(&bytes));
        if &actual != tag {
            return Err(StoreError::Integrity {
                key: format!("part {number}"),
                expected: tag.clone(),
                actual,
            });
        }
        file.write_all(&bytes)?;
    }
    file.into_inner()
        .map_err(|e| StoreError::Io(e.into_error()))?
        .sync_all()?;
    Ok(())
}

/// The objects under `root` whose keys start with `prefix`, after `start_after`, in key
/// order, at most `max`. Files whose names start with a dot are a write in progress
/// (`install`'s temporary files) and are not objects.
fn list_dir(
    root: &Path,
    prefix: &str,
    start_after: Option<&str>,
    max: usize,
) -> Result<Vec<ObjectInfo>, StoreError> {
    // Walk the deepest folder the prefix names (`logs/job-1/` → `<root>/logs/job-1`).
    let folder = prefix.rfind('/').map_or("", |i| &prefix[..i]);
    let base = root.join(folder);
    if !base.is_dir() {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(&base).sort_by_file_name() {
        let entry = entry.map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        if !entry.file_type().is_file() || entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let key = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if !key.starts_with(prefix) || start_after.is_some_and(|s| key.as_str() <= s) {
            continue;
        }
        let meta = entry
            .metadata()
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))?;
        let modified_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        found.push(ObjectInfo {
            key,
            size: meta.len(),
            modified_ms,
        });
    }
    // Walk order is per folder; keys sort as strings (`a/b` vs `a.b`).
    found.sort_by(|a, b| a.key.cmp(&b.key));
    found.truncate(max);
    Ok(found)
}
