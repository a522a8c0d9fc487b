//! The temporary directory of one Ray node (`ray start --temp-dir`). Ray puts its
//! session there: logs, the runtime envs its agent unpacks, and Unix sockets, whose
//! paths the kernel caps at 107 bytes. So it is short (`<tmp>/fk-<random>`, not under
//! the pod's scratch directory) and per node (Ray's default, `/tmp/ray`, would be shared
//! by every node and outlive them all).
//!
//! Every process of the node carries the directory in [`CLEAN_ENV`], which is how the
//! node's processes are found wherever they went: Ray starts a job's driver in a session
//! of its own, out of the container's process group. When the node ends,
//! [`RayTempDir`]'s drop kills every process so marked and removes the directory; the
//! fate-sharing supervisor does the same when the emulator went away.

use std::path::{Path, PathBuf};

/// The environment variable that tells the supervisor (`fate_share.py`) which
/// directory to remove once the node's processes are gone.
pub const CLEAN_ENV: &str = "FORGE_KUBESIM_REMOVE_AFTER";

/// The longest temporary root used as is; a longer `TMPDIR` gives way to `/tmp`.
const MAX_ROOT: usize = 40;

/// A node's temporary directory, removed on drop.
#[derive(Debug)]
pub struct RayTempDir {
    path: PathBuf,
}

impl RayTempDir {
    /// A fresh, empty directory `fk-<random>` under the system's temporary directory
    /// (or `/tmp` when that path is too long for Ray's sockets).
    pub fn create() -> std::io::Result<Self> {
        let tmp = std::env::temp_dir();
        let root = if tmp.as_os_str().len() <= MAX_ROOT {
            tmp
        } else {
            PathBuf::from("/tmp")
        };
        let dir = tempfile::Builder::new()
            .prefix("fk-")
            .rand_bytes(8)
            .tempdir_in(root)?;
        Ok(Self { path: dir.keep() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `ray start` flag that puts the node's session here.
    pub fn flag(&self) -> String {
        format!("--temp-dir={}", self.path.display())
    }
}

/// The processes whose environment has `CLEAN_ENV=<dir>` (zombies excluded).
pub fn marked(dir: &Path) -> Vec<i32> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let key = std::ffi::OsStr::new(CLEAN_ENV);
    all.filter_map(Result::ok)
        .filter(|p| p.stat().is_ok_and(|s| s.state != 'Z'))
        .filter(|p| {
            p.environ()
                .is_ok_and(|env| env.get(key).is_some_and(|v| Path::new(v) == dir))
        })
        .map(|p| p.pid)
        .collect()
}

/// Kills (SIGKILL) every process marked with `dir` until none is left (at most 10 s).
pub fn kill_marked(dir: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = marked(dir);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return;
        }
        let _ = std::process::Command::new("kill")
            .arg("-KILL")
            .args(left.iter().map(i32::to_string))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

impl Drop for RayTempDir {
    fn drop(&mut self) {
        kill_marked(&self.path);
        if let Err(e) = std::fs::remove_dir_all(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.path.display(), error = %e, "removing a Ray node's temp dir");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_processes_are_killed_wherever_they_went() {
        let dir = RayTempDir::create().expect("create");
        // A process in a session of its own (as Ray starts a job's driver).
        let mut child = std::process::Command::new("setsid")
            .args(["sleep", "600"])
            .env(CLEAN_ENV, dir.path())
            .spawn()
            .expect("spawn");
        let pid = i32::try_from(child.id()).expect("pid");
        let seen = std::time::Instant::now();
        while !marked(dir.path()).contains(&pid) {
            assert!(
                seen.elapsed().as_secs() < 10,
                "the marked process is not seen"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
        let status = child.wait().expect("wait");
        assert!(!status.success(), "killed: {status:?}");
    }

    #[test]
    fn short_fresh_and_removed_on_drop() {
        let a = RayTempDir::create().expect("create");
        let b = RayTempDir::create().expect("create");
        assert_ne!(a.path(), b.path());
        assert!(
            a.path().as_os_str().len() <= MAX_ROOT + 20,
            "{:?}",
            a.path()
        );
        std::fs::create_dir_all(a.path().join("session/sockets")).expect("mkdir");
        let path = a.path().to_path_buf();
        assert_eq!(a.flag(), format!("--temp-dir={}", path.display()));
        drop(a);
        assert!(!path.exists());
    }
}
