//! Completing an upload, on whichever replica is asked: every part present, then the
//! parts assembled by the object store (`uploads/<id>.zip`), copied to the spool, and
//! checked — the bytes hash to the declared digest, and the capsule is canonical (its
//! code and spec packed again by this gateway give the same digest) — before it is
//! stored content-addressed. One completion runs at a time per session (a claim in
//! the store); a failure of storage leaves the session for another try.

use std::time::Duration;

use serde::Serialize;
use sha2::Digest as _;

use super::error::UploadError;
use super::service::Uploads;
use super::session;
use crate::domain::Digest;
use crate::objects::{PutOutcome, upload_key};
use crate::store::now_ms;
use crate::store::{PartRecord, UploadRecord};

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

/// How long one completion holds its session: others asked meanwhile answer
/// `upload.completing` (a crashed replica's claim lapses after it).
const CLAIM: Duration = Duration::from_secs(15 * 60);

impl Uploads {
    /// Verifies and stores the session's capsule, then removes the session. A digest
    /// mismatch or a non-canonical capsule removes it too (its bytes are wrong).
    ///
    /// The work runs in a task of its own: a large capsule can take longer to verify
    /// than a request may last, and a request that times out (or a client that goes
    /// away) must not abandon it half-way — the capsule appears when it is done.
    pub async fn complete(&self, team: &str, id: &str) -> Result<Completed, UploadError> {
        let u = self.session(team, id).await?;
        let uploads = self.clone();
        tokio::spawn(async move { uploads.complete_now(&u).await })
            .await
            .map_err(|e| UploadError::io("completion task", e))?
    }

    async fn complete_now(&self, u: &UploadRecord) -> Result<Completed, UploadError> {
        let sessions = &self.inner.sessions;
        let parts = sessions.upload_parts(&u.id).await?;
        let missing = session::received(u, &parts).missing(u.size);
        if !missing.is_empty() {
            return Err(UploadError::Incomplete { missing });
        }
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(CLAIM.as_millis()).unwrap_or(i64::MAX));
        if !sessions.claim_upload(&u.id, now, until).await? {
            return match sessions.upload(&u.id).await? {
                Some(_) => Err(UploadError::Completing(u.id.clone())),
                None => Err(UploadError::NotFound(u.id.clone())),
            };
        }
        let result = self.assemble_and_store(u, &parts).await;
        match &result {
            // Worth another try: the session and what was assembled stay.
            Err(UploadError::ObjectStore(_) | UploadError::Io(_) | UploadError::Store(_)) => {
                if let Err(e) = sessions.release_upload(&u.id).await {
                    tracing::warn!(upload = %u.id, "letting the completion claim go: {e}");
                }
            }
            done => {
                let outcome = if done.is_ok() { "completed" } else { "failed" };
                self.remove(u, outcome).await?;
            }
        }
        result
    }

    /// Assembles the parts into `uploads/<id>.zip` (once: a retried completion finds
    /// it), brings it to the spool and verifies and stores it from there.
    async fn assemble_and_store(
        &self,
        u: &UploadRecord,
        parts: &[PartRecord],
    ) -> Result<Completed, UploadError> {
        let objects = &self.inner.objects;
        let key = upload_key(&u.id)?;
        if objects.object_len(&key).await? != Some(u.size) {
            let list: Vec<(u32, String)> =
                parts.iter().map(|p| (p.number, p.etag.clone())).collect();
            objects
                .complete_multipart(&key, &u.multipart_id, &list)
                .await?;
        }
        tokio::fs::create_dir_all(&self.inner.spool)
            .await
            .map_err(|e| UploadError::io("creating the spool", e))?;
        let data = self.inner.spool.join(format!("upload-{}.zip", u.id));
        let result = async {
            self.fetch(&key, &data).await?;
            self.verify_and_store(u, &data).await
        }
        .await;
        if let Err(e) = tokio::fs::remove_file(&data).await
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(file = %data.display(), "removing an assembled upload: {e}");
        }
        result
    }

    /// Copies the object `key` to the file `to`, streamed.
    async fn fetch(&self, key: &str, to: &std::path::Path) -> Result<(), UploadError> {
        use futures::StreamExt as _;
        use tokio::io::AsyncWriteExt as _;
        let mut range = self.inner.objects.get_object_range(key, 0, None).await?;
        let mut file = tokio::fs::File::create(to)
            .await
            .map_err(|e| UploadError::io("spooling the upload", e))?;
        while let Some(chunk) = range.body.next().await {
            let chunk = chunk.map_err(|e| UploadError::io("reading the assembled upload", e))?;
            file.write_all(&chunk)
                .await
                .map_err(|e| UploadError::io("spooling the upload", e))?;
        }
        file.flush()
            .await
            .map_err(|e| UploadError::io("spooling the upload", e))
    }

    async fn verify_and_store(
        &self,
        s: &UploadRecord,
        data: &std::path::Path,
    ) -> Result<Completed, UploadError> {
        let path = data.to_path_buf();
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
        let data = data.to_path_buf();
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
    async fn grant(&self, s: &UploadRecord, path: &std::path::Path) -> Result<(), UploadError> {
        let capsules = self.inner.capsules.as_ref();
        let seen = capsules.grant_capsule(&s.digest, &s.team).await?;
        if crate::retention::deletion_over(capsules, &s.digest, seen).await? {
            self.inner.objects.put_file(s.digest.as_str(), path).await?;
        }
        Ok(())
    }
}
