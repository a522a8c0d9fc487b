//! Deterministic capsule assembly: user code + JobSpec + runner → one `.zip`
//! whose SHA-256 is its address.
//!
//! Layout (Ray strips a single top-level folder when it unpacks a
//! `working_dir` zip, so everything sits under one folder and the user's code
//! root becomes the working directory):
//!
//! ```text
//! capsule/<user files…>                 sorted bytewise by path
//! capsule/.forge/jobspec.json           the authoritative JobSpec bytes
//! capsule/.forge/<runner file name>     optional runner artifact
//! capsule/.forge/forge-manifest.json    always the last entry
//! ```
//!
//! Determinism: entry order as above, every timestamp 1980-01-01 00:00 (the
//! zip epoch), mode 0644 or 0755 (any exec bit in the input → 0755), no extra
//! fields (except ZIP64 for files ≥ 4 GiB), and a compression method chosen
//! from the path and size only (see [`compression_for`]). Input order, mtimes,
//! owners and the input container format do not change the bytes.
//!
//! Memory is bounded: files are streamed in 1 MiB chunks; the capsule's
//! SHA-256 is computed on another thread from the settled prefix of the output
//! (see `tail_hasher`), while this thread reads, digests (BLAKE3, for the manifest),
//! deflates and writes: every byte goes through SHA-256 once, on its own core. Output
//! goes to a temp file in `out_dir`, renamed to `<sha256>.zip` only on success; on any
//! error nothing is left behind.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, DateTime, ZipWriter};

use crate::error::CapsuleError;
use crate::limits::CapsuleLimits;
use crate::manifest::{FORMAT_VERSION, ForgeFile, Manifest, ManifestFile, RunnerInfo};
use crate::source::{Budget, CodeSource, Origin, StreamError, prepare};
use crate::tail_hasher::TailHasher;

pub use crate::source::TOP_DIR;
/// Name of the manifest inside `capsule/.forge/`.
pub const MANIFEST_NAME: &str = "forge-manifest.json";
/// Name of the JobSpec inside `capsule/.forge/`.
pub const JOBSPEC_NAME: &str = "jobspec.json";

/// Files at least this large are stored uncompressed (throughput; large files
/// in training repos are mostly checkpoints and data that barely compress).
pub const STORE_AT_OR_ABOVE: u64 = 1024 * 1024;

const CHUNK: usize = 1 << 20;

/// zlib level of the deflated (small) files. Measured with zlib-rs on the 2 000 first
/// `.py` files of CPython 3.11's library (21 MB): level 3 packs 124 MB/s to 28.5 % of
/// the size, level 6 82 MB/s to 27.4 %; on the benchmark's repetitive sources 134 vs
/// 63 MB/s, 23.3 vs 20.8 %. About 4 % more bytes on real code for two thirds of the
/// CPU: deflating small files is the packing thread's largest cost after reading.
pub const DEFLATE_LEVEL: i64 = 3;

/// Extensions of already-compressed formats, always stored.
const INCOMPRESSIBLE: &[&str] = &[
    "zip",
    "gz",
    "tgz",
    "bz2",
    "xz",
    "zst",
    "lz4",
    "7z",
    "whl",
    "pex",
    "jar",
    "png",
    "jpg",
    "jpeg",
    "gif",
    "webp",
    "mp3",
    "mp4",
    "parquet",
    "pt",
    "pth",
    "safetensors",
    "npz",
    "h5",
    "onnx",
    "ckpt",
];

/// An assembled capsule on local disk.
#[derive(Debug, Clone)]
pub struct Capsule {
    /// Hex SHA-256 of the zip bytes: the capsule's address.
    pub digest: String,
    /// `<out_dir>/<digest>.zip`.
    pub path: PathBuf,
    /// Size of the zip in bytes.
    pub size: u64,
    pub manifest: Manifest,
}

