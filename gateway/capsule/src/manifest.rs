//! `forge-manifest.json`: what a capsule contains, written into
//! `capsule/.forge/` as the last zip entry. Serialized with fixed field order
//! and files sorted by path, so it is deterministic like the rest of the zip.
//!
//! Integrity comes from the capsule's address, the SHA-256 of the whole zip (the
//! transport digest the init container checks), which covers every byte of every file
//! and of this manifest. The per-file digests say *what* each file is, for tools that
//! compare capsules or look for a file's content; since format 2 they are BLAKE3: the
//! transport SHA-256 already costs one core for the whole capsule, and a second
//! SHA-256 of every file cost about as much again (BLAKE3 is ~2.5x cheaper here).

use serde::{Deserialize, Serialize};

/// Version of the capsule layout and manifest schema.
///
/// - 1: per-file `sha256`, deflate by miniz_oxide.
/// - 2: per-file `blake3` instead of `sha256`; deflate by zlib-rs (other bytes).
pub const FORMAT_VERSION: u32 = 2;

/// One file of the user's code, relative to the code root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub path: String,
    pub size: u64,
    /// Lowercase hex BLAKE3 of the file's bytes.
    pub blake3: String,
    pub executable: bool,
}

/// A Forge-provided file under `.forge/` (jobspec, runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeFile {
    /// Path relative to the code root, e.g. `.forge/jobspec.json`.
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the file's bytes (small files; the runner's version
    /// is named by it).
    pub sha256: String,
}

/// The runner artifact and its version (`sha256:<hex>` of its bytes: the
/// artifact is identified by content, like the capsule itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerInfo {
    #[serde(flatten)]
    pub file: ForgeFile,
    pub version: String,
}

/// The manifest of a capsule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format_version: u32,
    /// Version of the `forge-capsule` library that packed it.
    pub packer: String,
    pub jobspec: ForgeFile,
    pub runner: Option<RunnerInfo>,
    /// Total bytes of user code.
    pub code_bytes: u64,
    pub files: Vec<ManifestFile>,
}
