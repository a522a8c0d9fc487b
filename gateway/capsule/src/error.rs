//! Errors of capsule assembly. Each variant has a stable machine `code()`, the
//! offending request `field()` and a [`CapsuleErrorKind`] callers branch on (the
//! uploader's fault, over the size limit, or a server-side failure). No HTTP here:
//! the gateway's HTTP edge maps kinds to statuses.

use std::path::PathBuf;

/// A file and its size, as listed by [`CapsuleError::TooLarge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizedPath {
    /// Normalized path inside the user's code.
    pub path: String,
    /// Bytes (as far as they were read when the limit tripped).
    pub size: u64,
}

/// Why a capsule could not be assembled. Nothing is stored when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum CapsuleError {
    /// `../`, an absolute path, a drive letter, a backslash, NUL/control bytes…
    #[error("unsafe path {path:?} in code archive: {reason}")]
    UnsafePath { path: String, reason: &'static str },
    /// A symbolic link whose target leaves the code tree.
    #[error("symlink {path:?} -> {target:?} leaves the code tree")]
    SymlinkEscape { path: String, target: String },
    /// A symbolic or hard link that stays inside the tree (refused: Ray's
    /// unpacker would turn it into a text file holding the target path).
    #[error("link {path:?} -> {target:?} is not supported; copy the file instead")]
    LinkUnsupported { path: String, target: String },
    /// A device node, FIFO, socket or other non-regular file.
    #[error("special file {path:?} ({kind}) is not allowed")]
    SpecialFile { path: String, kind: &'static str },
    /// An entry decompresses beyond the allowed ratio (zip bomb).
    #[error("entry {path:?} expands more than {limit}x (zip bomb?)")]
    CompressionRatio { path: String, limit: u64 },
    /// Total uncompressed size over the limit; lists the largest files.
    #[error("code is larger than {limit} bytes (at least {total} bytes); largest files: {}", fmt_largest(.largest))]
    TooLarge {
        limit: u64,
        total: u64,
        largest: Vec<SizedPath>,
    },
    /// More files than allowed.
    #[error("code has more than {limit} files")]
    TooManyFiles { limit: u64 },
    /// Two entries normalize to the same path.
    #[error("duplicate path {path:?} in code archive")]
    DuplicatePath { path: String },
    /// A path is both a file and a directory (`a` and `a/b`).
    #[error("path {path:?} is both a file and a directory")]
    PathConflict { path: String },
    /// The user's code uses the reserved `.forge/` directory.
    #[error("path {path:?} is reserved for Forge")]
    ReservedPath { path: String },
    /// A tar extension entry (GNU long name/link, PAX header) over the limit.
    #[error("{what} of {size} bytes in code archive; at most {limit}")]
    HeaderTooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    /// Not a readable zip / tar.gz, encrypted, or unsupported entry type.
    #[error("invalid code archive: {0}")]
    InvalidArchive(String),
    /// The code contains no files at all.
    #[error("code archive contains no files")]
    Empty,
    /// The code's `requirements.txt` cannot become Ray's runtime env `pip` list
    /// (`line` is 1-based; 0 for the file as a whole).
    #[error("requirements.txt line {line}: {reason}")]
    Requirements { line: usize, reason: String },
    /// `pyproject.toml` or `uv.lock` cannot become a runtime env.
    #[error("{file} {reason}")]
    PythonProject { file: &'static str, reason: String },
    /// Server-side I/O failure (disk full, permissions): not the user's fault.
    #[error("i/o error at {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The kinds of [`CapsuleError`], for callers that branch on who is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapsuleErrorKind {
    /// The uploaded code is unacceptable (hostile, malformed, empty, too many files,
    /// a zip bomb): the uploader must change it.
    Rejected,
    /// The uploaded code is over the total size limit ([`CapsuleError::TooLarge`]).
    TooLarge,
    /// A server-side failure (I/O): not the uploader's fault.
    Internal,
}

fn fmt_largest(largest: &[SizedPath]) -> String {
    largest
        .iter()
        .map(|s| format!("{} ({} bytes)", s.path, s.size))
        .collect::<Vec<_>>()
        .join(", ")
}

impl CapsuleError {
    /// Stable machine-readable code for API error bodies.
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnsafePath { .. } => "capsule.unsafe_path",
            Self::SymlinkEscape { .. } => "capsule.symlink_escape",
            Self::LinkUnsupported { .. } => "capsule.link_unsupported",
            Self::SpecialFile { .. } => "capsule.special_file",
            Self::CompressionRatio { .. } => "capsule.compression_ratio",
            Self::TooLarge { .. } => "capsule.too_large",
            Self::TooManyFiles { .. } => "capsule.too_many_files",
            Self::DuplicatePath { .. } => "capsule.duplicate_path",
            Self::PathConflict { .. } => "capsule.path_conflict",
            Self::ReservedPath { .. } => "capsule.reserved_path",
            Self::HeaderTooLarge { .. } => "capsule.header_too_large",
            Self::InvalidArchive(_) => "capsule.invalid_archive",
            Self::Empty => "capsule.empty",
            Self::Requirements { .. } => "capsule.requirements",
            Self::PythonProject { .. } => "capsule.python_project",
            Self::Io { .. } => "capsule.io",
        }
    }

    /// The request field the error refers to (`code` for the upload).
    pub fn field(&self) -> &'static str {
        match self {
            Self::Io { .. } => "",
            _ => "code",
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> CapsuleErrorKind {
        match self {
            Self::TooLarge { .. } => CapsuleErrorKind::TooLarge,
            Self::Io { .. } => CapsuleErrorKind::Internal,
            Self::UnsafePath { .. }
            | Self::SymlinkEscape { .. }
            | Self::LinkUnsupported { .. }
            | Self::SpecialFile { .. }
            | Self::CompressionRatio { .. }
            | Self::TooManyFiles { .. }
            | Self::DuplicatePath { .. }
            | Self::PathConflict { .. }
            | Self::ReservedPath { .. }
            | Self::HeaderTooLarge { .. }
            | Self::InvalidArchive(_)
            | Self::Empty
            | Self::Requirements { .. }
            | Self::PythonProject { .. } => CapsuleErrorKind::Rejected,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
