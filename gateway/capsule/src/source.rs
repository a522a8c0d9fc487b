//! Code sources (uploaded `.zip` / `.tar.gz`, or a directory) turned into a
//! validated, sorted list of regular files ready to be streamed into a capsule.
//!
//! A zip is read in place (random access through its central directory). A
//! `.tar.gz` can only be read front to back, so its files are streamed into a
//! staging directory inside the output directory first (limits enforced while
//! decompressing) and then read back in sorted order. A directory is read in
//! place; it is never stripped (it *is* the code root).
//!
//! Archives with a single top-level folder have it stripped exactly as Ray does
//! for `working_dir` zips (`__MACOSX/` entries are dropped first), so
//! `zip -r code.zip myproj/` and `cd myproj && zip -r ../code.zip .` give the
//! same capsule.

use std::cell::Cell;
use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::error::{CapsuleError, SizedPath};
use crate::limits::CapsuleLimits;
use crate::path::{normalize, resolve_link};
use crate::tar_guard::{ExtensionTooLarge, TarGuard};
use crate::zip_directory;

/// Where the user's code comes from.
#[derive(Debug, Clone)]
pub enum CodeSource {
    /// A `.zip` file on disk (the gateway spools uploads to disk).
    Zip(PathBuf),
    /// A gzip-compressed tar file on disk.
    TarGz(PathBuf),
    /// A directory tree (CLI / tests). Symlinks inside it are refused.
    Dir(PathBuf),
    /// A file whose format is detected from its magic bytes (zip or gzip).
    Archive(PathBuf),
    /// A directory restricted to these files, given relative to `root` (a client's
    /// ignore rules already applied). Each is checked like a directory walk's file;
    /// never stripped.
    Listed { root: PathBuf, files: Vec<PathBuf> },
    /// A capsule this crate assembled: its code (everything under `capsule/`
    /// except `capsule/.forge/`) is packed again (see the `repack` module).
    Capsule(PathBuf),
}

/// Reserved directory inside the capsule for Forge's own files.
pub const FORGE_DIR: &str = ".forge";
/// The single top-level folder of every capsule (Ray strips it when unpacking).
pub const TOP_DIR: &str = "capsule";

const S_IFMT: u32 = 0o170_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;

#[derive(Debug)]
pub(crate) enum Origin {
    Fs(PathBuf),
    ZipIndex(usize),
}

#[derive(Debug)]
pub(crate) struct Entry {
    pub path: String,
    pub declared_size: u64,
    pub executable: bool,
    pub origin: Origin,
    /// Compressed size from the zip header (ratio check), if any.
    pub compressed_size: Option<u64>,
}

/// Validated, sorted input ready to be streamed.
pub(crate) struct Prepared {
    pub entries: Vec<Entry>,
    pub zip: Option<zip::ZipArchive<File>>,
    /// Keeps the tar staging directory alive until the capsule is written.
    pub _staging: Option<tempfile::TempDir>,
}

/// Running byte budget shared by all entries of one assembly.
pub(crate) struct Budget<'a> {
    limits: &'a CapsuleLimits,
    total: u64,
    sizes: Vec<SizedPath>,
}

impl<'a> Budget<'a> {
    pub fn new(limits: &'a CapsuleLimits) -> Self {
        Self {
            limits,
            total: 0,
            sizes: Vec::new(),
        }
    }

