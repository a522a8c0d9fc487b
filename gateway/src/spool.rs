//! The spool: `<FORGE_DATA_DIR>/spool`, where a request's code archive is streamed and
//! its capsule packed while the request runs (and an upload's repack while it is
//! verified). Each file is removed when its request ends, but a crash or a kill
//! leaves them behind, and nothing else would ever remove them: the data directory
//! belongs to one gateway process, so what the spool holds at start is left over and
//! [`sweep`] removes it (counted and logged) before the gateway serves.

use std::path::{Path, PathBuf};

/// The spool directory of `data_dir`.
pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("spool")
}

/// What a sweep removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Files and directories removed at the top level.
    pub entries: u64,
    /// Bytes of the files among them (directories' contents not counted).
    pub bytes: u64,
}

/// Removes everything in the spool of `data_dir` (call at start, before serving).
pub fn sweep(data_dir: &Path) -> std::io::Result<Swept> {
    let spool = dir(data_dir);
    let mut swept = Swept::default();
    let entries = match std::fs::read_dir(&spool) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(swept),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            swept.bytes += meta.len();
            std::fs::remove_file(entry.path())?;
        }
        swept.entries += 1;
    }
    if swept.entries > 0 {
        tracing::info!(
            entries = swept.entries,
            bytes = swept.bytes,
            "removed what an earlier run left in the spool"
        );
    }
    Ok(swept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sweep_removes_leftovers_and_keeps_the_rest_of_the_data_dir() {
        let data = tempfile::tempdir().expect("tempdir");
        assert_eq!(sweep(data.path()).expect("no spool yet"), Swept::default());
        let spool = dir(data.path());
        std::fs::create_dir_all(spool.join("repack-1")).expect("mkdir");
        std::fs::write(spool.join("repack-1/capsule.zip"), b"zip").expect("write");
        std::fs::write(spool.join(".tmpA1b2"), vec![0u8; 1000]).expect("write");
        std::fs::write(data.path().join("forge.db"), b"db").expect("write");
        let swept = sweep(data.path()).expect("sweep");
        assert_eq!(
            swept,
            Swept {
                entries: 2,
                bytes: 1000
            }
        );
        assert_eq!(std::fs::read_dir(&spool).expect("spool").count(), 0);
        assert!(
            data.path().join("forge.db").exists(),
            "only the spool is swept"
        );
    }
}
