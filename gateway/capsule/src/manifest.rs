//! `forge-manifest.json`: what a capsule contains, written into
//! `capsule/.forge/` as the last zip entry. Serialized with fixed field order
//! and files sorted by path, so it is deterministic like the rest of the zip.

use serde::{Deserialize, Serialize};

/// Version of the capsule layout and manifest schema.
pub const FORMAT_VERSION: u32 = 1;

/// One file of the user's code, relative to the code root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    pub path: String,
    pub size: u64,
    pub sha256: String,
    pub executable: bool,
}

/// A Forge-provided file under `.forge/` (jobspec, runner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgeFile {
    /// Path relative to the code root, e.g. `.forge/jobspec.json`.
    pub path: String,
    pub size: u64,
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
