//! Reading a job's logs: the archived copy once the job ended, the live pod's log
//! before that — whole, from a byte offset, or its last lines — and following it:
//! live while the pod runs, then the archived copy, on one response.
//!
//! Offsets are bytes of the log. The archived copy is the pod's log read at the end,
//! so live and archived bytes agree and a client that reconnects with the offset it
//! reached (`forge logs -f`) gets neither a gap nor a repeated line.

use std::time::Duration;

use bytes::Bytes;
use futures::AsyncReadExt;
use futures::stream::BoxStream;
use tokio::sync::mpsc;

use super::error::JobError;
use super::service::Jobs;
use crate::cluster::LogSource;
use crate::objects::{ObjectStoreError, log_key};
use crate::store::JobRecord;

/// How long a follower waits for a change before looking again (a pod appearing is
/// not on the job feed).
const FOLLOW_RECHECK: Duration = Duration::from_secs(1);
/// How long a follower waits, after the job ended, for its archived log.
const ARCHIVE_GRACE: Duration = Duration::from_secs(30);

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStart {
    /// At this byte.
    Offset(u64),
    /// At the start of the last `n` lines.
    Tail(usize),
}

/// A log read: the offset of its first byte and the bytes.
pub struct LogStream {
    pub offset: u64,
    pub body: BoxStream<'static, Result<Bytes, std::io::Error>>,
}

/// The offset where the last `n` lines of `data` start — the kubelet's `tailLines`
/// (the emulator's implementation of it), so live and archived tails agree.
pub fn tail_offset(data: &[u8], n: usize) -> usize {
    data.len() - forge_kubesim::logs::tail_lines(data, n).len()
}

fn start_in(data: &[u8], start: LogStart) -> usize {
    match start {
        LogStart::Offset(n) => usize::try_from(n).unwrap_or(usize::MAX).min(data.len()),
        LogStart::Tail(n) => tail_offset(data, n),
    }
}

impl Jobs {
    /// A job's `source` log: archived if it is, else live from the cluster while the
    /// pod exists.
    pub async fn log(&self, job: &JobRecord, source: LogSource) -> Result<Bytes, JobError> {
        if let Some(archived) = self.archived_log(job, source).await? {
            return Ok(archived);
        }
        if let Some(live) = self.live_log(job, source).await {
            return Ok(Bytes::from(live));
        }
        Err(JobError::LogNotAvailable {
            id: job.id.clone(),
            source_: source,
            state: job.state,
        })
    }

    /// A read of the log from `start`: what there is now, or (`follow`) everything
    /// from there on until the job has ended and its archived log is sent.
    pub async fn log_from(
        &self,
        job: &JobRecord,
        source: LogSource,
        start: LogStart,
        follow: bool,
    ) -> Result<LogStream, JobError> {
        if !follow {
            let text = self.log(job, source).await?;
            let at = start_in(&text, start);
            let body = text.slice(at..);
            return Ok(LogStream {
                offset: at as u64,
                body: Box::pin(futures::stream::once(async move { Ok(body) })),
            });
        }
        let offset = match start {
            LogStart::Offset(n) => n,
            LogStart::Tail(_) => match self.log(job, source).await {
                Ok(text) => start_in(&text, start) as u64,
                Err(JobError::LogNotAvailable { .. }) => 0,
                Err(e) => return Err(e),
            },
        };
        let (tx, rx) = mpsc::channel(16);
        let jobs = self.clone();
        let id = job.id.clone();
        tokio::spawn(async move {
            if let Err(e) = jobs.follow(&id, source, offset, &tx).await {
                tracing::warn!(job = %id, "following the log: {e}");
                let _ = tx
                    .send(Err(std::io::Error::other("log follow failed")))
                    .await;
            }
        });
        let body = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        Ok(LogStream {
            offset,
            body: Box::pin(body),
        })
    }

