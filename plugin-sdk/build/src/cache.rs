//! Content-addressed cache of Python and TypeScript components: building one takes
//! 6–12 s (the interpreter is initialized and snapshotted), so a build whose inputs —
//! the plugin's files, the SDK's sources, the contract and the pinned toolchain — are
//! unchanged copies the cached component instead.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use walkdir::WalkDir;

use crate::error::BuildError;

/// Directories never part of a build's inputs.
const SKIP: &[&str] = &[
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    "target",
    ".git",
];

/// Hashes build inputs: labelled strings and whole directory trees (paths and bytes,
/// in a stable order).
pub(crate) struct InputHash(Sha256);

impl InputHash {
    pub(crate) fn new(kind: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"forge-plugin-build/1\0");
        h.update(kind.as_bytes());
        InputHash(h)
    }

    pub(crate) fn text(&mut self, label: &str, value: &str) -> &mut Self {
        self.0.update(label.as_bytes());
        self.0.update([0]);
        self.0.update(value.as_bytes());
        self.0.update([0]);
        self
    }

    /// Every file under `dir` (or `dir` itself if it is a file), except [`SKIP`].
    pub(crate) fn tree(&mut self, dir: &Path) -> Result<&mut Self, BuildError> {
        let walk = WalkDir::new(dir)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| !SKIP.iter().any(|s| e.file_name() == *s));
        for entry in walk {
            let entry = entry.map_err(|e| BuildError::Io {
                path: dir.display().to_string(),
                source: e.into(),
            })?;
            if !entry.file_type().is_file() {
                continue;
            }
            let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
            let bytes = std::fs::read(entry.path()).map_err(|e| BuildError::io(entry.path(), e))?;
            self.text("file", &rel.to_string_lossy());
            self.0.update((bytes.len() as u64).to_le_bytes());
            self.0.update(&bytes);
        }
        Ok(self)
    }

    pub(crate) fn finish(&mut self) -> String {
        hex::encode(std::mem::take(&mut self.0).finalize())
    }
}

/// Where a component built from inputs `key` is cached.
pub(crate) fn entry(cache_dir: &Path, name: &str, key: &str) -> PathBuf {
    cache_dir.join(format!("{name}-{}.wasm", key.get(..16).unwrap_or(key)))
}
