//! Shared helpers of the capsule tests: code trees (from `forge-testkit`, shared with
//! the workspace's end-to-end tests) and raw archives, good and hostile.

use std::io::Write;
use std::path::Path;

pub use forge_testkit::fs::write_tree;

/// A zip with raw entry names (no sanitizing), deflated.
pub fn zip_raw(path: &Path, entries: &[(&str, &[u8])]) {
    let f = std::fs::File::create(path).expect("create zip");
    let mut z = zip::ZipWriter::new(f);
    for (name, data) in entries {
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .large_file(data.len() as u64 >= u64::from(u32::MAX));
        z.start_file(*name, opts).expect("start_file");
        z.write_all(data).expect("write");
    }
    z.finish().expect("finish zip");
}

/// Kinds of tar entries the hostile tests need.
pub enum TarEntry<'a> {
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    Char(&'a str),
    Fifo(&'a str),
}

/// A .tar.gz with raw names (the tar crate's safe setters are bypassed).
pub fn tar_gz_raw(path: &Path, entries: &[TarEntry<'_>]) {
    let f = std::fs::File::create(path).expect("create tar.gz");
    // The default level: a bomb is packed as tight as its author can (zlib-rs's level 1
    // packs zeros only ~100:1, under the ratio limit).
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::default());
    let mut b = tar::Builder::new(gz);
    for e in entries {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        let (name, ty, data, link): (&str, tar::EntryType, &[u8], Option<&str>) = match e {
            TarEntry::File(n, d) => (n, tar::EntryType::Regular, d, None),
            TarEntry::Symlink(n, t) => (n, tar::EntryType::Symlink, &[], Some(t)),
            TarEntry::HardLink(n, t) => (n, tar::EntryType::Link, &[], Some(t)),
            TarEntry::Char(n) => (n, tar::EntryType::Char, &[], None),
            TarEntry::Fifo(n) => (n, tar::EntryType::Fifo, &[], None),
        };
        h.set_entry_type(ty);
        h.set_size(data.len() as u64);
        // Raw name bytes, so `../` and absolute paths reach the archive.
        let gnu = h.as_gnu_mut().expect("gnu header");
        gnu.name = [0; 100];
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(t) = link {
            gnu.linkname = [0; 100];
            gnu.linkname[..t.len()].copy_from_slice(t.as_bytes());
        }
        h.set_cksum();
        b.append(&h, data).expect("append");
    }
    b.into_inner()
        .expect("finish tar")
        .finish()
        .expect("finish gz");
}

/// Files directly in `dir` (to assert nothing was stored).
pub fn dir_entries(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}