    fn too_large(&self, current: Option<SizedPath>) -> CapsuleError {
        let mut all: Vec<SizedPath> = self.sizes.iter().cloned().chain(current).collect();
        all.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.path.cmp(&b.path)));
        all.truncate(self.limits.largest_listed);
        CapsuleError::TooLarge {
            limit: self.limits.max_total_bytes,
            total: self.total,
            largest: all,
        }
    }

    /// Early check with declared sizes (trustworthy for directories, a cheap
    /// first filter for zips).
    fn check_declared(&mut self, entries: &[Entry]) -> Result<(), CapsuleError> {
        let total: u64 = entries
            .iter()
            .map(|e| e.declared_size)
            .fold(0, u64::saturating_add);
        if total > self.limits.max_total_bytes {
            let saved = std::mem::replace(
                &mut self.sizes,
                entries
                    .iter()
                    .map(|e| SizedPath {
                        path: e.path.clone(),
                        size: e.declared_size,
                    })
                    .collect(),
            );
            self.total = total;
            let err = self.too_large(None);
            self.sizes = saved;
            self.total = 0;
            return Err(err);
        }
        Ok(())
    }

    /// Copy one entry from `reader` into `sink`, enforcing total size and
    /// compression ratio on the bytes actually produced. Returns the size.
    pub fn stream(
        &mut self,
        path: &str,
        compressed: Option<u64>,
        reader: &mut dyn Read,
        buf: &mut [u8],
        sink: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<u64, StreamError> {
        let mut size: u64 = 0;
        loop {
            let n = match reader.read(buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(StreamError::Read(e)),
            };
            size += n as u64;
            self.total += n as u64;
            if self.total > self.limits.max_total_bytes {
                return Err(StreamError::Capsule(self.too_large(Some(SizedPath {
                    path: path.to_owned(),
                    size,
                }))));
            }
            if let Some(c) = compressed
                && size > self.limits.ratio_floor_bytes
                && size / c.max(1) >= self.limits.max_compression_ratio
            {
                return Err(StreamError::Capsule(CapsuleError::CompressionRatio {
                    path: path.to_owned(),
                    limit: self.limits.max_compression_ratio,
                }));
            }
            sink(&buf[..n]).map_err(StreamError::Write)?;
        }
        self.sizes.push(SizedPath {
            path: path.to_owned(),
            size,
        });
        Ok(size)
    }
}

/// Failure while streaming one entry.
#[derive(Debug)]
pub(crate) enum StreamError {
    Capsule(CapsuleError),
    Read(io::Error),
    Write(io::Error),
}

fn invalid(e: impl std::fmt::Display) -> CapsuleError {
    CapsuleError::InvalidArchive(e.to_string())
}

/// Enumerate and validate `source`; tar files are staged under `staging_parent`.
pub(crate) fn prepare(
    source: &CodeSource,
    limits: &CapsuleLimits,
    staging_parent: &Path,
    budget: &mut Budget<'_>,
) -> Result<Prepared, CapsuleError> {
    let source = match source {
        CodeSource::Archive(p) => sniff(p)?,
        other => other.clone(),
    };
    let (entries, zip, staging, strip) = match &source {
        CodeSource::Dir(root) => (walk_dir(root, limits)?, None, None, false),
        CodeSource::Listed { root, files } => (list_files(root, files, limits)?, None, None, false),
        CodeSource::Capsule(p) => {
            let (entries, archive) = list_zip(p, limits)?;
            (capsule_code(entries)?, Some(archive), None, false)
        }
        CodeSource::Zip(p) => {
            let (entries, archive) = list_zip(p, limits)?;
            (entries, Some(archive), None, true)
        }
        CodeSource::TarGz(p) => {
            let (entries, dir) = stage_tar(p, limits, staging_parent, budget)?;
            (entries, None, Some(dir), true)
        }
        CodeSource::Archive(_) => unreachable!("sniffed above"),
    };
    let entries = finalize(entries, strip, limits)?;
    if zip.is_some() || matches!(source, CodeSource::Dir(_) | CodeSource::Listed { .. }) {
        budget.check_declared(&entries)?;
    } else {
        // Tar files were counted while staging; streaming them again counts anew.
        budget.total = 0;
        budget.sizes.clear();
    }
    Ok(Prepared {
        entries,
        zip,
        _staging: staging,
    })
}

fn sniff(path: &Path) -> Result<CodeSource, CapsuleError> {
    let mut magic = [0u8; 4];
    let mut f = File::open(path).map_err(|e| CapsuleError::io(path, e))?;
    let n = f.read(&mut magic).map_err(|e| CapsuleError::io(path, e))?;
    match &magic[..n] {
        [b'P', b'K', 3, 4] | [b'P', b'K', 5, 6] => Ok(CodeSource::Zip(path.to_owned())),
        [0x1f, 0x8b, ..] => Ok(CodeSource::TarGz(path.to_owned())),
        _ => Err(CapsuleError::InvalidArchive(
            "not a .zip or .tar.gz file".into(),
        )),
    }
}

