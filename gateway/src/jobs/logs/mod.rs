//! Reading a job's logs — the driver's by default, the head's, or any pod's
//! ([`LogTarget`]) — the archived copy once the job ended, the live pod's log before
//! that, whole, from a byte offset, or its last lines, and following it: live while
//! the pod runs, then the archived copy, on one response.
//!
//! Memory per read is bounded: an archived log is streamed from storage in chunks (a
//! byte range from the offset; the start of its last lines is found by reading it
//! backwards a window at a time), a live log is passed through from the API server's
//! log stream, and a live `tail` read holds at most twice the per-pod bound
//! (`FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD`) while it looks for the last lines.
//!
//! Offsets are bytes of the log. The archived copy is the pod's log read at the end,
//! so live and archived bytes agree and a client that reconnects with the offset it
//! reached (`forge logs -f`) gets neither a gap nor a repeated line — unless the log
//! was longer than the per-pod bound: then the archive is its tail after a marker line.

pub mod dashboard;
pub mod diagnosis;
pub mod explain;
pub mod log_tail;
pub mod pod_logs;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{AsyncReadExt, StreamExt};
use tokio::sync::mpsc;

use super::core::JobCore;
use super::error::JobError;
use super::job_fleet::cluster_of;
use crate::cluster::{Fleets, LogSource};
use crate::jobs::lifecycle::stop_first::stop_wait;
use crate::objects::ObjectStore;
use crate::store::JobRecord;
use pod_logs::LogTarget;

/// How long a follower waits for a change before looking again (a pod appearing is
/// not on the job feed).
const FOLLOW_RECHECK: Duration = Duration::from_secs(1);
/// How long a follower waits for the archived log after the job ended and its Ray
/// job had its time to stop (`lifecycle::stop_first::stop_wait`).
const ARCHIVE_GRACE: Duration = Duration::from_secs(30);
/// Bytes read at a time from storage when looking for the start of the last lines.
const TAIL_WINDOW: u64 = 64 << 10;

pub use super::error::CLUSTER_READ_WITHIN;

/// `read`, failed with [`JobError::ClusterSlow`] if it takes longer than
/// [`CLUSTER_READ_WITHIN`].
pub(crate) async fn within<T>(
    what: &'static str,
    read: impl std::future::Future<Output = Result<T, JobError>>,
) -> Result<T, JobError> {
    tokio::time::timeout(CLUSTER_READ_WITHIN, read)
        .await
        .unwrap_or(Err(JobError::ClusterSlow { what }))
}

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
/// (a trailing newline does not start a line; fewer lines than `n` is the whole log), so
/// live and archived tails agree. A test holds it against the emulator's kubelet.
pub fn tail_offset(data: &[u8], n: usize) -> usize {
    if n == 0 {
        return data.len();
    }
    let body = data.strip_suffix(b"\n").unwrap_or(data);
    body.iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(n - 1)
        .map_or(0, |(i, _)| i + 1)
}

