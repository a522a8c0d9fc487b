//! A reader between the gzip decoder and the `tar` crate that sees every tar header
//! stream by and refuses GNU long-name / long-link and PAX extension entries larger
//! than `CapsuleLimits::max_tar_extension_bytes` *before* the crate reads them: tar
//! 0.4 reads those bodies whole into memory, so an 8 MB `.tar.gz` could make it
//! allocate gigabytes (only the compression-ratio guard bounded it).
//!
//! The guard follows the archive's block structure: a 512-byte header, then the
//! entry's data rounded up to whole blocks — the size from the header, or from the
//! preceding PAX record's `size=` (which the guard reads, as the crate does). It stops
//! following at a GNU sparse header (whose extra blocks it does not parse; such
//! entries are refused anyway) and at a header whose size it cannot read (the crate
//! refuses it).

use std::io::{self, Read};

const BLOCK: u64 = 512;

/// An extension entry over the bound (carried in an `io::Error`).
#[derive(Debug)]
pub(crate) struct ExtensionTooLarge {
    /// `GNU long name`, `GNU long link` or `PAX header`.
    pub what: &'static str,
    /// Declared size.
    pub size: u64,
}

impl std::fmt::Display for ExtensionTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} bytes", self.what, self.size)
    }
}

impl std::error::Error for ExtensionTooLarge {}

/// The guard.
pub(crate) struct TarGuard<R> {
    inner: R,
    limit: u64,
    header: Vec<u8>,
    /// Data bytes (padded) before the next header.
    skip: u64,
    /// The body of a PAX header being read (bounded by `limit`).
    pax: Option<Vec<u8>>,
    /// `size=` of the last PAX header, for the next file entry.
    pax_size: Option<u64>,
    following: bool,
}

impl<R> TarGuard<R> {
    pub(crate) fn new(inner: R, limit: u64) -> Self {
        Self {
            inner,
            limit,
            header: Vec::with_capacity(BLOCK as usize),
            skip: 0,
            pax: None,
            pax_size: None,
            following: true,
        }
    }

    fn feed(&mut self, mut data: &[u8]) -> io::Result<()> {
        while self.following && !data.is_empty() {
            if self.skip > 0 {
                let take = usize::try_from(self.skip.min(data.len() as u64)).unwrap_or(0);
                if let Some(pax) = &mut self.pax {
                    pax.extend_from_slice(&data[..take]);
                }
                self.skip -= take as u64;
                data = &data[take..];
                if self.skip == 0
                    && let Some(pax) = self.pax.take()
                {
                    self.pax_size = pax_size(&pax);
                }
                continue;
            }
            let take = (BLOCK as usize - self.header.len()).min(data.len());
            self.header.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.header.len() == BLOCK as usize {
                let header = std::mem::take(&mut self.header);
                self.on_header(&header)?;
                self.header = header;
                self.header.clear();
            }
        }
        Ok(())
    }

    fn on_header(&mut self, h: &[u8]) -> io::Result<()> {
        if h.iter().all(|b| *b == 0) {
            return Ok(());
        }
        let Some(size) = header_size(&h[124..136]) else {
            self.following = false;
            return Ok(());
        };
        let what = match h[156] {
            b'L' => Some("GNU long name"),
            b'K' => Some("GNU long link"),
            b'x' | b'g' => Some("PAX header"),
            _ => None,
        };
        let size = match what {
            Some(what) => {
                if size > self.limit {
                    return Err(io::Error::other(ExtensionTooLarge { what, size }));
                }
                if h[156] == b'x' {
                    self.pax = Some(Vec::new());
                }
                size
            }
            None if h[156] == b'S' => {
                self.following = false;
                return Ok(());
            }
            None => self.pax_size.take().unwrap_or(size),
        };
        self.skip = size.div_ceil(BLOCK).saturating_mul(BLOCK);
        if self.skip == 0 && self.pax.take().is_some() {
            self.pax_size = None;
        }
        Ok(())
    }
}

/// The size field: octal, or base-256 when the high bit of the first byte is set.
fn header_size(field: &[u8]) -> Option<u64> {
    if field[0] & 0x80 != 0 {
        let mut n: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            n = n.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(n);
    }
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, 8).ok()
}

/// The `size=` record of a PAX body (`"<len> <key>=<value>\n"` records).
fn pax_size(body: &[u8]) -> Option<u64> {
    let mut rest = body;
    let mut size = None;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
        if len <= space || len > rest.len() {
            return size;
        }
        let record = &rest[space + 1..len];
        if let Some(value) = record.strip_prefix(b"size=") {
            let value = value.strip_suffix(b"\n").unwrap_or(value);
            size = std::str::from_utf8(value).ok()?.parse().ok();
        }
        rest = &rest[len..];
    }
    size
}

impl<R: Read> Read for TarGuard<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.feed(&buf[..n])?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_pax_records() {
        assert_eq!(header_size(b"00000001750\0"), Some(1000));
        assert_eq!(header_size(b"\0\0\0\0\0\0\0\0\0\0\0\0"), Some(0));
        let mut binary = [0u8; 12];
        binary[0] = 0x80;
        binary[11] = 2;
        assert_eq!(header_size(&binary), Some(2));
        assert_eq!(pax_size(b"12 size=512\n16 path=a/b/c/d\n"), Some(512));
        assert_eq!(pax_size(b"16 path=a/b/c/d\n"), None);
    }
}
