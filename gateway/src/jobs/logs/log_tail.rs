//! Keeping the tail of a pod log of any length with bounded memory and disk, for the
//! archive: the log is streamed (from the API server's log stream) into a spool file;
//! whenever the file holds twice the per-pod bound (`FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD`)
//! its last `bound` bytes are copied to a fresh file. Memory is one copy buffer; disk
//! at most twice the bound. At the end, a log over the bound keeps its last `bound`
//! bytes from the first line start in them, after one marker line saying how many
//! bytes (and so how much of the log) were cut: [`marker`].
//!
//! The Kubernetes `limitBytes` log parameter cannot do this: it keeps the *head* of a
//! log (the bytes read first), and a failing job's last lines are the ones that matter.

use std::io::SeekFrom;
use std::path::Path;

use tempfile::NamedTempFile;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

/// The marker line heading an archived log whose start was cut.
pub fn marker(cut: u64, bound: u64) -> String {
    format!(
        "[forge: the first {cut} bytes of this log were cut; the archive keeps its last \
         {bound} bytes at most (FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD)]\n"
    )
}

/// A log's tail being collected.
#[derive(Debug)]
pub struct TailSpool {
    dir: std::path::PathBuf,
    bound: u64,
    file: NamedTempFile,
    out: tokio::fs::File,
    /// Bytes in the spool file.
    held: u64,
    /// Bytes of the log seen so far.
    seen: u64,
}

/// A collected tail: the file holding the archive's bytes and what was cut.
#[derive(Debug)]
pub struct Tail {
    pub file: NamedTempFile,
    /// The archive's length (marker included).
    pub bytes: u64,
    /// Bytes of the log's start left out (0: the log is whole).
    pub cut: u64,
}

impl TailSpool {
    /// An empty spool in `dir` keeping at most `bound` bytes of the log.
    pub fn new(dir: &Path, bound: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let file = tempfile::Builder::new()
            .prefix(".log-tail-")
            .tempfile_in(dir)?;
        let out = tokio::fs::File::from_std(file.reopen()?);
        Ok(TailSpool {
            dir: dir.to_owned(),
            bound: bound.max(1),
            file,
            out,
            held: 0,
            seen: 0,
        })
    }

