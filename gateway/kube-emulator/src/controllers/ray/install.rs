//! Which Ray the emulated Ray nodes run: a virtualenv with `ray[default]` installed
//! (`deploy/install-ray.sh` makes one in the clone), standing for what the Ray image
//! provides. Without one, Ray nodes stay simulated.

use std::path::{Path, PathBuf};

/// The object store of a Ray node whose `ray start` names none: Ray's own default is
/// 30 % of the machine's memory, for every node of every cluster on this one host.
pub const DEFAULT_OBJECT_STORE_BYTES: u64 = 100 * 1024 * 1024;

/// A Ray installation the kubelet runs Ray nodes and submitters with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RayInstall {
    /// The virtualenv's `bin`: `ray` and `python3`.
    pub bin: PathBuf,
    /// `--object-store-memory` of a node whose command gives none.
    pub object_store_bytes: u64,
}

/// Why a directory is no Ray installation.
#[derive(Debug, thiserror::Error)]
#[error(
    "{dir} is not a virtualenv with Ray: {missing} is missing (bash deploy/install-ray.sh makes one)"
)]
pub struct NotRay {
    dir: String,
    missing: String,
}

impl RayInstall {
    /// The virtualenv at `venv`, if it has `bin/ray` and `bin/python3`.
    pub fn from_venv(venv: &Path) -> Result<Self, NotRay> {
        let bin = venv.join("bin");
        for tool in ["ray", "python3"] {
            if !bin.join(tool).is_file() {
                return Err(NotRay {
                    dir: venv.display().to_string(),
                    missing: bin.join(tool).display().to_string(),
                });
            }
        }
        let bin = std::fs::canonicalize(&bin).unwrap_or(bin);
        Ok(Self {
            bin,
            object_store_bytes: DEFAULT_OBJECT_STORE_BYTES,
        })
    }

    /// The `ray` CLI.
    pub fn ray(&self) -> PathBuf {
        self.bin.join("ray")
    }

    /// The virtualenv's Python.
    pub fn python(&self) -> PathBuf {
        self.bin.join("python3")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_ray_is_refused_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = RayInstall::from_venv(dir.path()).expect_err("no ray");
        assert!(e.to_string().contains("bin/ray is missing"), "{e}");
        std::fs::create_dir(dir.path().join("bin")).expect("bin");
        for tool in ["ray", "python3"] {
            std::fs::write(dir.path().join("bin").join(tool), "").expect("tool");
        }
        let ray = RayInstall::from_venv(dir.path()).expect("ray");
        assert!(ray.ray().ends_with("bin/ray"));
        assert_eq!(ray.object_store_bytes, DEFAULT_OBJECT_STORE_BYTES);
    }
}