/// Strip a single top-level folder (Ray semantics), then check reserved
/// paths, duplicates, file/dir conflicts and the file count; sort bytewise.
fn finalize(
    mut entries: Vec<Entry>,
    strip: bool,
    limits: &CapsuleLimits,
) -> Result<Vec<Entry>, CapsuleError> {
    entries.retain(|e| e.path != "__MACOSX" && !e.path.starts_with("__MACOSX/"));
    if entries.is_empty() {
        return Err(CapsuleError::Empty);
    }
    if strip {
        let first = entries[0]
            .path
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let single = entries.iter().all(|e| {
            e.path.len() > first.len()
                && e.path.starts_with(&first)
                && e.path.as_bytes()[first.len()] == b'/'
        });
        if single {
            for e in &mut entries {
                e.path = e.path[first.len() + 1..].to_owned();
            }
        }
    }
    if entries.len() as u64 > limits.max_files {
        return Err(CapsuleError::TooManyFiles {
            limit: limits.max_files,
        });
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let mut dirs: HashSet<&str> = HashSet::new();
    for w in entries.windows(2) {
        if w[0].path == w[1].path {
            return Err(CapsuleError::DuplicatePath {
                path: w[0].path.clone(),
            });
        }
    }
    for e in &entries {
        if e.path == FORGE_DIR || e.path.starts_with(".forge/") {
            return Err(CapsuleError::ReservedPath {
                path: e.path.clone(),
            });
        }
        let mut idx = 0;
        while let Some(pos) = e.path[idx..].find('/') {
            dirs.insert(&e.path[..idx + pos]);
            idx += pos + 1;
        }
    }
    if let Some(e) = entries.iter().find(|e| dirs.contains(e.path.as_str())) {
        return Err(CapsuleError::PathConflict {
            path: e.path.clone(),
        });
    }
    Ok(entries)
}

fn walk_dir(root: &Path, limits: &CapsuleLimits) -> Result<Vec<Entry>, CapsuleError> {
    use std::os::unix::ffi::OsStrExt;
    let mut entries = Vec::new();
    for item in walkdir::WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
    {
        let item = item.map_err(|e| {
            let p = e
                .path()
                .map(Path::to_owned)
                .unwrap_or_else(|| root.to_owned());
            CapsuleError::io(p, e.into())
        })?;
        let rel = item
            .path()
            .strip_prefix(root)
            .expect("walkdir yields paths under its root");
        let Some(path) = normalize(rel.as_os_str().as_bytes(), limits.max_path_bytes)? else {
            continue; // the root itself
        };
        let md = item
            .metadata()
            .map_err(|e| CapsuleError::io(item.path(), e.into()))?;
        if let Some(entry) = fs_entry(item.path(), path, &md)? {
            entries.push(entry);
        }
        if entries.len() as u64 > limits.max_files {
            return Err(CapsuleError::TooManyFiles {
                limit: limits.max_files,
            });
        }
    }
    Ok(entries)
}

/// The files of a [`CodeSource::Listed`]: each checked like a walked file (links,
/// special files and unsafe paths refused; directories skipped).
fn list_files(
    root: &Path,
    files: &[PathBuf],
    limits: &CapsuleLimits,
) -> Result<Vec<Entry>, CapsuleError> {
    use std::os::unix::ffi::OsStrExt;
    if files.len() as u64 > limits.max_files {
        return Err(CapsuleError::TooManyFiles {
            limit: limits.max_files,
        });
    }
    let mut entries = Vec::with_capacity(files.len());
    for rel in files {
        let Some(path) = normalize(rel.as_os_str().as_bytes(), limits.max_path_bytes)? else {
            continue;
        };
        let full = root.join(rel);
        let md = std::fs::symlink_metadata(&full).map_err(|e| CapsuleError::io(&full, e))?;
        if let Some(entry) = fs_entry(&full, path, &md)? {
            entries.push(entry);
        }
    }
    Ok(entries)
}

/// One file system entry as capsule input: `None` for a directory, an error for a
/// link or a special file.
fn fs_entry(
    full: &Path,
    path: String,
    md: &std::fs::Metadata,
) -> Result<Option<Entry>, CapsuleError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let ft = md.file_type();
    if ft.is_dir() {
        return Ok(None);
    }
    if ft.is_symlink() {
        let target = std::fs::read_link(full).map_err(|e| CapsuleError::io(full, e))?;
        let target = target.to_string_lossy().into_owned();
        return Err(link_error(&path, &target));
    }
    if !ft.is_file() {
        let kind = if ft.is_fifo() {
            "fifo"
        } else if ft.is_socket() {
            "socket"
        } else if ft.is_block_device() {
            "block device"
        } else {
            "character device"
        };
        return Err(CapsuleError::SpecialFile { path, kind });
    }
    Ok(Some(Entry {
        path,
        declared_size: md.len(),
        executable: md.permissions().mode() & 0o111 != 0,
        origin: Origin::Fs(full.to_owned()),
        compressed_size: None,
    }))
}