    /// Appends the next bytes of the log.
    pub async fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.out.write_all(chunk).await?;
        self.held += chunk.len() as u64;
        self.seen += chunk.len() as u64;
        if self.held > self.bound.saturating_mul(2) {
            let (file, out) = self.copy_from(self.held - self.bound, None).await?;
            (self.file, self.out, self.held) = (file, out, self.bound);
        }
        Ok(())
    }

    /// A fresh spool file holding the spool's bytes from `from` on, after `head`.
    async fn copy_from(
        &mut self,
        from: u64,
        head: Option<&[u8]>,
    ) -> std::io::Result<(NamedTempFile, tokio::fs::File)> {
        self.out.flush().await?;
        let file = tempfile::Builder::new()
            .prefix(".log-tail-")
            .tempfile_in(&self.dir)?;
        let mut out = tokio::fs::File::from_std(file.reopen()?);
        if let Some(head) = head {
            out.write_all(head).await?;
        }
        let mut src = tokio::fs::File::from_std(self.file.reopen()?);
        src.seek(SeekFrom::Start(from)).await?;
        tokio::io::copy(&mut src, &mut out).await?;
        out.flush().await?;
        Ok((file, out))
    }

    /// The archive: the whole log when it is within the bound, else the marker and the
    /// log's last `bound` bytes from the first line that starts in them (the whole
    /// tail when it holds no line break).
    pub async fn finish(mut self) -> std::io::Result<Tail> {
        if self.seen <= self.bound {
            self.out.flush().await?;
            return Ok(Tail {
                file: self.file,
                bytes: self.held,
                cut: 0,
            });
        }
        let mut from = self.held - self.bound;
        // Skip the partial first line (up to and including its newline).
        let mut src = tokio::fs::File::from_std(self.file.reopen()?);
        src.seek(SeekFrom::Start(from)).await?;
        let mut buf = vec![0u8; 64 << 10];
        let mut scanned = 0u64;
        while scanned < self.bound {
            let n = src.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            if let Some(i) = buf[..n].iter().position(|b| *b == b'\n') {
                let skip = scanned + i as u64 + 1;
                if skip < self.bound {
                    from += skip;
                }
                break;
            }
            scanned += n as u64;
        }
        let cut = self.seen - (self.held - from);
        let head = marker(cut, self.bound);
        let (file, _) = self.copy_from(from, Some(head.as_bytes())).await?;
        Ok(Tail {
            bytes: head.len() as u64 + (self.held - from),
            file,
            cut,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(bound: u64, chunks: &[&[u8]]) -> (Vec<u8>, Tail) {
        let dir = tempfile::tempdir().expect("dir");
        let mut spool = TailSpool::new(dir.path(), bound).expect("spool");
        for c in chunks {
            spool.write(c).await.expect("write");
        }
        let tail = spool.finish().await.expect("finish");
        let bytes = std::fs::read(tail.file.path()).expect("read");
        assert_eq!(bytes.len() as u64, tail.bytes, "the length reported");
        (bytes, tail)
    }

    #[tokio::test]
    async fn a_log_within_the_bound_is_kept_whole() {
        let (bytes, tail) = collect(16, &[b"one\n", b"two\n", b"three\n"]).await;
        assert_eq!(bytes, b"one\ntwo\nthree\n");
        assert_eq!(tail.cut, 0);
        let (bytes, tail) = collect(8, &[b"1234", b"567\n"]).await;
        assert_eq!((bytes.as_slice(), tail.cut), (&b"1234567\n"[..], 0));
    }

    #[tokio::test]
    async fn a_long_log_keeps_its_last_lines_after_the_marker() {
        let log: Vec<String> = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let chunks: Vec<&[u8]> = log.iter().map(|l| l.as_bytes()).collect();
        // 10 bytes a line; bound 95: the last 9 whole lines (90 bytes) fit, the 10th
        // is partial and left out.
        let (bytes, tail) = collect(95, &chunks).await;
        let text = String::from_utf8(bytes).expect("utf8");
        let (first, rest) = text.split_once('\n').expect("a marker line");
        assert_eq!(tail.cut, 10_000 - 90);
        assert_eq!(format!("{first}\n"), marker(10_000 - 90, 95));
        let expected: String = log[991..].concat();
        assert_eq!(rest, expected);
    }

    #[tokio::test]
    async fn compaction_keeps_the_tail_across_many_writes() {
        // Writes in odd sizes force several compactions (at twice the bound).
        let log: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let chunks: Vec<&[u8]> = log.chunks(37).collect();
        let (bytes, tail) = collect(1000, &chunks).await;
        let text = String::from_utf8(bytes).expect("utf8");
        let (_, rest) = text.split_once('\n').expect("marker");
        assert!(rest.len() <= 1000 && rest.len() > 990, "{}", rest.len());
        assert!(rest.ends_with("19999\n"), "the last line is kept");
        assert!(rest.starts_with(|c: char| c.is_ascii_digit()));
        let first: u32 = rest.lines().next().and_then(|l| l.parse().ok()).expect("n");
        let original = String::from_utf8(log.clone()).expect("utf8");
        assert!(
            original.ends_with(rest) && original.contains(&format!("\n{first}\n")),
            "a whole-line suffix of the log"
        );
        assert_eq!(tail.cut as usize, log.len() - rest.len());
    }

    #[tokio::test]
    async fn a_tail_without_line_breaks_is_cut_at_the_bound() {
        let log = vec![b'x'; 500];
        let (bytes, tail) = collect(100, &[&log]).await;
        assert_eq!(tail.cut, 400);
        assert_eq!(bytes.len(), marker(400, 100).len() + 100);
    }
}
