//! Code trees on disk for tests: files with contents and modes, in a given order.

use std::path::Path;

/// Write `files` (path, contents, executable) under `root`, in the given order.
pub fn write_tree(root: &Path, files: &[(&str, &[u8], bool)]) {
    use std::os::unix::fs::PermissionsExt;
    for (path, data, exec) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().expect("has parent")).expect("mkdir");
        std::fs::write(&p, data).expect("write");
        let mode = if *exec { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
}
