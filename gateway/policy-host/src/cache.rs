//! The precompile cache: compiled components on disk, keyed by content digest and
//! engine compatibility, so a restart does not recompile, and **verified before they
//! are loaded**.
//!
//! Loading a compiled artifact is `unsafe` in wasmtime: the bytes become executable
//! code, and wasmtime only checks their header. A file is therefore loaded only if it
//! carries a valid HMAC-SHA256 tag, made when this cache wrote it, over the engine's
//! compatibility key, the component's digest and the artifact. The HMAC key is
//! generated once per cache (`cache.key`, mode 0600) and never leaves it. A truncated
//! or corrupted file, an artifact renamed to another digest, or one copied in from
//! another installation fails the check: it is counted, logged, removed and compiled
//! again. Someone who can read the gateway's data directory can forge tags, but such a
//! reader already holds the store; the check guards against everything short of that.
//!
//! Only artifacts of components that passed every load check are written.

use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::LoadError;

type Tag = Hmac<Sha256>;

/// Bytes of the tag appended to each artifact.
const TAG_BYTES: usize = 32;

/// A directory of verified precompiled components.
pub(crate) struct PrecompileCache {
    dir: PathBuf,
    key: [u8; 32],
}

impl std::fmt::Debug for PrecompileCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrecompileCache")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// What a lookup found.
#[derive(Debug)]
pub(crate) enum Lookup {
    /// A verified artifact.
    Hit(Vec<u8>),
    /// Nothing stored.
    Miss,
    /// A file that failed verification (it was removed).
    Rejected,
}

impl PrecompileCache {
    /// Open (creating if needed) the cache in `dir` and its key.
    pub(crate) fn open(dir: &Path) -> Result<Self, LoadError> {
        let err = |path: &Path, e: std::io::Error| LoadError::Cache {
            path: path.display().to_string(),
            detail: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
        let key_path = dir.join("cache.key");
        let key = match read_key(&key_path).map_err(|e| err(&key_path, e))? {
            Some(k) => k,
            None => create_key(dir, &key_path).map_err(|e| err(&key_path, e))?,
        };
        Ok(PrecompileCache {
            dir: dir.to_path_buf(),
            key,
        })
    }

    /// Where the artifact of `digest` for an engine with `engine_key` lives.
    pub(crate) fn path(&self, digest: &str, engine_key: &str) -> PathBuf {
        let hexd = digest.trim_start_matches("sha256:");
        self.dir.join(format!("{hexd}-{engine_key}.cwasm"))
    }

    fn tag(&self, digest: &str, engine_key: &str, artifact: &[u8]) -> Tag {
        let mut mac = Tag::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        for part in [engine_key.as_bytes(), b"\0", digest.as_bytes(), b"\0"] {
            mac.update(part);
        }
        mac.update(artifact);
        mac
    }

    /// The verified artifact of `digest`, if there is one.
    pub(crate) fn get(&self, digest: &str, engine_key: &str) -> Lookup {
        let path = self.path(digest, engine_key);
        let mut bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Lookup::Miss,
            Err(e) => {
                tracing::warn!(path = %path.display(), "unreadable precompiled plugin: {e}");
                return Lookup::Miss;
            }
        };
        let verified = bytes.len() >= TAG_BYTES && {
            let split = bytes.len() - TAG_BYTES;
            let ok = self
                .tag(digest, engine_key, &bytes[..split])
                .verify_slice(&bytes[split..])
                .is_ok();
            bytes.truncate(split);
            ok
        };
        if verified {
            return Lookup::Hit(bytes);
        }
        tracing::warn!(
            path = %path.display(),
            "precompiled plugin failed verification (not written by this cache, or \
             corrupted): removed, the component is compiled again"
        );
        let _ = std::fs::remove_file(&path);
        Lookup::Rejected
    }

