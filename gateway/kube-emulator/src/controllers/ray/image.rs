//! What the Ray image puts in front of a Ray node's processes here: a per-pod `ray`
//! that adds the node's own ports ([`NodePorts::flags`](super::ports::NodePorts::flags)),
//! its own temp dir ([`RayTempDir`](super::temp_dir::RayTempDir)) and a bounded object store to
//! `ray start` and passes every other command to the installed Ray untouched, and the
//! fate-sharing supervisor (`fate_share.py`) every Ray process group runs under.

use std::path::{Path, PathBuf};

use super::install::RayInstall;
use crate::controllers::hostpaths::create_dir_under;

const FATE_SHARE: &str = include_str!("fate_share.py");

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The `ray` of one node: `ray start …` gets `extra` after its own flags, and
/// `--object-store-memory=<default>` unless it names one.
pub fn ray_shim(ray: &RayInstall, extra: &[String]) -> String {
    let extra: Vec<String> = extra.iter().map(|f| quote(f)).collect();
    let real = quote(&ray.ray().to_string_lossy());
    format!(
        "#!/bin/sh\n\
         # forge-kubesim: this pod's ports and object store for `ray start` (controllers/ray/image.rs)\n\
         if [ \"$1\" = start ]; then\n\
         \x20 shift\n\
         \x20 store=\"--object-store-memory={store}\"\n\
         \x20 for a in \"$@\"; do case \"$a\" in --object-store-memory|--object-store-memory=*) store=;; esac; done\n\
         \x20 exec {real} start \"$@\" $store {extra}\n\
         fi\n\
         exec {real} \"$@\"\n",
        store = ray.object_store_bytes,
        extra = extra.join(" "),
    )
}

/// Writes pod `uid`'s `bin` (the `ray` of its node, adding `node_flags`, when given)
/// under `root` and the supervisor beside it; returns the `bin` directory.
pub fn pod_bin(
    root: &Path,
    uid: &str,
    ray: &RayInstall,
    node_flags: Option<&[String]>,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let bin = root.join("pods").join(uid).join("ray-bin");
    create_dir_under(root, &bin)?;
    if let Some(flags) = node_flags {
        let shim = bin.join("ray");
        std::fs::write(&shim, ray_shim(ray, flags))?;
        std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::write(bin.join("fate_share.py"), FATE_SHARE)?;
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install(dir: &Path) -> RayInstall {
        RayInstall {
            bin: dir.to_path_buf(),
            object_store_bytes: 123,
        }
    }

    /// The shim, run by `sh` with a stand-in `ray` that prints its argv.
    fn run_shim(args: &[&str]) -> String {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("ray");
        std::fs::write(&fake, "#!/bin/sh\necho \"$@\"\n").expect("fake");
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&fake)
            .status()
            .expect("chmod");
        let shim = dir.path().join("shim");
        let extra = vec![
            "--port=1234".to_owned(),
            "--node-ip-address=127.0.0.1".to_owned(),
        ];
        std::fs::write(&shim, ray_shim(&install(dir.path()), &extra)).expect("shim");
        let out = std::process::Command::new("sh")
            .arg(&shim)
            .args(args)
            .output()
            .expect("sh");
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_owned()
    }

    #[test]
    fn ray_start_gets_the_pods_ports_last_and_other_commands_pass_through() {
        assert_eq!(
            run_shim(&["start", "--head", "--port=6379", "--block"]),
            "start --head --port=6379 --block --object-store-memory=123 --port=1234 --node-ip-address=127.0.0.1"
        );
        assert_eq!(
            run_shim(&["start", "--object-store-memory=99", "--block"]),
            "start --object-store-memory=99 --block --port=1234 --node-ip-address=127.0.0.1"
        );
        assert_eq!(
            run_shim(&["job", "list", "--address", "x"]),
            "job list --address x"
        );
    }
}