/// A capsule's code entries: everything under the top folder, without Forge's own
/// files. Anything outside the top folder means it is not a capsule.
fn capsule_code(entries: Vec<Entry>) -> Result<Vec<Entry>, CapsuleError> {
    let prefix = format!("{TOP_DIR}/");
    let mut code = Vec::with_capacity(entries.len());
    for mut e in entries {
        let Some(rel) = e.path.strip_prefix(&prefix) else {
            return Err(CapsuleError::InvalidArchive(format!(
                "not a capsule: {:?} is outside {prefix}",
                e.path
            )));
        };
        if rel == FORGE_DIR || rel.starts_with(".forge/") {
            continue;
        }
        e.path = rel.to_owned();
        code.push(e);
    }
    Ok(code)
}

fn link_error(path: &str, target: &str) -> CapsuleError {
    match resolve_link(path, target) {
        None => CapsuleError::SymlinkEscape {
            path: path.to_owned(),
            target: target.to_owned(),
        },
        Some(_) => CapsuleError::LinkUnsupported {
            path: path.to_owned(),
            target: target.to_owned(),
        },
    }
}

fn list_zip(
    path: &Path,
    limits: &CapsuleLimits,
) -> Result<(Vec<Entry>, zip::ZipArchive<File>), CapsuleError> {
    let mut file = File::open(path).map_err(|e| CapsuleError::io(path, e))?;
    let max_entries = limits.max_files.saturating_mul(2).saturating_add(16);
    check_declared_directory(&mut file, path, limits, max_entries)?;
    let mut archive = zip::ZipArchive::new(file).map_err(invalid)?;
    if archive.len() as u64 > max_entries {
        return Err(CapsuleError::TooManyFiles {
            limit: limits.max_files,
        });
    }
    let mut entries = Vec::new();
    for i in 0..archive.len() {
        if let Some(entry) = zip_entry(&mut archive, i, limits)? {
            entries.push(entry);
        }
    }
    Ok((entries, archive))
}

/// What the end record declares (entries, directory bytes), checked before the zip
/// crate reads (and allocates for) every central-directory entry.
fn check_declared_directory(
    file: &mut File,
    path: &Path,
    limits: &CapsuleLimits,
    max_entries: u64,
) -> Result<(), CapsuleError> {
    match zip_directory::declared(file) {
        Ok(Some(d)) if d.entries > max_entries => Err(CapsuleError::TooManyFiles {
            limit: limits.max_files,
        }),
        Ok(Some(d))
            if d.directory_bytes
                > d.entries
                    .max(1)
                    .saturating_mul(limits.max_zip_directory_bytes_per_entry) =>
        {
            Err(CapsuleError::InvalidArchive(format!(
                "the central directory declares {} bytes for {} entries (at most {} per entry)",
                d.directory_bytes, d.entries, limits.max_zip_directory_bytes_per_entry
            )))
        }
        Ok(_) => Ok(()),
        Err(zip_directory::DirectoryError::Io(e)) => Err(CapsuleError::io(path, e)),
        Err(e) => Err(invalid(e)),
    }
}

