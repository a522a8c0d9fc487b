//! [`Uploads`]: the upload sessions of this gateway — starting (or finding) one,
//! writing chunks, reporting what is present, aborting; completion is `finish.rs`,
//! expiry `sweep.rs`. See the module's header (`mod.rs`) for the protocol.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::error::UploadError;
use super::ranges::RangeSet;
use super::session::{Session, SessionView};
use crate::domain::Digest;
use crate::metrics::Metrics;
use crate::objects::ObjectStore;
use crate::store::CapsuleStore;

/// Largest capsule a resumable upload may declare: one of the largest code the packer
/// accepts, with room for the zip's own structure.
pub fn max_upload_size() -> u64 {
    forge_capsule::CapsuleLimits::default().max_total_bytes + (1 << 30)
}

/// Largest chunk one PUT may carry (lower when the request body limit is lower).
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;

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

/// An open session: what never changes (read without waiting for a chunk or a
/// completion in progress) and the record behind its lock.
pub(super) struct Handle {
    pub(super) id: String,
    pub(super) team: String,
    pub(super) digest: Digest,
    pub(super) size: u64,
    pub(super) session: tokio::sync::Mutex<Session>,
}

impl Handle {
    fn new(session: Session) -> Arc<Self> {
        Arc::new(Handle {
            id: session.id.clone(),
            team: session.team.clone(),
            digest: session.digest.clone(),
            size: session.size,
            session: tokio::sync::Mutex::new(session),
        })
    }
}

pub(super) type Shared = Arc<Handle>;

pub(super) struct Inner {
    pub(super) root: PathBuf,
    pub(super) spool: PathBuf,
    pub(super) objects: Arc<dyn ObjectStore>,
    /// Which teams own which capsules (a completed upload makes its team an owner).
    pub(super) capsules: Arc<dyn CapsuleStore>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) limits: UploadLimits,
    /// Open sessions by id. A std lock, never held across an await.
    sessions: Mutex<HashMap<String, Shared>>,
}

