//! Completing an upload: every byte present, the bytes hashing to the declared
//! digest, and the capsule canonical — its code and spec packed again by this
//! gateway give the same digest — before it is stored content-addressed.

use serde::Serialize;
use sha2::Digest as _;

use super::error::UploadError;
use super::service::{Shared, Uploads};
use super::session::Session;
use crate::domain::Digest;
use crate::objects::PutOutcome;

/// A finished upload.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Completed {
    /// The capsule's digest: name it in a submission (`{"spec", "capsule"}`).
    pub capsule: Digest,
    pub size: u64,
    /// Whether the store already had it.
    pub deduplicated: bool,
}

impl Uploads {
    /// Verifies and stores the session's capsule, then removes the session. A digest
    /// mismatch or a non-canonical capsule removes it too (its bytes are wrong).
    ///
    /// The work runs in a task of its own: a large capsule can take longer to verify
    /// than a request may last, and a request that times out (or a client that goes
    /// away) must not abandon it half-way — the capsule appears when it is done.
    pub async fn complete(&self, team: &str, id: &str) -> Result<Completed, UploadError> {
        let shared = self.session(team, id)?;
        let uploads = self.clone();
        let id = id.to_string();
        tokio::spawn(async move { uploads.complete_now(&shared, &id).await })
            .await
            .map_err(|e| UploadError::io("completion task", e))?
    }

    async fn complete_now(&self, shared: &Shared, id: &str) -> Result<Completed, UploadError> {
        let mut s = shared.session.lock().await;
        if s.gone {
            return Err(UploadError::NotFound(id.to_string()));
        }
        let missing = s.received.missing(s.size);
        if !missing.is_empty() {
            return Err(UploadError::Incomplete { missing });
        }
        let result = self.verify_and_store(&s).await;
        let outcome = if result.is_ok() {
            "completed"
        } else {
            "failed"
        };
        if !matches!(
            &result,
            Err(UploadError::ObjectStore(_) | UploadError::Io(_))
        ) {
            self.remove(&mut s, outcome).await;
        }
        result
    }

    async fn verify_and_store(&self, s: &Session) -> Result<Completed, UploadError> {
        let data = Session::data(&self.inner.root, &s.id);
        let path = data.clone();
        let got = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut f = std::fs::File::open(path)?;
            let mut sha = sha2::Sha256::new();
            std::io::copy(&mut f, &mut sha)?;
            Ok(hex::encode(sha.finalize()))
        })
        .await
        .map_err(|e| UploadError::io("hashing task", e))?
        .map_err(|e| UploadError::io("hashing the upload", e))?;
        if got != s.digest.as_str() {
            return Err(UploadError::DigestMismatch {
                expected: s.digest.clone(),
                got,
            });
        }
        let out_dir = self.inner.spool.join(format!("repack-{}", s.id));
        let dir = out_dir.clone();
        let repacked = tokio::task::spawn_blocking(move || {
            forge_capsule::repack(&data, &forge_capsule::CapsuleLimits::default(), &dir)
        })
        .await
        .map_err(|e| UploadError::io("repacking task", e))?;
        let result = match repacked {
            Err(e) => Err(UploadError::Capsule(e)),
            Ok(c) if c.digest != s.digest.as_str() => Err(UploadError::NotCanonical {
                expected: s.digest.clone(),
                got: c.digest,
            }),
            Ok(c) => self
                .inner
                .objects
                .put_file(&c.digest, &c.path)
                .await
                .map(|outcome| (outcome, c.path))
                .map_err(UploadError::from),
        };
        let granted = match result {
            // The uploading team owns the capsule from now on (also when the bytes were
            // already stored: it proved it has them); a deletion by retention racing
            // this is waited for and the bytes stored again.
            Ok((outcome, path)) => self.grant(s, &path).await.map(|()| outcome),
            Err(e) => Err(e),
        };
        if let Err(e) = tokio::fs::remove_dir_all(&out_dir).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %out_dir.display(), "removing the repack directory: {e}");
        }
        let deduplicated = matches!(granted?, PutOutcome::AlreadyPresent);
        self.inner.metrics.capsule(deduplicated);
        Ok(Completed {
            capsule: s.digest.clone(),
            size: s.size,
            deduplicated,
        })
    }

    /// Records the session's team as an owner of its capsule, and stores the capsule at
    /// `path` again when retention was deleting these bytes meanwhile.
    async fn grant(&self, s: &Session, path: &std::path::Path) -> Result<(), UploadError> {
        let capsules = self.inner.capsules.as_ref();
        let seen = capsules.grant_capsule(&s.digest, &s.team).await?;
        if crate::retention::deletion_over(capsules, &s.digest, seen).await? {
            self.inner.objects.put_file(s.digest.as_str(), path).await?;
        }
        Ok(())
    }
}