/// Zip entry `i` as a capsule entry: `None` for a directory (or a name that normalizes
/// away), an error for what a capsule refuses (encrypted, links, special files).
fn zip_entry(
    archive: &mut zip::ZipArchive<File>,
    i: usize,
    limits: &CapsuleLimits,
) -> Result<Option<Entry>, CapsuleError> {
    let (raw_name, mode, is_dir, size, compressed, encrypted) = {
        let f = archive.by_index_raw(i).map_err(invalid)?;
        (
            f.name_raw().to_vec(),
            f.unix_mode(),
            f.is_dir(),
            f.size(),
            f.compressed_size(),
            f.encrypted(),
        )
    };
    let Some(name) = normalize(&raw_name, limits.max_path_bytes)? else {
        return Ok(None);
    };
    let kind = mode.map(|m| m & S_IFMT);
    if is_dir || kind == Some(S_IFDIR) {
        return Ok(None);
    }
    if encrypted {
        return Err(CapsuleError::InvalidArchive(format!(
            "entry {name:?} is encrypted"
        )));
    }
    match kind {
        Some(S_IFLNK) => {
            let mut target = String::new();
            let f = archive.by_index(i).map_err(invalid)?;
            f.take(4096).read_to_string(&mut target).map_err(invalid)?;
            return Err(link_error(&name, &target));
        }
        None | Some(0) | Some(S_IFREG) => {}
        Some(other) => {
            return Err(CapsuleError::SpecialFile {
                path: name,
                kind: special_kind(other),
            });
        }
    }
    Ok(Some(Entry {
        path: name,
        declared_size: size,
        executable: mode.is_some_and(|m| m & 0o111 != 0),
        origin: Origin::ZipIndex(i),
        compressed_size: Some(compressed),
    }))
}

fn special_kind(fmt: u32) -> &'static str {
    match fmt {
        0o010_000 => "fifo",
        0o020_000 => "character device",
        0o060_000 => "block device",
        0o140_000 => "socket",
        _ => "unknown file type",
    }
}

/// Counts compressed bytes pulled from the .tar.gz file (for the ratio check).
struct CountingReader<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// Ratio guard over the whole gzip stream (tar has no per-entry compression).
struct RatioGuard<'a, R> {
    inner: R,
    compressed: Rc<Cell<u64>>,
    produced: Rc<Cell<u64>>,
    limits: &'a CapsuleLimits,
}

impl<R: Read> Read for RatioGuard<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let produced = self.produced.get() + n as u64;
        self.produced.set(produced);
        if produced > self.limits.ratio_floor_bytes
            && produced / self.compressed.get().max(1) >= self.limits.max_compression_ratio
        {
            return Err(io::Error::other(RatioExceeded));
        }
        Ok(n)
    }
}

#[derive(Debug)]
struct RatioExceeded;
impl std::fmt::Display for RatioExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("compression ratio exceeded")
    }
}
impl std::error::Error for RatioExceeded {}

/// The error of an over-large tar extension entry, if `e` is one (else `e` back).
fn header_error(e: io::Error, limits: &CapsuleLimits) -> Result<CapsuleError, io::Error> {
    match e
        .get_ref()
        .and_then(|i| i.downcast_ref::<ExtensionTooLarge>())
    {
        Some(x) => Ok(CapsuleError::HeaderTooLarge {
            what: x.what,
            size: x.size,
            limit: limits.max_tar_extension_bytes,
        }),
        None => Err(e),
    }
}

/// Unpacks a `.tar.gz` into a staging directory, entry by entry within the budget:
/// its entries, staged under numbered names.
fn stage_tar(
    path: &Path,
    limits: &CapsuleLimits,
    staging_parent: &Path,
    budget: &mut Budget<'_>,
) -> Result<(Vec<Entry>, tempfile::TempDir), CapsuleError> {
    let mut archive = open_tar(path, limits)?;
    let staging = tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(staging_parent)
        .map_err(|e| CapsuleError::io(staging_parent, e))?;
    let mut seen: HashSet<String> = HashSet::new();
    let mut entries = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let iter = archive.entries().map_err(invalid)?;
    for (n, item) in iter.enumerate() {
        let mut item = match item {
            Ok(i) => i,
            Err(e) if is_ratio_error(&e) => {
                return Err(CapsuleError::CompressionRatio {
                    path: path.display().to_string(),
                    limit: limits.max_compression_ratio,
                });
            }
            Err(e) => return Err(header_error(e, limits).unwrap_or_else(invalid)),
        };
        if n as u64 > limits.max_files.saturating_mul(2).saturating_add(16) {
            return Err(CapsuleError::TooManyFiles {
                limit: limits.max_files,
            });
        }
        let raw = item.path_bytes().into_owned();
        let Some(name) = normalize(&raw, limits.max_path_bytes)? else {
            continue;
        };
        if !is_tar_file(&item, &name, limits)? {
            continue;
        }
        if !seen.insert(name.clone()) {
            return Err(CapsuleError::DuplicatePath { path: name });
        }
        if seen.len() as u64 > limits.max_files {
            return Err(CapsuleError::TooManyFiles {
                limit: limits.max_files,
            });
        }
        let executable = item
            .header()
            .mode()
            .map(|m| m & 0o111 != 0)
            .unwrap_or(false);
        // Staged under a numbered name: no directory structure is created from
        // untrusted names, so file/dir conflicts cannot fail half-way.
        let staged = staging.path().join(format!("{:08}", entries.len()));
        let size = stage_tar_entry(&mut item, &name, &staged, budget, &mut buf, limits)?;
        entries.push(Entry {
            path: name,
            declared_size: size,
            executable,
            origin: Origin::Fs(staged),
            compressed_size: None,
        });
    }
    Ok((entries, staging))
}