/// Compression method for a file: `Stored` for large files and known
/// compressed formats, `Deflated` (level [`DEFLATE_LEVEL`]) otherwise. Depends on path
/// and size only, which keeps the output deterministic.
pub fn compression_for(path: &str, size: u64) -> CompressionMethod {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    if size >= STORE_AT_OR_ABOVE
        || size == 0
        || ext.is_some_and(|e| INCOMPRESSIBLE.contains(&e.as_str()))
    {
        CompressionMethod::Stored
    } else {
        CompressionMethod::Deflated
    }
}

fn options(method: CompressionMethod, executable: bool, size: u64) -> SimpleFileOptions {
    SimpleFileOptions::default()
        .compression_method(method)
        .compression_level(if method == CompressionMethod::Deflated {
            Some(DEFLATE_LEVEL)
        } else {
            None
        })
        .last_modified_time(DateTime::default())
        .unix_permissions(if executable { 0o755 } else { 0o644 })
        .large_file(size >= u64::from(u32::MAX))
}

/// Tracks the logical write position above the `BufWriter` (shared with the
/// assembler, which turns it into "settled" offsets for the hasher).
struct PosWriter<W> {
    inner: W,
    pos: Arc<AtomicU64>,
}

impl<W: Write> Write for PosWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.pos.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Seek> Seek for PosWriter<W> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let p = self.inner.seek(to)?;
        self.pos.store(p, Ordering::Relaxed);
        Ok(p)
    }
}

/// Assemble a capsule from `input`, the JobSpec bytes and an optional runner
/// artifact into `out_dir/<sha256>.zip`. Blocking (call it from
/// `spawn_blocking` in async code). On error nothing is written to `out_dir`.
pub fn assemble(
    input: CodeSource,
    jobspec: &[u8],
    runner: Option<&Path>,
    limits: &CapsuleLimits,
    out_dir: &Path,
) -> Result<Capsule, CapsuleError> {
    assemble_observed(input, jobspec, runner, limits, out_dir, &|_| {})
}

