//! [`Uploads`]: the upload sessions of the installation — starting (or finding) one,
//! writing chunks as parts of its multipart upload, reporting what is present,
//! aborting; completion is `finish.rs`, expiry `sweep.rs`. Nothing is kept in this
//! process: the session is a store row and its bytes are in object storage, so any
//! replica serves any request of any session. See the module's header (`mod.rs`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::sync::Semaphore;

use super::error::UploadError;
use super::parts::PartPlan;
use super::session::{self, SessionView};
use crate::domain::Digest;
use crate::metrics::Metrics;
use crate::objects::{ObjectStore, upload_key};
use crate::store::{CapsuleStore, PartRecord, UploadRecord, UploadSessionStore, now_ms};

/// Largest capsule a resumable upload may declare: one of the largest code the packer
/// accepts, with room for the zip's own structure.
pub fn max_upload_size() -> u64 {
    forge_capsule::CapsuleLimits::default().max_total_bytes + (1 << 30)
}

/// Largest chunk one PUT may carry (lower when the request body limit is lower).
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;

/// Chunk bytes held in memory at once by this process, across requests (a part is
/// sent to the object store whole): chunks past it wait.
const BUFFERED_MIB: u32 = 256;

/// Bounds of the upload sessions.
#[derive(Debug, Clone)]
pub struct UploadLimits {
    /// Open sessions per team.
    pub max_sessions_per_team: u64,
    /// A session untouched this long is removed.
    pub ttl: Duration,
    /// Largest upload (a capsule of the largest code the packer accepts).
    pub max_size: u64,
    /// Largest chunk one PUT may carry (at most [`MAX_CHUNK_BYTES`], and within the
    /// request body limit).
    pub max_chunk: u64,
}

/// Where a chunk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkRange {
    /// First byte.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// The total the client announces (must be the session's size).
    pub total: Option<u64>,
}

pub(super) struct Inner {
    /// Where an upload is assembled and verified.
    pub(super) spool: PathBuf,
    pub(super) objects: Arc<dyn ObjectStore>,
    /// The sessions and their parts.
    pub(super) sessions: Arc<dyn UploadSessionStore>,
    /// Which teams own which capsules (a completed upload makes its team an owner).
    pub(super) capsules: Arc<dyn CapsuleStore>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: UploadLimits,
    /// MiB of chunk bodies held in memory.
    buffered: Arc<Semaphore>,
}

/// The upload sessions.
#[derive(Clone)]
pub struct Uploads {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uploads")
    }
}

impl Uploads {
    /// The sessions in `sessions`, their bytes in `objects`; completions are verified
    /// in `spool`.
    pub fn new(
        spool: PathBuf,
        objects: Arc<dyn ObjectStore>,
        sessions: Arc<dyn UploadSessionStore>,
        capsules: Arc<dyn CapsuleStore>,
        metrics: Arc<Metrics>,
        limits: UploadLimits,
    ) -> Self {
        Uploads {
            inner: Arc::new(Inner {
                spool,
                objects,
                sessions,
                capsules,
                metrics,
                limits,
                buffered: Arc::new(Semaphore::new(BUFFERED_MIB as usize)),
            }),
        }
    }

    fn max_chunk(&self) -> u64 {
        self.inner.limits.max_chunk.clamp(1, MAX_CHUNK_BYTES)
    }

    pub(super) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.inner.limits.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// The session `id` if it belongs to `team`.
    pub(super) async fn session(&self, team: &str, id: &str) -> Result<UploadRecord, UploadError> {
        match self.inner.sessions.upload(id).await? {
            Some(u) if u.team == team => Ok(u),
            _ => Err(UploadError::NotFound(id.to_string())),
        }
    }

    /// Whether the capsule `digest` may be referenced by `team`'s submissions: the team
    /// uploaded its bytes (it owns it) and they are stored. Another team's capsule is
    /// absent, like an unknown one. Asking counts as a use (retention keeps it).
    pub async fn has_capsule(&self, team: &str, digest: &Digest) -> Result<bool, UploadError> {
        let present = self.inner.capsules.use_capsule(digest, team).await?
            && self.inner.objects.exists(digest.as_str()).await?;
        self.inner.metrics.capsule_lookup(present);
        Ok(present)
    }

