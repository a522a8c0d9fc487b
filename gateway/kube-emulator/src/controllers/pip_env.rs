//! The `pip` field of a runtime env, really installed (process mode, when
//! [`ControllerConfig::pip_envs`](super::config::ControllerConfig) is set): like Ray's
//! pip plugin, a job gets the listed packages ahead of what the image has. Each distinct
//! list is installed once with the image's Python (`python3 -m pip install --target`)
//! into `<pip_envs>/pip-<sha256 of the list>` and reused by every job naming the same
//! list (Ray caches runtime envs by their URI the same way); the driver finds it first
//! on `PYTHONPATH`. Installs go to a fresh directory renamed into place when complete,
//! so concurrent jobs with one list never see half an environment. A failed install
//! fails the job with pip's last lines, as Ray's "runtime env setup failed" does.
//!
//! Off by default: installing arbitrary packages is slow and needs a package index;
//! then `pip` is accepted and ignored.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use sha2::{Digest, Sha256};

use super::runner::RunnerError;

/// Lines of pip's output kept for the error of a failed install.
const TAIL_LINES: usize = 15;

/// The directory holding `packages` under `root`, installed on first use with
/// `python3` from `path` (the image's `PATH`).
pub async fn ensure(root: &Path, packages: &[String], path: &str) -> Result<PathBuf, RunnerError> {
    let mut h = Sha256::new();
    for p in packages {
        h.update(p.as_bytes());
        h.update(b"\n");
    }
    let dir = root.join(format!("pip-{}", hex::encode(h.finalize())));
    // `.pip-cache` and `.installing-*` live beside the environments.
    if dir.is_dir() {
        return Ok(dir);
    }
    std::fs::create_dir_all(root)?;
    let staging = tempfile::Builder::new()
        .prefix(".installing-")
        .tempdir_in(root)?;
    let out = tokio::process::Command::new("python3")
        .env("PATH", path)
        // pip's download and wheel cache stays with the environments.
        .env("PIP_CACHE_DIR", root.join(".pip-cache"))
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            "--target",
        ])
        .arg(staging.path())
        .args(packages)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = text.lines().rev().take(TAIL_LINES).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(RunnerError::RuntimeEnv(format!(
            "pip install {} failed ({}): {}",
            packages.join(" "),
            out.status,
            tail.join("\n")
        )));
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, &dir) {
        // Another job installed the same list meanwhile: use that one.
        let _ = std::fs::remove_dir_all(&staged);
        if !dir.is_dir() {
            return Err(e.into());
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_list_that_cannot_install_fails_with_pips_words_and_leaves_nothing() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = std::env::var("PATH").unwrap_or_default();
        // A local path that does not exist: pip fails without touching the network.
        let missing = root
            .path()
            .join("no-such-package.whl")
            .display()
            .to_string();
        let e = ensure(root.path(), &[missing], &path)
            .await
            .expect_err("cannot install");
        let msg = e.to_string();
        assert!(
            msg.contains("pip install") && msg.contains("no-such-package"),
            "{msg}"
        );
        let left: Vec<_> = std::fs::read_dir(root.path()).expect("root").collect();
        assert!(left.is_empty(), "no environment half-installed: {left:?}");
    }

    /// A minimal wheel of package `forgetiny` (pip installs it without an index).
    fn tiny_wheel(dir: &Path) -> PathBuf {
        use std::io::Write;
        let path = dir.join("forgetiny-1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).expect("wheel"));
        let files = [
            ("forgetiny/__init__.py", "VALUE = 7\n"),
            (
                "forgetiny-1.0.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: forgetiny\nVersion: 1.0\n",
            ),
            (
                "forgetiny-1.0.dist-info/WHEEL",
                "Wheel-Version: 1.0\nGenerator: forge\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            ),
            ("forgetiny-1.0.dist-info/RECORD", ""),
        ];
        for (name, body) in files {
            zip.start_file(name, zip::write::SimpleFileOptions::default())
                .expect("entry");
            zip.write_all(body.as_bytes()).expect("write");
        }
        zip.finish().expect("finish");
        path
    }

    #[tokio::test]
    async fn an_installed_list_is_reused() {
        let root = tempfile::tempdir().expect("tempdir");
        let path = std::env::var("PATH").unwrap_or_default();
        let wheel = tiny_wheel(root.path());
        let envs = root.path().join("envs");
        let list = vec![wheel.display().to_string()];
        let dir = ensure(&envs, &list, &path).await.expect("install");
        assert!(
            dir.join("forgetiny/__init__.py").is_file(),
            "{}",
            dir.display()
        );
        // Reused without running pip (no python3 on this PATH).
        let again = ensure(&envs, &list, "/nonexistent").await.expect("reused");
        assert_eq!(again, dir);
    }
}
