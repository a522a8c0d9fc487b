//! What a zip's end-of-central-directory record declares (entry count, directory
//! size), read from the file's tail *before* the `zip` crate reads the central
//! directory: the crate allocates and parses one record per declared entry, so a
//! 256 MiB upload declaring millions of (Zip64) entries would cost gigabytes before
//! the file-count limit could look at them.
//!
//! Every end-of-central-directory candidate in the tail (the record may be followed
//! by a comment of up to 64 KiB) is considered, with its Zip64 record where the
//! classic one defers to it; the largest declaration counts. A Zip64 locator that
//! points at no Zip64 record is refused (the crate would go looking for one).

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};

const EOCD_SIG: u32 = 0x0605_4b50;
const EOCD_LEN: usize = 22;
const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
const ZIP64_LOCATOR_LEN: usize = 20;
const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
const ZIP64_EOCD_LEN: usize = 56;
const MAX_COMMENT: usize = 65_535;

/// What the archive's end records declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Declared {
    /// Entries in the central directory.
    pub entries: u64,
    /// Bytes of the central directory.
    pub directory_bytes: u64,
}

/// Why the end records cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DirectoryError {
    /// Reading the file failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A Zip64 locator points at no Zip64 end record.
    #[error("the Zip64 end-of-central-directory locator points at no Zip64 record")]
    BadZip64Locator,
}

fn u16_at(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

fn u32_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn read_at(file: &mut File, at: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
    let size = file.metadata()?.len();
    if at.checked_add(len as u64).is_none_or(|end| end > size) {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(at))?;
    let mut buf = vec![0u8; len];
    file.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// The largest declaration among the end-record candidates, or `None` when the file
/// has no end record at all (the `zip` crate then reports it as not a zip).
pub(crate) fn declared(file: &mut File) -> Result<Option<Declared>, DirectoryError> {
    let size = file.metadata()?.len();
    let tail_len = usize::try_from(size.min((EOCD_LEN + MAX_COMMENT) as u64)).unwrap_or(0);
    let tail_start = size - tail_len as u64;
    let Some(tail) = read_at(file, tail_start, tail_len)? else {
        return Ok(None);
    };
    let mut found: Option<Declared> = None;
    for at in (0..tail.len().saturating_sub(EOCD_LEN - 1)).rev() {
        if u32_at(&tail, at) != u64::from(EOCD_SIG) {
            continue;
        }
        let mut this = Declared {
            entries: u16_at(&tail, at + 10),
            directory_bytes: u32_at(&tail, at + 12),
        };
        let zip64 = this.entries == 0xFFFF
            || this.directory_bytes == 0xFFFF_FFFF
            || u32_at(&tail, at + 16) == 0xFFFF_FFFF;
        let locator_at = (tail_start + at as u64).checked_sub(ZIP64_LOCATOR_LEN as u64);
        if let (true, Some(locator_at)) = (zip64, locator_at)
            && let Some(locator) = read_at(file, locator_at, ZIP64_LOCATOR_LEN)?
            && u32_at(&locator, 0) == u64::from(ZIP64_LOCATOR_SIG)
        {
            let record = read_at(file, u64_at(&locator, 8), ZIP64_EOCD_LEN)?
                .filter(|r| u32_at(r, 0) == u64::from(ZIP64_EOCD_SIG))
                .ok_or(DirectoryError::BadZip64Locator)?;
            this.entries = this.entries.max(u64_at(&record, 32));
            this.directory_bytes = this.directory_bytes.max(u64_at(&record, 40));
        }
        let best = found.get_or_insert(this);
        best.entries = best.entries.max(this.entries);
        best.directory_bytes = best.directory_bytes.max(this.directory_bytes);
    }
    Ok(found)
}
