//! Packing a directory the way the gateway does: the files `.forgeignore` and
//! `.gitignore` leave (the `ignore` crate, git's semantics), minus what never belongs
//! in a job's code — version control, virtualenvs, caches — packed by
//! `forge-capsule` (the gateway's own packer) with the spec bytes the gateway would
//! use, so the digest is the one the gateway computes for the same code and spec.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use forge_capsule::{Capsule, CapsuleLimits, CodeSource, assemble_observed};

use crate::exit::CliError;
use crate::output::bytes;
use crate::progress::{Bar, note};

/// Directory names never packed.
pub const EXCLUDED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".ipynb_checkpoints",
    "node_modules",
];
/// File names never packed.
pub const EXCLUDED_FILES: &[&str] = &[".DS_Store"];

/// How many of the largest files the summary lists.
const LARGEST: usize = 5;

/// The files of a code tree to pack.
#[derive(Debug)]
pub struct Tree {
    pub root: PathBuf,
    /// (path relative to the root, size), sorted by path.
    pub files: Vec<(PathBuf, u64)>,
    pub total: u64,
}

fn excluded(path: &Path, is_dir: bool) -> bool {
    let name = path.file_name().unwrap_or(OsStr::new(""));
    if is_dir {
        // Any virtualenv, whatever its name.
        EXCLUDED_DIRS.iter().any(|d| name == *d) || path.join("pyvenv.cfg").is_file()
    } else {
        EXCLUDED_FILES.iter().any(|f| name == *f)
    }
}

/// Lists the files of `root` that will be packed.
pub fn scan(root: &Path) -> Result<Tree, CliError> {
    if !root.is_dir() {
        return Err(CliError::Usage(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .add_custom_ignore_filename(".forgeignore")
        .filter_entry(|e| !excluded(e.path(), e.file_type().is_some_and(|t| t.is_dir())))
        .build();
    let mut files = Vec::new();
    for entry in walker {
        let entry = entry.map_err(|e| CliError::local(root.display(), e))?;
        let Some(ft) = entry.file_type() else {
            continue;
        };
        if ft.is_dir() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(root)
            .map_err(|e| CliError::local(entry.path().display(), e))?
            .to_path_buf();
        // Links and special files are listed too: the packer refuses them by name.
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        files.push((rel, size));
    }
    if files.is_empty() {
        return Err(CliError::Usage(format!(
            "{} has no files to pack (after .forgeignore/.gitignore)",
            root.display()
        )));
    }
    files.sort();
    let total = files.iter().map(|(_, s)| s).sum();
    Ok(Tree {
        root: root.to_path_buf(),
        files,
        total,
    })
}

impl Tree {
    /// "1,234 files, 210.3 MiB; largest: a (50 MiB), …".
    pub fn summary(&self) -> String {
        let mut largest: Vec<&(PathBuf, u64)> = self.files.iter().collect();
        largest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let list: Vec<String> = largest
            .iter()
            .take(LARGEST)
            .map(|(p, s)| format!("{} ({})", p.display(), bytes(*s)))
            .collect();
        format!(
            "{} files, {}; largest: {}",
            self.files.len(),
            bytes(self.total),
            list.join(", ")
        )
    }

    /// Packs the tree with `jobspec` into `out_dir` (blocking work on the blocking
    /// pool), with a progress bar.
    pub async fn pack(&self, jobspec: Vec<u8>, out_dir: &Path) -> Result<Capsule, CliError> {
        note(format!(
            "packing {}: {}",
            self.root.display(),
            self.summary()
        ));
        let bar = std::sync::Arc::new(Bar::new("packing", self.total));
        let source = CodeSource::Listed {
            root: self.root.clone(),
            files: self.files.iter().map(|(p, _)| p.clone()).collect(),
        };
        let out = out_dir.to_path_buf();
        let progress = bar.clone();
        let packed = tokio::task::spawn_blocking(move || {
            assemble_observed(
                source,
                &jobspec,
                None,
                &CapsuleLimits::default(),
                &out,
                &|n| progress.inc(n),
            )
        })
        .await
        .map_err(|e| CliError::local("packing", e))?;
        match packed {
            Ok(capsule) => {
                bar.finish(&format!(
                    "packed capsule {} ({})",
                    capsule.digest,
                    bytes(capsule.size)
                ));
                Ok(capsule)
            }
            Err(e) => {
                bar.abandon();
                Err(CliError::Upload(format!(
                    "packing {}: {e}",
                    self.root.display()
                )))
            }
        }
    }
}