    /// Opens a session for `size` bytes hashing to `digest` in parts of `part_bytes`
    /// (or the default), or returns the team's open one for the same digest and size
    /// (with its own part size).
    pub async fn start(
        &self,
        team: &str,
        digest: &str,
        size: u64,
        part_bytes: Option<u64>,
    ) -> Result<SessionView, UploadError> {
        let digest = Digest::parse(digest).map_err(|_| UploadError::InvalidDigest)?;
        let limit = self.inner.limits.max_size;
        if size == 0 || size > limit {
            return Err(UploadError::BadSize { size, limit });
        }
        let sessions = &self.inner.sessions;
        let open = sessions.team_uploads(team).await?;
        if let Some(same) = open.iter().find(|u| u.digest == digest && u.size == size) {
            let parts = sessions.upload_parts(&same.id).await?;
            self.inner.metrics.upload_session("resumed");
            return Ok(session::view(same, &parts, self.ttl_ms(), true));
        }
        let plan = PartPlan::choose(
            size,
            part_bytes,
            self.inner.objects.min_part_bytes(),
            self.max_chunk(),
        )?;
        let limit = self.inner.limits.max_sessions_per_team;
        if open.len() as u64 >= limit {
            self.sweep().await;
            let open = sessions.team_uploads(team).await?;
            if open.len() as u64 >= limit {
                let open = open.into_iter().map(|u| u.id).collect();
                return Err(UploadError::TooManySessions { limit, open });
            }
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        let key = upload_key(&id)?;
        let multipart_id = self.inner.objects.start_multipart(&key).await?;
        let now = now_ms();
        let record = UploadRecord {
            id,
            team: team.to_string(),
            digest,
            size,
            part_bytes: plan.part_bytes,
            multipart_id,
            created_at_ms: now,
            touched_at_ms: now,
        };
        if let Err(e) = sessions.create_upload(&record).await {
            self.abort_parts(&record).await;
            return Err(e.into());
        }
        self.inner.metrics.upload_session("started");
        Ok(session::view(&record, &[], self.ttl_ms(), false))
    }

    /// A session's state: the ranges present and missing.
    pub async fn status(&self, team: &str, id: &str) -> Result<SessionView, UploadError> {
        let u = self.session(team, id).await?;
        let parts = self.inner.sessions.upload_parts(id).await?;
        Ok(session::view(&u, &parts, self.ttl_ms(), false))
    }

    /// Stores one chunk — one whole part — and records it once its body arrived
    /// whole and the object store has it.
    ///
    /// Once the body is whole, storing, recording and counting it run as their own
    /// task: a client that disconnects then (killed mid-upload) cannot leave a part
    /// recorded but uncounted, or stored but unrecorded, and its resume sees exactly
    /// what this request did.
    pub async fn put_chunk<S, E>(
        &self,
        team: &str,
        id: &str,
        range: ChunkRange,
        body: S,
    ) -> Result<SessionView, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let u = self.session(team, id).await?;
        check_range(&u, range, self.max_chunk())?;
        let number = session::plan(&u).part_at(range.offset, range.len)?;
        let mib = u32::try_from(range.len.div_ceil(1 << 20)).unwrap_or(BUFFERED_MIB);
        let room = Arc::clone(&self.inner.buffered)
            .acquire_many_owned(mib.clamp(1, BUFFERED_MIB))
            .await
            .map_err(|e| UploadError::io("chunk buffer", e))?;
        let bytes = read_whole(body, range.len).await?;
        let this = self.clone();
        tokio::spawn(async move {
            let _room = room;
            this.store_part(&u, number, bytes).await
        })
        .await
        .map_err(|e| UploadError::io("storing a chunk", e))??;
        self.status(team, id).await
    }

    /// Puts a whole chunk as part `number` of the session's multipart upload,
    /// records it and counts its bytes.
    async fn store_part(
        &self,
        u: &UploadRecord,
        number: u32,
        bytes: Bytes,
    ) -> Result<(), UploadError> {
        let len = bytes.len() as u64;
        let key = upload_key(&u.id)?;
        let etag = self
            .inner
            .objects
            .put_part(&key, &u.multipart_id, number, bytes)
            .await?;
        let part = PartRecord { number, len, etag };
        if !self
            .inner
            .sessions
            .record_part(&u.id, &part, now_ms())
            .await?
        {
            // Aborted, expired or completed meanwhile.
            return Err(UploadError::NotFound(u.id.clone()));
        }
        self.inner.metrics.upload_bytes(len);
        Ok(())
    }

    /// Abandons a session and removes its bytes.
    pub async fn abort(&self, team: &str, id: &str) -> Result<(), UploadError> {
        let u = self.session(team, id).await?;
        self.remove(&u, "aborted").await?;
        Ok(())
    }

    /// Removes the session's row, then its parts and assembled object; `false` when
    /// another request removed it first (that one cleans up).
    pub(super) async fn remove(
        &self,
        u: &UploadRecord,
        outcome: &'static str,
    ) -> Result<bool, UploadError> {
        if !self.inner.sessions.delete_upload(&u.id).await? {
            return Ok(false);
        }
        self.abort_parts(u).await;
        self.inner.metrics.upload_session(outcome);
        Ok(true)
    }

    /// Aborts the session's multipart upload and deletes its assembled object (a
    /// failure is logged: the bucket's lifecycle rule for incomplete multipart
    /// uploads is the backstop, see `deploy/`).
    async fn abort_parts(&self, u: &UploadRecord) {
        let Ok(key) = upload_key(&u.id) else {
            return;
        };
        let objects = &self.inner.objects;
        if let Err(e) = objects.abort_multipart(&key, &u.multipart_id).await {
            tracing::warn!(upload = %u.id, "aborting its multipart upload: {e}");
        }
        if let Err(e) = objects.delete_object(&key).await {
            tracing::warn!(upload = %u.id, "deleting its assembled object: {e}");
        }
    }
}

/// The chunk's range against the session: within it, of its total, not too large.
fn check_range(u: &UploadRecord, range: ChunkRange, max_chunk: u64) -> Result<(), UploadError> {
    if range.len > max_chunk {
        return Err(UploadError::ChunkTooLarge {
            len: range.len,
            limit: max_chunk,
        });
    }
    let size = u.size;
    if range.total.is_some_and(|t| t != size) {
        return Err(UploadError::BadRange(format!(
            "the total must be the session's size, {size}"
        )));
    }
    let end = range.offset.saturating_add(range.len);
    if range.len == 0 || end > size {
        return Err(UploadError::BadRange(format!(
            "bytes {}..{end} do not fit in the session's {size} bytes",
            range.offset
        )));
    }
    Ok(())
}

/// The whole body, exactly `len` bytes.
async fn read_whole<S, E>(mut body: S, len: u64) -> Result<Bytes, UploadError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut buf = BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| UploadError::Interrupted(e.to_string()))?;
        let got = (buf.len() + chunk.len()) as u64;
        if got > len {
            return Err(UploadError::BodyLength { expected: len, got });
        }
        buf.extend_from_slice(&chunk);
    }
    if buf.len() as u64 != len {
        return Err(UploadError::BodyLength {
            expected: len,
            got: buf.len() as u64,
        });
    }
    Ok(buf.freeze())
}
