//! SHA-256 of the capsule file computed on a second core while it is written.
//!
//! The `zip` crate (2.x) writes through `Write + Seek` and patches each local
//! header (CRC, sizes) when the entry ends, so the bytes cannot be hashed as
//! they pass. Instead the assembler tells this hasher how far the file is
//! final (everything before the local header of the entry being written), and
//! a thread reads that settled prefix back — from the page cache — and hashes
//! it. Memory stays at one 1 MiB buffer; the digest is ready when the last
//! offset (the finished file's length) has been hashed.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use sha2::{Digest, Sha256};

/// Handle to the hashing thread.
pub(crate) struct TailHasher {
    tx: Option<mpsc::Sender<u64>>,
    handle: Option<JoinHandle<io::Result<(String, u64)>>>,
}

impl TailHasher {
    /// Start hashing the file at `path` (opened read-only by the thread).
    pub fn start(path: &Path) -> io::Result<Self> {
        let file = File::open(path)?;
        let (tx, rx) = mpsc::channel::<u64>();
        let handle = std::thread::Builder::new()
            .name("capsule-sha256".into())
            .spawn(move || {
                let mut hasher = Sha256::new();
                let mut buf = vec![0u8; 1 << 20];
                let mut pos: u64 = 0;
                for settled in rx {
                    while pos < settled {
                        let want = usize::try_from((settled - pos).min(buf.len() as u64))
                            .expect("bounded by buffer length");
                        file.read_exact_at(&mut buf[..want], pos)?;
                        hasher.update(&buf[..want]);
                        pos += want as u64;
                    }
                }
                Ok((hex::encode(hasher.finalize()), pos))
            })?;
        Ok(Self {
            tx: Some(tx),
            handle: Some(handle),
        })
    }

    /// Bytes `[0, offset)` of the file will not change any more.
    pub fn settled(&self, offset: u64) {
        if let Some(tx) = &self.tx {
            // A send error means the thread already failed; `finish` reports it.
            let _ = tx.send(offset);
        }
    }

    /// Hash up to `len` (the final file length) and return `(hex digest, len)`.
    pub fn finish(mut self, len: u64) -> io::Result<(String, u64)> {
        self.settled(len);
        drop(self.tx.take());
        let handle = self.handle.take().expect("finish is called once");
        handle
            .join()
            .map_err(|_| io::Error::other("capsule hashing thread panicked"))?
    }
}

impl Drop for TailHasher {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