/// [`assemble`], telling `packed` how many bytes of user code it has just packed
/// (a client's progress bar); the output is the same.
pub fn assemble_observed(
    input: CodeSource,
    jobspec: &[u8],
    runner: Option<&Path>,
    limits: &CapsuleLimits,
    out_dir: &Path,
    packed: &dyn Fn(u64),
) -> Result<Capsule, CapsuleError> {
    std::fs::create_dir_all(out_dir).map_err(|e| CapsuleError::io(out_dir, e))?;
    let mut budget = Budget::new(limits);
    let mut prepared = prepare(&input, limits, out_dir, &mut budget)?;

    let tmp = tempfile::Builder::new()
        .prefix(".capsule-")
        .suffix(".zip.part")
        .tempfile_in(out_dir)
        .map_err(|e| CapsuleError::io(out_dir, e))?;
    let tmp_path = tmp.path().to_owned();
    let wio = |e: io::Error| CapsuleError::io(&tmp_path, e);
    let zio = |e: zip::result::ZipError| CapsuleError::io(&tmp_path, io::Error::other(e));
    let hasher = TailHasher::start(&tmp_path).map_err(wio)?;
    let pos = Arc::new(AtomicU64::new(0));
    let file = tmp.as_file().try_clone().map_err(wio)?;
    let mut zip = ZipWriter::new(PosWriter {
        inner: BufWriter::with_capacity(CHUNK, file),
        pos: pos.clone(),
    });

    let mut buf = vec![0u8; CHUNK];
    let mut files = Vec::with_capacity(prepared.entries.len());
    let mut code_bytes = 0u64;
    for entry in &prepared.entries {
        let settled = pos.load(Ordering::Relaxed);
        let method = compression_for(&entry.path, entry.declared_size);
        zip.start_file(
            format!("{TOP_DIR}/{}", entry.path),
            options(method, entry.executable, entry.declared_size),
        )
        .map_err(zio)?;
        // start_file finished (patched + flushed) the previous entry.
        hasher.settled(settled);
        let mut digest = blake3::Hasher::new();
        let mut sink = |b: &[u8]| {
            digest.update(b);
            packed(b.len() as u64);
            zip.write_all(b)
        };
        let result = match &entry.origin {
            Origin::Fs(p) => {
                let mut f = File::open(p).map_err(|e| CapsuleError::io(p, e))?;
                budget
                    .stream(&entry.path, None, &mut f, &mut buf, &mut sink)
                    .map_err(|e| match e {
                        StreamError::Read(e) => CapsuleError::io(p, e),
                        other => stream_err(other, &tmp_path),
                    })
            }
            Origin::ZipIndex(i) => {
                let archive = prepared
                    .zip
                    .as_mut()
                    .expect("zip entries come with their archive");
                let mut f = archive
                    .by_index(*i)
                    .map_err(|e| CapsuleError::InvalidArchive(e.to_string()))?;
                budget
                    .stream(
                        &entry.path,
                        entry.compressed_size,
                        &mut f,
                        &mut buf,
                        &mut sink,
                    )
                    .map_err(|e| match e {
                        StreamError::Read(e) => {
                            CapsuleError::InvalidArchive(format!("{}: {e}", entry.path))
                        }
                        other => stream_err(other, &tmp_path),
                    })
            }
        };
        let size = result?;
        code_bytes += size;
        files.push(ManifestFile {
            path: entry.path.clone(),
            size,
            blake3: digest.finalize().to_hex().to_string(),
            executable: entry.executable,
        });
    }

    let mut add_forge = |zip: &mut ZipWriter<_>,
                         name: &str,
                         bytes: &mut dyn Read,
                         executable: bool|
     -> Result<ForgeFile, CapsuleError> {
        let settled = pos.load(Ordering::Relaxed);
        zip.start_file(
            format!("{TOP_DIR}/.forge/{name}"),
            options(CompressionMethod::Deflated, executable, 0),
        )
        .map_err(zio)?;
        hasher.settled(settled);
        let mut sha = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = bytes.read(&mut buf).map_err(wio)?;
            if n == 0 {
                break;
            }
            sha.update(&buf[..n]);
            zip.write_all(&buf[..n]).map_err(wio)?;
            size += n as u64;
        }
        Ok(ForgeFile {
            path: format!(".forge/{name}"),
            size,
            sha256: hex::encode(sha.finalize()),
        })
    };
    let jobspec = add_forge(&mut zip, JOBSPEC_NAME, &mut &jobspec[..], false)?;
    let runner = match runner {
        Some(p) => {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .filter(|n| *n != JOBSPEC_NAME && *n != MANIFEST_NAME)
                .ok_or_else(|| {
                    CapsuleError::io(
                        p,
                        io::Error::other("runner artifact needs a plain UTF-8 file name"),
                    )
                })?
                .to_owned();
            let mut f = File::open(p).map_err(|e| CapsuleError::io(p, e))?;
            let file = add_forge(&mut zip, &name, &mut f, true)?;
            let version = format!("sha256:{}", file.sha256);
            Some(RunnerInfo { file, version })
        }
        None => None,
    };
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        packer: format!("forge-capsule {}", env!("CARGO_PKG_VERSION")),
        jobspec,
        runner,
        code_bytes,
        files,
    };
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
    add_forge(&mut zip, MANIFEST_NAME, &mut &manifest_bytes[..], false)?;

    let writer = zip.finish().map_err(zio)?;
    let file = writer.inner.into_inner().map_err(|e| wio(e.into_error()))?;
    let size = file.metadata().map_err(wio)?.len();
    drop(file);
    let (digest, hashed) = hasher.finish(size).map_err(wio)?;
    debug_assert_eq!(hashed, size);
    let path = out_dir.join(format!("{digest}.zip"));
    tmp.persist(&path)
        .map_err(|e| CapsuleError::io(&path, e.error))?;
    Ok(Capsule {
        digest,
        path,
        size,
        manifest,
    })
}

fn stream_err(e: StreamError, out: &Path) -> CapsuleError {
    match e {
        StreamError::Capsule(e) => e,
        StreamError::Read(e) | StreamError::Write(e) => CapsuleError::io(out, e),
    }
}