/// The upload sessions of this gateway.
#[derive(Clone)]
pub struct Uploads {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Uploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Uploads")
    }
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Uploads {
    /// The sessions under `data_dir/uploads` (those a previous run left are picked
    /// up again).
    pub fn open(
        data_dir: &std::path::Path,
        objects: Arc<dyn ObjectStore>,
        capsules: Arc<dyn CapsuleStore>,
        metrics: Arc<Metrics>,
        limits: UploadLimits,
    ) -> std::io::Result<Self> {
        let root = data_dir.join("uploads");
        std::fs::create_dir_all(&root)?;
        let sessions = Session::load_all(&root)
            .into_iter()
            .map(|s| (s.id.clone(), Handle::new(s)))
            .collect();
        Ok(Uploads {
            inner: Arc::new(Inner {
                root,
                spool: crate::spool::dir(data_dir),
                objects,
                capsules,
                metrics,
                limits,
                sessions: Mutex::new(sessions),
            }),
        })
    }

    fn max_chunk(&self) -> u64 {
        self.inner.limits.max_chunk.clamp(1, MAX_CHUNK_BYTES)
    }

    pub(super) fn ttl_ms(&self) -> i64 {
        i64::try_from(self.inner.limits.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    pub(super) fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Shared>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The session `id` if it belongs to `team`.
    pub(super) fn session(&self, team: &str, id: &str) -> Result<Shared, UploadError> {
        match self.map().get(id) {
            Some(h) if h.team == team => Ok(h.clone()),
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

    /// Opens a session for `size` bytes hashing to `digest`, or returns the team's
    /// open one for the same digest and size.
    pub async fn start(
        &self,
        team: &str,
        digest: &str,
        size: u64,
    ) -> Result<SessionView, UploadError> {
        let digest = Digest::parse(digest).map_err(|_| UploadError::InvalidDigest)?;
        let limit = self.inner.limits.max_size;
        if size == 0 || size > limit {
            return Err(UploadError::BadSize { size, limit });
        }
        let (ttl, max_chunk) = (self.ttl_ms(), self.max_chunk());
        let same = self
            .team_sessions(team)
            .into_iter()
            .find(|h| h.digest == digest && h.size == size);
        if let Some(h) = same {
            let s = h.session.lock().await;
            if !s.gone {
                self.inner.metrics.upload_session("resumed");
                return Ok(s.view(max_chunk, ttl, true));
            }
        }
        let limit = self.inner.limits.max_sessions_per_team;
        if self.team_sessions(team).len() as u64 >= limit {
            self.sweep().await;
            let open = self.team_sessions(team);
            if open.len() as u64 >= limit {
                let open = open.iter().map(|h| h.id.clone()).collect();
                return Err(UploadError::TooManySessions { limit, open });
            }
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        let root = &self.inner.root;
        let dir = Session::dir(root, &id);
        tokio::fs::create_dir_all(&dir)
            .await
            .map_err(|e| UploadError::io("creating the session", e))?;
        let data = tokio::fs::File::create(Session::data(root, &id))
            .await
            .map_err(|e| UploadError::io("creating the session", e))?;
        data.set_len(size)
            .await
            .map_err(|e| UploadError::io("sizing the session", e))?;
        let now = now_ms();
        let session = Session {
            id: id.clone(),
            team: team.to_string(),
            digest,
            size,
            created_at_ms: now,
            touched_at_ms: now,
            received: RangeSet::default(),
            gone: false,
        };
        session.persist(root).await?;
        let view = session.view(max_chunk, ttl, false);
        self.map().insert(id, Handle::new(session));
        self.inner.metrics.upload_session("started");
        Ok(view)
    }

    fn team_sessions(&self, team: &str) -> Vec<Shared> {
        self.map()
            .values()
            .filter(|h| h.team == team)
            .cloned()
            .collect()
    }

    /// A session's state: the ranges present and missing.
    pub async fn status(&self, team: &str, id: &str) -> Result<SessionView, UploadError> {
        let shared = self.session(team, id)?;
        let s = shared.session.lock().await;
        Ok(s.view(self.max_chunk(), self.ttl_ms(), false))
    }

    /// Writes one chunk at its offset and records it once its body arrived whole.
    pub async fn put_chunk<S, E>(
        &self,
        team: &str,
        id: &str,
        range: ChunkRange,
        mut body: S,
    ) -> Result<SessionView, UploadError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let shared = self.session(team, id)?;
        let size = shared.size;
        if range.len > self.max_chunk() {
            return Err(UploadError::ChunkTooLarge {
                len: range.len,
                limit: self.max_chunk(),
            });
        }
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
        let path = Session::data(&self.inner.root, id);
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .await
            .map_err(|_| UploadError::NotFound(id.to_string()))?;
        file.seek(std::io::SeekFrom::Start(range.offset))
            .await
            .map_err(|e| UploadError::io("seeking in the session", e))?;
        let mut got = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| UploadError::Interrupted(e.to_string()))?;
            got += chunk.len() as u64;
            if got > range.len {
                return Err(UploadError::BodyLength {
                    expected: range.len,
                    got,
                });
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| UploadError::io("writing a chunk", e))?;
        }
        if got != range.len {
            return Err(UploadError::BodyLength {
                expected: range.len,
                got,
            });
        }
        file.sync_data()
            .await
            .map_err(|e| UploadError::io("syncing a chunk", e))?;
        let mut s = shared.session.lock().await;
        if s.gone {
            return Err(UploadError::NotFound(id.to_string()));
        }
        // Recorded and counted together (no await between): a request dropped later,
        // while the record is written, still leaves both agreeing.
        s.received.insert(range.offset, end);
        s.touched_at_ms = now_ms();
        self.inner.metrics.upload_bytes(range.len);
        s.persist(&self.inner.root).await?;
        Ok(s.view(self.max_chunk(), self.ttl_ms(), false))
    }

    /// Abandons a session and removes its bytes.
    pub async fn abort(&self, team: &str, id: &str) -> Result<(), UploadError> {
        let shared = self.session(team, id)?;
        let mut s = shared.session.lock().await;
        if !s.gone {
            self.remove(&mut s, "aborted").await;
        }
        Ok(())
    }

    /// Forgets a session (its lock held) and deletes its directory.
    pub(super) async fn remove(&self, s: &mut Session, outcome: &'static str) {
        s.gone = true;
        self.map().remove(&s.id);
        let dir = Session::dir(&self.inner.root, &s.id);
        if let Err(e) = tokio::fs::remove_dir_all(&dir).await {
            tracing::warn!(dir = %dir.display(), "removing an upload session: {e}");
        }
        self.inner.metrics.upload_session(outcome);
    }
}
