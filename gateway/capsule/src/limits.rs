//! Limits applied to untrusted code archives while a capsule is assembled.
//!
//! Every limit is enforced on the bytes actually decoded, while streaming —
//! sizes declared in archive headers are only used for early rejection and for
//! error messages, never trusted to be small.

use serde::{Deserialize, Serialize};

/// Configurable bounds for [`crate::assemble`]. `Default` gives sensible values
/// for training code (10 GiB, 100 000 files, compression ratio 200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CapsuleLimits {
    /// Maximum total uncompressed bytes of user code.
    pub max_total_bytes: u64,
    /// Maximum number of regular files in the user code.
    pub max_files: u64,
    /// Maximum uncompressed/compressed ratio of one zip entry (or of a whole
    /// `.tar.gz` stream) once it has produced `ratio_floor_bytes`.
    pub max_compression_ratio: u64,
    /// Entries smaller than this are never rejected for their ratio (a 10 KiB
    /// file of spaces legitimately compresses 500×).
    pub ratio_floor_bytes: u64,
    /// Maximum length of one normalized path, in bytes.
    pub max_path_bytes: usize,
    /// How many of the largest files a "too large" error lists.
    pub largest_listed: usize,
    /// Largest tar GNU long-name / long-link or PAX extension entry, checked before
    /// the `tar` crate reads one into memory.
    pub max_tar_extension_bytes: u64,
    /// Most bytes a zip's central directory may declare per declared entry (46 fixed
    /// bytes, the name, extra fields and comment), checked before the `zip` crate
    /// reads the directory; the entry count is checked against `max_files` then too.
    pub max_zip_directory_bytes_per_entry: u64,
}

impl Default for CapsuleLimits {
    fn default() -> Self {
        Self {
            max_total_bytes: 10 * 1024 * 1024 * 1024,
            max_files: 100_000,
            max_compression_ratio: 200,
            ratio_floor_bytes: 1024 * 1024,
            max_path_bytes: 1024,
            largest_listed: 5,
            max_tar_extension_bytes: 64 * 1024,
            max_zip_directory_bytes_per_entry: 46 + 1024 + 4096,
        }
    }
}