    /// Store the artifact of `digest` (atomically: readers see the whole file or none).
    pub(crate) fn put(
        &self,
        digest: &str,
        engine_key: &str,
        artifact: &[u8],
    ) -> Result<(), LoadError> {
        let path = self.path(digest, engine_key);
        let tag = self
            .tag(digest, engine_key, artifact)
            .finalize()
            .into_bytes();
        let tmp = temp_beside(&path);
        let written = std::fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(artifact)?;
            f.write_all(&tag)?;
            f.sync_all()
        });
        written
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                LoadError::Cache {
                    path: path.display().to_string(),
                    detail: e.to_string(),
                }
            })
    }
}

/// A unique temporary name next to `path`.
fn temp_beside(path: &Path) -> PathBuf {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    path.with_extension(format!("tmp.{}.{seq}", std::process::id()))
}

/// The key in `path`, if it exists.
fn read_key(path: &Path) -> std::io::Result<Option<[u8; 32]>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let raw = hex::decode(text.trim())
                .ok()
                .and_then(|v| <[u8; 32]>::try_from(v).ok());
            raw.map(Some).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not 32 hex-encoded bytes (remove the file to start a new cache)",
                )
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Generate a key and publish it at `path` unless another process got there first
/// (then that key is used): written to a private temporary file, then hard-linked
/// into place, which fails if the name exists.
fn create_key(dir: &Path, path: &Path) -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = temp_beside(&dir.join("cache.key"));
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut f = options.open(&tmp)?;
        f.write_all(hex::encode(key).as_bytes())?;
        f.sync_all()?;
    }
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_key(path)?
            .ok_or_else(|| std::io::Error::other("the cache key vanished while opening")),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:00ff";
    const E: &str = "engine1";

    #[test]
    fn a_stored_artifact_comes_back_and_the_key_is_private_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = PrecompileCache::open(dir.path()).expect("open");
        assert!(matches!(cache.get(D, E), Lookup::Miss));
        cache.put(D, E, b"artifact").expect("put");
        assert!(matches!(cache.get(D, E), Lookup::Hit(b) if b == b"artifact"));
        // Reopened (a restart): same key, the artifact still verifies.
        let again = PrecompileCache::open(dir.path()).expect("reopen");
        assert!(matches!(again.get(D, E), Lookup::Hit(_)));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("cache.key"))
                .expect("key")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn tampered_renamed_truncated_or_foreign_files_are_rejected_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = PrecompileCache::open(dir.path()).expect("open");
        cache.put(D, E, b"artifact").expect("put");
        let path = cache.path(D, E);

        // One flipped byte.
        let mut bytes = std::fs::read(&path).expect("read");
        bytes[0] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        assert!(matches!(cache.get(D, E), Lookup::Rejected));
        assert!(!path.exists(), "a rejected file is removed");

        // A valid file under another digest's name.
        cache.put(D, E, b"artifact").expect("put");
        let other = cache.path("sha256:0a0a", E);
        std::fs::copy(&path, &other).expect("copy");
        assert!(matches!(cache.get("sha256:0a0a", E), Lookup::Rejected));

        // Truncated, and shorter than a tag.
        std::fs::write(&path, b"short").expect("write");
        assert!(matches!(cache.get(D, E), Lookup::Rejected));

        // Written by another cache (another key).
        let foreign_dir = tempfile::tempdir().expect("tempdir");
        let foreign = PrecompileCache::open(foreign_dir.path()).expect("open");
        foreign.put(D, E, b"artifact").expect("put");
        std::fs::copy(foreign.path(D, E), &path).expect("copy");
        assert!(matches!(cache.get(D, E), Lookup::Rejected));
    }

    #[test]
    fn a_bad_key_file_is_an_error_not_a_new_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("cache.key"), "not hex").expect("write");
        let err = PrecompileCache::open(dir.path()).expect_err("bad key");
        assert!(matches!(err, LoadError::Cache { .. }), "{err:?}");
    }
}
