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
use crate::source::{Budget, CodeSource, Entry, Origin, StreamError, prepare};
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
/// (a client's progress bar); the output is the same. The steps: check and order the
/// input ([`prepare`]), stream every code entry into a temporary zip while its tail
/// is hashed, add the `.forge/` files (JobSpec, runner, manifest), then name the zip
/// by its digest.
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
    let mut packer = Packer::start(out_dir)?;
    let mut files = Vec::with_capacity(prepared.entries.len());
    let mut code_bytes = 0u64;
    for entry in &prepared.entries {
        let file = packer.code_entry(entry, prepared.zip.as_mut(), &mut budget, packed)?;
        code_bytes += file.size;
        files.push(file);
    }
    let jobspec = packer.forge_file(JOBSPEC_NAME, &mut &jobspec[..], false)?;
    let runner = runner.map(|p| packer.runner(p)).transpose()?;
    let manifest = Manifest {
        format_version: FORMAT_VERSION,
        packer: format!("forge-capsule {}", env!("CARGO_PKG_VERSION")),
        jobspec,
        runner,
        code_bytes,
        files,
    };
    let manifest_bytes = serde_json::to_vec_pretty(&manifest).expect("manifest serializes");
    packer.forge_file(MANIFEST_NAME, &mut &manifest_bytes[..], false)?;
    let (digest, path, size) = packer.finish(out_dir)?;
    Ok(Capsule {
        digest,
        path,
        size,
        manifest,
    })
}

/// The zip being written: a temporary file in the output directory (removed unless
/// [`Packer::finish`] names it), its writer, and the hasher reading its settled tail.
struct Packer {
    tmp: tempfile::NamedTempFile,
    tmp_path: PathBuf,
    zip: ZipWriter<PosWriter<BufWriter<File>>>,
    /// Where the writer is: what precedes an entry's start is settled (hashable).
    pos: Arc<AtomicU64>,
    hasher: TailHasher,
    buf: Vec<u8>,
}

impl Packer {
    fn start(out_dir: &Path) -> Result<Self, CapsuleError> {
        let tmp = tempfile::Builder::new()
            .prefix(".capsule-")
            .suffix(".zip.part")
            .tempfile_in(out_dir)
            .map_err(|e| CapsuleError::io(out_dir, e))?;
        let tmp_path = tmp.path().to_owned();
        let wio = |e: io::Error| CapsuleError::io(&tmp_path, e);
        let hasher = TailHasher::start(&tmp_path).map_err(wio)?;
        let pos = Arc::new(AtomicU64::new(0));
        let file = tmp.as_file().try_clone().map_err(wio)?;
        let zip = ZipWriter::new(PosWriter {
            inner: BufWriter::with_capacity(CHUNK, file),
            pos: pos.clone(),
        });
        Ok(Packer {
            tmp,
            tmp_path,
            zip,
            pos,
            hasher,
            buf: vec![0u8; CHUNK],
        })
    }

    fn write_err(&self, e: io::Error) -> CapsuleError {
        CapsuleError::io(&self.tmp_path, e)
    }

    fn zip_err(&self, e: zip::result::ZipError) -> CapsuleError {
        CapsuleError::io(&self.tmp_path, io::Error::other(e))
    }

    /// Starts entry `name`; what the previous one wrote is settled for the hasher.
    fn start_file(&mut self, name: String, options: SimpleFileOptions) -> Result<(), CapsuleError> {
        let settled = self.pos.load(Ordering::Relaxed);
        self.zip
            .start_file(name, options)
            .map_err(|e| self.zip_err(e))?;
        // start_file finished (patched + flushed) the previous entry.
        self.hasher.settled(settled);
        Ok(())
    }