/// Where the last `n` lines of a `total`-byte log start, reading it backwards a
/// window at a time with `read(start, end)` — [`tail_offset`] without holding the log.
pub async fn tail_offset_backwards<F, Fut>(
    total: u64,
    n: usize,
    window: u64,
    mut read: F,
) -> Result<u64, JobError>
where
    F: FnMut(u64, u64) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<u8>, JobError>>,
{
    if n == 0 {
        return Ok(total);
    }
    let (mut end, mut seen, mut last) = (total, 0usize, true);
    while end > 0 {
        let start = end.saturating_sub(window.max(1));
        let chunk = read(start, end).await?;
        let mut slice = chunk.as_slice();
        if last {
            // A trailing newline does not start a line.
            slice = slice.strip_suffix(b"\n").unwrap_or(slice);
            last = false;
        }
        for (i, b) in slice.iter().enumerate().rev() {
            if *b == b'\n' {
                seen += 1;
                if seen == n {
                    return Ok(start + i as u64 + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// Reads an `AsyncBufRead` as a stream of chunks.
fn chunks(
    reader: std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let buf = vec![0u8; 64 << 10];
    futures::stream::unfold((reader, buf), |(mut r, mut buf)| async move {
        match r.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(&buf[..n]);
                Some((Ok(chunk), (r, buf)))
            }
            Err(e) => Some((Err(e), (r, buf))),
        }
    })
}

/// `body` without its first `skip` bytes.
fn skip_bytes(
    body: impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    skip: u64,
) -> BoxStream<'static, Result<Bytes, std::io::Error>> {
    Box::pin(
        body.scan(skip, |left, item| {
            let out = item.map(|mut chunk| {
                let drop = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                *left -= drop as u64;
                chunk.split_off(drop)
            });
            async move { Some(out) }
        })
        .filter(|item| {
            let keep = !matches!(item, Ok(c) if c.is_empty());
            async move { keep }
        }),
    )
}

/// The logs service: a job's logs (archived or live), its pods' logs, what its pods
/// say about why it is not running (`diagnosis.rs`) and its Ray dashboard.
#[derive(Clone)]
pub struct JobLogs {
    core: JobCore,
    /// The fleets (a job's pods and events are in its fleet's cluster).
    fleets: Fleets,
    objects: Arc<dyn ObjectStore>,
    /// A preempted attempt's archived logs instead of the job's current ones
    /// ([`JobLogs::of_attempt`]).
    attempt: Option<u32>,
}

impl std::fmt::Debug for JobLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobLogs")
    }
}

impl JobLogs {
    pub fn new(core: JobCore, fleets: Fleets, objects: Arc<dyn ObjectStore>) -> Self {
        JobLogs {
            core,
            fleets,
            objects,
            attempt: None,
        }
    }

    /// The logs of attempt `n` of a job, archived when it was preempted: read from
    /// the archive only (its pods are gone), never followed.
    pub fn of_attempt(&self, n: u32) -> JobLogs {
        JobLogs {
            attempt: Some(n),
            ..self.clone()
        }
    }

    /// The logs of `job`'s attempt `n` (`None`: its current one), and whether they
    /// can be followed (an earlier attempt has ended). An attempt the job has not
    /// reached is [`JobError::NoSuchAttempt`].
    pub fn for_attempt(
        &self,
        job: &JobRecord,
        n: Option<u32>,
    ) -> Result<(JobLogs, bool), JobError> {
        match n {
            Some(n) if n > job.attempt => Err(JobError::NoSuchAttempt {
                id: job.id.clone(),
                attempt: n,
                last: job.attempt,
            }),
            Some(n) if n < job.attempt => Ok((self.of_attempt(n), false)),
            _ => Ok((self.clone(), true)),
        }
    }
}

impl JobLogs {
    /// A job's log as one buffer (the console's page), at most the per-pod bound
    /// plus the archive's marker line.
    pub async fn log(&self, job: &JobRecord, source: LogSource) -> Result<Bytes, JobError> {
        let mut read = self
            .log_from(job, &LogTarget::Source(source), LogStart::Offset(0), false)
            .await?;
        let most = usize::try_from(self.log_bound()).unwrap_or(usize::MAX) + 1024;
        let mut out = Vec::new();
        while let Some(chunk) = read.body.next().await {
            let chunk = chunk.map_err(|e| JobError::io("reading the log", e))?;
            out.extend_from_slice(&chunk[..chunk.len().min(most - out.len())]);
            if out.len() >= most {
                break;
            }
        }
        Ok(Bytes::from(out))
    }

    /// A read of the log from `start`: what there is now, or (`follow`) everything
    /// from there on until the job has ended and its archived log is sent.
    pub async fn log_from(
        &self,
        job: &JobRecord,
        target: &LogTarget,
        start: LogStart,
        follow: bool,
    ) -> Result<LogStream, JobError> {
        if !follow {
            return self.read_now(job, target, start).await;
        }
        let offset = match start {
            LogStart::Offset(n) => n,
            LogStart::Tail(_) => match self.read_now(job, target, start).await {
                Ok(read) => read.offset,
                Err(JobError::LogNotAvailable { .. }) => 0,
                Err(e) => return Err(e),
            },
        };
        let (tx, rx) = mpsc::channel(16);
        let jobs = self.clone();
        let id = job.id.clone();
        let target = target.clone();
        tokio::spawn(async move {
            if let Err(e) = jobs.follow(&id, &target, offset, &tx).await {
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

    /// What the log holds now from `start`: archived, else live.
    async fn read_now(
        &self,
        job: &JobRecord,
        target: &LogTarget,
        start: LogStart,
    ) -> Result<LogStream, JobError> {
        if let Some(key) = self.archived_key(job, target).await? {
            return self.archived_from(&key, start).await;
        }
        if let Some(read) = self.live_from(job, target, start).await {
            return Ok(read);
        }
        Err(JobError::LogNotAvailable {
            id: job.id.clone(),
            log: target.describe(),
            state: job.state,
        })
    }

    /// The archived log under `key` from `start`, streamed from storage.
    async fn archived_from(&self, key: &str, start: LogStart) -> Result<LogStream, JobError> {
        let offset = match start {
            LogStart::Offset(n) => n,
            LogStart::Tail(n) => {
                let total = self.objects.object_len(key).await?.unwrap_or(0);
                let objects = self.objects.clone();
                tail_offset_backwards(total, n, TAIL_WINDOW, |a, b| {
                    let objects = objects.clone();
                    async move {
                        let mut range = objects.get_object_range(key, a, Some(b)).await?;
                        let mut out = Vec::new();
                        while let Some(chunk) = range.body.next().await {
                            out.extend_from_slice(
                                &chunk.map_err(|e| JobError::io("reading the log", e))?,
                            );
                        }
                        Ok::<_, JobError>(out)
                    }
                })
                .await?
            }
        };
        let range = self.objects.get_object_range(key, offset, None).await?;
        Ok(LogStream {
            offset: offset.min(range.total),
            body: range.body,
        })
    }

    /// The live log from `start`: passed through from the API server (an offset), or
    /// its last lines found in a buffer of at most twice the per-pod bound.
    async fn live_from(
        &self,
        job: &JobRecord,
        target: &LogTarget,
        start: LogStart,
    ) -> Option<LogStream> {
        let (pod, container) = self.live_pod(job, target).await?;
        let reader = cluster_of(&self.fleets, job)
            .ok()?
            .pods
            .log_stream(&pod, container.as_deref(), false)
            .await
            .ok()?;
        match start {
            LogStart::Offset(n) => Some(LogStream {
                offset: n,
                body: skip_bytes(chunks(reader), n),
            }),
            LogStart::Tail(lines) => {
                let bound = usize::try_from(self.log_bound()).unwrap_or(usize::MAX);
                let mut body = Box::pin(chunks(reader));
                let (mut held, mut dropped) = (Vec::new(), 0u64);
                while let Some(chunk) = body.next().await {
                    held.extend_from_slice(&chunk.ok()?);
                    if held.len() > bound.saturating_mul(2) {
                        let cut = held.len() - bound;
                        held.drain(..cut);
                        dropped += cut as u64;
                    }
                }
                let at = tail_offset(&held, lines);
                let tail = Bytes::from(held).slice(at..);
                Some(LogStream {
                    offset: dropped + at as u64,
                    body: Box::pin(futures::stream::once(async move { Ok(tail) })),
                })
            }
        }
    }

    /// Sends the log from `offset` on: live pod logs while there are, then the
    /// archived remainder once the job has ended. Ends when the receiver is gone.
    async fn follow(
        &self,
        id: &str,
        target: &LogTarget,
        mut offset: u64,
        tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) -> Result<(), JobError> {
        let mut feed = self.core.feed.subscribe();
        let mut ended_at: Option<tokio::time::Instant> = None;
        loop {
            let Some(job) = self.core.store.get(id).await? else {
                return Ok(());
            };
            if let Some(key) = self.archived_key(&job, target).await? {
                let mut range = self.objects.get_object_range(&key, offset, None).await?;
                while let Some(chunk) = range.body.next().await {
                    if tx.send(chunk).await.is_err() {
                        break;
                    }
                }
                return Ok(());
            }
            let Some(sent) = self.follow_live(&job, target, offset, tx).await? else {
                return Ok(()); // the receiver is gone
            };
            let progressed = sent > 0;
            offset += sent;
            if job.state.is_terminal() {
                let since = *ended_at.get_or_insert_with(tokio::time::Instant::now);
                let waited = since.elapsed();
                if job.rayjob_name.is_none() || waited > stop_wait(&job) + ARCHIVE_GRACE {
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
        target: &LogTarget,
        offset: u64,
        tx: &mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) -> Result<Option<u64>, JobError> {
        let Some((name, container)) = self.live_pod(job, target).await else {
            return Ok(Some(0));
        };
        let pods = &cluster_of(&self.fleets, job)?.pods;
        let Ok(mut reader) = pods.log_stream(&name, container.as_deref(), true).await else {
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
        // The same as the emulator's kubelet answers `tailLines`.
        let logs: [&[u8]; 8] = [
            b"",
            b"\n",
            b"a",
            b"a\n",
            b"a\n\nb\n",
            b"\n\n\n",
            b"x\ny\nz",
            log,
        ];
        for log in logs {
            for n in 0..6 {
                let kubelet = log.len() - forge_kubesim::logs::tail_lines(log, n).len();
                assert_eq!(tail_offset(log, n), kubelet, "{log:?}, {n} lines");
            }
        }
    }

    #[tokio::test]
    async fn reading_backwards_finds_the_tail_the_kubelet_would() {
        let logs: [&[u8]; 6] = [
            b"a\nb\nc\n",
            b"a\nb",
            b"",
            b"\n\n\n",
            b"no newline at all",
            b"one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nten\n",
        ];
        for log in logs {
            for n in 0..12 {
                for window in [1u64, 2, 3, 7, 64] {
                    let got =
                        tail_offset_backwards(log.len() as u64, n, window, |a, b| async move {
                            Ok::<_, JobError>(log[a as usize..b as usize].to_vec())
                        })
                        .await
                        .expect("read");
                    assert_eq!(
                        got as usize,
                        tail_offset(log, n),
                        "log {:?} n {n} window {window}",
                        String::from_utf8_lossy(log)
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn skipping_drops_the_first_bytes_across_chunks() {
        let body = futures::stream::iter(
            ["abc", "de", "fgh"].map(|s| Ok::<_, std::io::Error>(Bytes::from_static(s.as_bytes()))),
        );
        let out: Vec<Bytes> = skip_bytes(body, 4)
            .map(|c| c.expect("chunk"))
            .collect()
            .await;
        assert_eq!(out.concat(), b"efgh");
    }
}