/// The archive at `path`, read through the guards: compressed bytes counted, the
/// decompression ratio bounded, tar extension headers bounded.
fn open_tar<'a>(
    path: &Path,
    limits: &'a CapsuleLimits,
) -> Result<tar::Archive<impl Read + 'a>, CapsuleError> {
    let file = File::open(path).map_err(|e| CapsuleError::io(path, e))?;
    let compressed = Rc::new(Cell::new(0u64));
    let counting = CountingReader {
        inner: io::BufReader::with_capacity(1 << 16, file),
        count: compressed.clone(),
    };
    let guard = RatioGuard {
        inner: flate2::read::MultiGzDecoder::new(counting),
        compressed,
        produced: Rc::new(Cell::new(0u64)),
        limits,
    };
    Ok(tar::Archive::new(TarGuard::new(
        guard,
        limits.max_tar_extension_bytes,
    )))
}

fn is_ratio_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<RatioExceeded>())
}

/// Whether tar entry `name` is a file to keep (`false`: a directory or a header entry
/// to skip); an error for what a capsule refuses (links, devices, sparse files).
fn is_tar_file<R: Read>(
    item: &tar::Entry<'_, R>,
    name: &str,
    limits: &CapsuleLimits,
) -> Result<bool, CapsuleError> {
    use tar::EntryType as T;
    let ty = item.header().entry_type();
    let special = |kind: &'static str| CapsuleError::SpecialFile {
        path: name.to_owned(),
        kind,
    };
    match ty {
        T::Regular | T::Continuous => Ok(true),
        T::Directory | T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => Ok(false),
        T::Symlink | T::Link => {
            let target = item
                .link_name_bytes()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            if ty == T::Link {
                // Hard links name a path from the archive root.
                return Err(match normalize(target.as_bytes(), limits.max_path_bytes) {
                    Ok(Some(_)) => CapsuleError::LinkUnsupported {
                        path: name.to_owned(),
                        target,
                    },
                    _ => CapsuleError::SymlinkEscape {
                        path: name.to_owned(),
                        target,
                    },
                });
            }
            Err(link_error(name, &target))
        }
        T::Char => Err(special("character device")),
        T::Block => Err(special("block device")),
        T::Fifo => Err(special("fifo")),
        T::GNUSparse => Err(special("sparse file")),
        _ => Err(special("unknown tar entry type")),
    }
}

/// Streams tar entry `name` to `staged` within the budget; its size.
fn stage_tar_entry<R: Read>(
    item: &mut tar::Entry<'_, R>,
    name: &str,
    staged: &Path,
    budget: &mut Budget<'_>,
    buf: &mut [u8],
    limits: &CapsuleLimits,
) -> Result<u64, CapsuleError> {
    let mut out = io::BufWriter::with_capacity(
        1 << 20,
        File::create(staged).map_err(|e| CapsuleError::io(staged, e))?,
    );
    let mut sink = |b: &[u8]| io::Write::write_all(&mut out, b);
    let size = match budget.stream(name, None, item, buf, &mut sink) {
        Ok(s) => s,
        Err(StreamError::Capsule(e)) => return Err(e),
        Err(StreamError::Read(e)) if is_ratio_error(&e) => {
            return Err(CapsuleError::CompressionRatio {
                path: name.to_owned(),
                limit: limits.max_compression_ratio,
            });
        }
        Err(StreamError::Read(e)) => return Err(header_error(e, limits).unwrap_or_else(invalid)),
        Err(StreamError::Write(e)) => return Err(CapsuleError::io(staged, e)),
    };
    io::Write::flush(&mut out).map_err(|e| CapsuleError::io(staged, e))?;
    Ok(size)
}