    /// One entry of the user's code, streamed within the budget; its manifest line.
    fn code_entry(
        &mut self,
        entry: &Entry,
        archive: Option<&mut zip::ZipArchive<File>>,
        budget: &mut Budget<'_>,
        packed: &dyn Fn(u64),
    ) -> Result<ManifestFile, CapsuleError> {
        let method = compression_for(&entry.path, entry.declared_size);
        self.start_file(
            format!("{TOP_DIR}/{}", entry.path),
            options(method, entry.executable, entry.declared_size),
        )?;
        let mut digest = blake3::Hasher::new();
        let (zip, buf, tmp_path) = (&mut self.zip, &mut self.buf, &self.tmp_path);
        let mut sink = |b: &[u8]| {
            digest.update(b);
            packed(b.len() as u64);
            zip.write_all(b)
        };
        let size = match &entry.origin {
            Origin::Fs(p) => {
                let mut f = File::open(p).map_err(|e| CapsuleError::io(p, e))?;
                budget
                    .stream(&entry.path, None, &mut f, buf, &mut sink)
                    .map_err(|e| match e {
                        StreamError::Read(e) => CapsuleError::io(p, e),
                        other => stream_err(other, tmp_path),
                    })
            }
            Origin::ZipIndex(i) => {
                let archive = archive.expect("zip entries come with their archive");
                let mut f = archive
                    .by_index(*i)
                    .map_err(|e| CapsuleError::InvalidArchive(e.to_string()))?;
                budget
                    .stream(&entry.path, entry.compressed_size, &mut f, buf, &mut sink)
                    .map_err(|e| match e {
                        StreamError::Read(e) => {
                            CapsuleError::InvalidArchive(format!("{}: {e}", entry.path))
                        }
                        other => stream_err(other, tmp_path),
                    })
            }
        }?;
        Ok(ManifestFile {
            path: entry.path.clone(),
            size,
            blake3: digest.finalize().to_hex().to_string(),
            executable: entry.executable,
        })
    }

    /// `.forge/<name>` from `bytes`, with its SHA-256.
    fn forge_file(
        &mut self,
        name: &str,
        bytes: &mut dyn Read,
        executable: bool,
    ) -> Result<ForgeFile, CapsuleError> {
        self.start_file(
            format!("{TOP_DIR}/.forge/{name}"),
            options(CompressionMethod::Deflated, executable, 0),
        )?;
        let mut sha = Sha256::new();
        let mut size = 0u64;
        loop {
            let n = bytes.read(&mut self.buf).map_err(|e| self.write_err(e))?;
            if n == 0 {
                break;
            }
            sha.update(&self.buf[..n]);
            self.zip
                .write_all(&self.buf[..n])
                .map_err(|e| self.write_err(e))?;
            size += n as u64;
        }
        Ok(ForgeFile {
            path: format!(".forge/{name}"),
            size,
            sha256: hex::encode(sha.finalize()),
        })
    }

    /// The runner artifact at `path` as `.forge/<its file name>` (executable).
    fn runner(&mut self, path: &Path) -> Result<RunnerInfo, CapsuleError> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| *n != JOBSPEC_NAME && *n != MANIFEST_NAME)
            .ok_or_else(|| {
                CapsuleError::io(
                    path,
                    io::Error::other("runner artifact needs a plain UTF-8 file name"),
                )
            })?
            .to_owned();
        let mut f = File::open(path).map_err(|e| CapsuleError::io(path, e))?;
        let file = self.forge_file(&name, &mut f, true)?;
        let version = format!("sha256:{}", file.sha256);
        Ok(RunnerInfo { file, version })
    }

    /// Finishes the zip and names it `<sha256>.zip` in `out_dir`: its digest, path and
    /// size.
    fn finish(self, out_dir: &Path) -> Result<(String, PathBuf, u64), CapsuleError> {
        let Packer {
            tmp,
            tmp_path,
            zip,
            hasher,
            ..
        } = self;
        let wio = |e: io::Error| CapsuleError::io(&tmp_path, e);
        let writer = zip
            .finish()
            .map_err(|e| CapsuleError::io(&tmp_path, io::Error::other(e)))?;
        let file = writer.inner.into_inner().map_err(|e| wio(e.into_error()))?;
        let size = file.metadata().map_err(wio)?.len();
        drop(file);
        let (digest, hashed) = hasher.finish(size).map_err(wio)?;
        debug_assert_eq!(hashed, size);
        let path = out_dir.join(format!("{digest}.zip"));
        tmp.persist(&path)
            .map_err(|e| CapsuleError::io(&path, e.error))?;
        Ok((digest, path, size))
    }
}

fn stream_err(e: StreamError, out: &Path) -> CapsuleError {
    match e {
        StreamError::Capsule(e) => e,
        StreamError::Read(e) | StreamError::Write(e) => CapsuleError::io(out, e),
    }
}