    async fn archived_log(
        &self,
        job: &JobRecord,
        source: LogSource,
    ) -> Result<Option<Bytes>, JobError> {
        let key = log_key(&job.id, source.as_str())?;
        match self.objects.get_object(&key).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(ObjectStoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Sends the log from `offset` on: live pod logs while there are, then the
    /// archived remainder once the job has ended. Ends when the receiver is gone.
    async fn follow(
        &self,
        id: &str,
        source: LogSource,
        mut offset: u64,
        tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) -> Result<(), JobError> {
        let mut feed = self.feed.subscribe();
        let mut ended_at: Option<tokio::time::Instant> = None;
        loop {
            let Some(job) = self.store.get(id).await? else {
                return Ok(());
            };
            if let Some(archived) = self.archived_log(&job, source).await? {
                let at = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(archived.len());
                if at < archived.len() {
                    let _ = tx.send(Ok(archived.slice(at..))).await;
                }
                return Ok(());
            }
            let Some(sent) = self.follow_live(&job, source, offset, tx).await? else {
                return Ok(()); // the receiver is gone
            };
            let progressed = sent > 0;
            offset += sent;
            if job.state.is_terminal() {
                let since = *ended_at.get_or_insert_with(tokio::time::Instant::now);
                if job.rayjob_name.is_none() || since.elapsed() > ARCHIVE_GRACE {
                    return Ok(()); // never ran, or no archive will come
                }
            }
            if !progressed {
                tokio::select! {
                    () = tx.closed() => return Ok(()),
                    _ = feed.recv() => {},
                    () = tokio::time::sleep(FOLLOW_RECHECK) => {},
                }
            }
        }
    }

    /// Streams the live pod log from `offset` until the pod's stream ends; returns
    /// the bytes sent (0 when there is no pod yet), or `None` when the receiver left.
    async fn follow_live(
        &self,
        job: &JobRecord,
        source: LogSource,
        offset: u64,
        tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) -> Result<Option<u64>, JobError> {
        let Some(rayjob) = job.rayjob_name.as_deref() else {
            return Ok(Some(0));
        };
        let pods = &self.cluster.pods;
        let Ok(Some((pod, container))) = pods.log_pod(&job.id, rayjob, source).await else {
            return Ok(Some(0));
        };
        let name = kube::ResourceExt::name_any(&pod);
        let Ok(mut reader) = pods.log_follow(&name, container).await else {
            return Ok(Some(0)); // not started yet
        };
        let mut buf = vec![0u8; 64 << 10];
        let (mut read, mut sent) = (0u64, 0u64);
        loop {
            let n = tokio::select! {
                () = tx.closed() => return Ok(None),
                n = reader.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                },
            };
            let chunk_start = read;
            read += n as u64;
            if read <= offset {
                continue;
            }
            let skip = usize::try_from(offset.saturating_sub(chunk_start)).unwrap_or(0);
            let piece = Bytes::copy_from_slice(&buf[skip..n]);
            sent += piece.len() as u64;
            if tx.send(Ok(piece)).await.is_err() {
                return Ok(None);
            }
        }
        Ok(Some(sent))
    }

    /// The current log of a job's pod, if it can be read.
    async fn live_log(&self, job: &JobRecord, source: LogSource) -> Option<String> {
        let rayjob = job.rayjob_name.as_deref()?;
        let pods = &self.cluster.pods;
        let (pod, container) = pods.log_pod(&job.id, rayjob, source).await.ok()??;
        let name = kube::ResourceExt::name_any(&pod);
        pods.log(&name, container, None).await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_offsets_count_lines_from_the_end() {
        let log = b"a\nb\nc\n";
        assert_eq!(tail_offset(log, 1), 4);
        assert_eq!(tail_offset(log, 2), 2);
        assert_eq!(tail_offset(log, 3), 0);
        assert_eq!(tail_offset(log, 9), 0);
        assert_eq!(tail_offset(log, 0), log.len());
        assert_eq!(
            tail_offset(b"a\nb", 1),
            2,
            "an unterminated last line counts"
        );
        assert_eq!(start_in(log, LogStart::Offset(99)), log.len());
    }
}
