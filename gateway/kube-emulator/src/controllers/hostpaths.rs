//! Where a pod's volumes live on the host in process mode, and how container paths
//! map there. Nothing runs in a container filesystem, so every path a container
//! would see under a volumeMount is rewritten to the volume's host directory:
//!
//! * `emptyDir`, `configMap`, `secret`: `<scratch>/pods/<pod uid>/volumes/<volume>`
//!   (the kubelet writes the ConfigMap/Secret files there, `kubelet::volumes`);
//! * `persistentVolumeClaim`: `<scratch>/claims/<namespace>/<claim>`, shared by every
//!   pod using the claim and removed with the claim (`provisioner`);
//! * anything else (hostPath, projected, …) is not mapped.
//!
//! A mount's `subPath` is honoured and the longest mountPath wins.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Pod, Volume, VolumeMount};
use kube::ResourceExt;

/// Fails once the scratch root is gone: the simulator is stopping (its root was
/// removed while a controller task had not yet seen the cancellation), and a directory
/// made now would recreate the root and be left behind.
pub fn root_present(root: &Path) -> std::io::Result<()> {
    if root.is_dir() {
        Ok(())
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "the scratch root {} is gone: the simulator is stopping",
                root.display()
            ),
        ))
    }
}

/// Makes `dir` and its missing parents below `root`, but never `root` itself: each
/// level is a plain `mkdir`, which fails once its parent is gone, so a controller task
/// that has not yet seen the simulator stop cannot recreate the removed root and leave
/// it behind (checking first and then making the path left that window open).
pub fn create_dir_under(root: &Path, dir: &Path) -> std::io::Result<()> {
    let below = dir.strip_prefix(root).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not below {}", dir.display(), root.display()),
        )
    })?;
    root_present(root)?;
    let mut at = root.to_path_buf();
    for part in below.components() {
        at.push(part);
        match std::fs::create_dir(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && at.is_dir() => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return root_present(root),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Host directory of a pod-local volume (emptyDir, configMap, secret).
pub fn volume_dir(root: &Path, pod_uid: &str, volume: &str) -> PathBuf {
    root.join("pods").join(pod_uid).join("volumes").join(volume)
}

/// Host directory of a persistent volume claim's data.
pub fn claim_dir(root: &Path, namespace: &str, claim: &str) -> PathBuf {
    root.join("claims").join(namespace).join(claim)
}

/// The pod's volume named `name`.
pub fn volume<'a>(pod: &'a Pod, name: &str) -> Option<&'a Volume> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .find(|v| v.name == name)
}

/// Host directory of the pod's volume `name`, for the kinds that have one.
pub fn host_dir(root: &Path, pod: &Pod, name: &str) -> Option<PathBuf> {
    let v = volume(pod, name)?;
    if v.empty_dir.is_some() || v.config_map.is_some() || v.secret.is_some() {
        return Some(volume_dir(root, &pod.uid().unwrap_or_default(), name));
    }
    let claim = v.persistent_volume_claim.as_ref()?;
    Some(claim_dir(
        root,
        &pod.namespace().unwrap_or_default(),
        &claim.claim_name,
    ))
}

/// Host directory a volumeMount exposes: the volume's, or its `subPath` inside it
/// (`None` for a subPath that is absolute or climbs out with `..`, which the real API
/// server refuses).
pub fn mount_dir(root: &Path, pod: &Pod, m: &VolumeMount) -> Option<PathBuf> {
    let host = host_dir(root, pod, &m.name)?;
    let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else {
        return Some(host);
    };
    let rel = Path::new(sub);
    let escapes = rel.is_absolute()
        || rel
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    (!escapes).then(|| host.join(rel))
}

/// Maps a container path to its host path through the container's volumeMounts.
pub fn map_path(root: &Path, pod: &Pod, mounts: &[VolumeMount], path: &str) -> Option<PathBuf> {
    let m = mounts
        .iter()
        .filter(|m| {
            let mp = m.mount_path.trim_end_matches('/');
            path == mp || path.starts_with(&format!("{mp}/"))
        })
        .max_by_key(|m| m.mount_path.len())?;
    let host = mount_dir(root, pod, m)?;
    let rest = path[m.mount_path.trim_end_matches('/').len()..].trim_start_matches('/');
    Some(if rest.is_empty() {
        host
    } else {
        host.join(rest)
    })
}

/// Replaces every mount path of `mounts` in `s` by its host directory (longest first).
/// Only whole path occurrences are replaced: the mount path must not be glued to a
/// name character on either side, so `/forge/capsule` is rewritten in
/// `/forge/capsule/x.zip` and `file:///forge/capsule` but not inside
/// `http://host:9000/forge/capsules/x.zip` (an S3 URL whose bucket is `forge`).
pub fn rewrite_mounts(root: &Path, pod: &Pod, mounts: &[VolumeMount], s: &str) -> String {
    let mut sorted: Vec<&VolumeMount> = mounts.iter().collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.mount_path.len()));
    let mut out = s.to_owned();
    for m in sorted {
        let mp = m.mount_path.trim_end_matches('/');
        if mp.is_empty() {
            continue;
        }
        if let Some(host) = map_path(root, pod, std::slice::from_ref(m), mp) {
            out = replace_whole_path(&out, mp, &host.to_string_lossy());
        }
    }
    out
}

/// Replaces `from` by `to` in `s` where `from` is not preceded or followed by a name
/// character (alphanumeric, `.`, `-`, `_`).
fn replace_whole_path(s: &str, from: &str, to: &str) -> String {
    let name_char =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || ".-_".contains(c));
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let before = rest[..i]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back());
        let after = rest[i + from.len()..].chars().next();
        out.push_str(&rest[..i]);
        if name_char(before) || name_char(after) {
            out.push_str(from);
        } else {
            out.push_str(to);
        }
        rest = &rest[i + from.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_scratch_root_refuses_new_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("root");
        root_present(&root).expect("present while it exists");
        std::fs::remove_dir(&root).expect("remove");
        let e = root_present(&root).expect_err("gone");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("is gone"), "{e}");
    }

    #[test]
    fn directories_are_made_below_the_root_only_while_it_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir(&root).expect("root");
        let deep = root.join("pods").join("u1").join("containers").join("c");
        create_dir_under(&root, &deep).expect("made below the root");
        assert!(deep.is_dir());
        create_dir_under(&root, &deep).expect("already there is fine");
        std::fs::remove_dir_all(&root).expect("remove");
        let e = create_dir_under(&root, &deep).expect_err("root gone");
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(!root.exists(), "the removed root was made again");
        let outside = dir.path().join("elsewhere");
        let e = create_dir_under(&root, &outside).expect_err("not below the root");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn paths_map_through_volume_mounts() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "h", "uid": "u1", "namespace": "ns"},
            "spec": {"volumes": [{"name": "forge-capsule", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "x"}},
                                 {"name": "data", "persistentVolumeClaim": {"claimName": "ckpt"}}, {"name": "host", "hostPath": {"path": "/x"}}],
                     "containers": [{"name": "c"}]}
        }))
        .expect("pod");
        let mounts: Vec<VolumeMount> = serde_json::from_value(serde_json::json!([
            {"name": "forge-capsule", "mountPath": "/forge/capsule"}, {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "data", "mountPath": "/data", "subPath": "team-a"}, {"name": "host", "mountPath": "/host"}]))
        .expect("mounts");
        let root = Path::new("/scratch");
        assert_eq!(
            map_path(root, &pod, &mounts, "/forge/capsule/abc.zip"),
            Some(PathBuf::from(
                "/scratch/pods/u1/volumes/forge-capsule/abc.zip"
            ))
        );
        assert_eq!(
            map_path(root, &pod, &mounts, "/etc/cfg/a"),
            Some(PathBuf::from("/scratch/pods/u1/volumes/cfg/a"))
        );
        assert_eq!(
            map_path(root, &pod, &mounts, "/data/ckpt/1"),
            Some(PathBuf::from("/scratch/claims/ns/ckpt/team-a/ckpt/1")),
            "claims are shared, subPath honoured"
        );
        assert_eq!(map_path(root, &pod, &mounts, "/host/x"), None, "hostPath");
        let climbing: Vec<VolumeMount> = serde_json::from_value(serde_json::json!([
            {"name": "data", "mountPath": "/data", "subPath": "../team-b"}]))
        .expect("mounts");
        assert_eq!(
            map_path(root, &pod, &climbing, "/data/x"),
            None,
            "a subPath never leaves its volume"
        );
        assert_eq!(map_path(root, &pod, &mounts, "/forge/capsulex"), None);
        assert_eq!(
            rewrite_mounts(root, &pod, &mounts, "mv /tmp/x /forge/capsule/abc.zip"),
            "mv /tmp/x /scratch/pods/u1/volumes/forge-capsule/abc.zip"
        );
        // Whole paths only: an S3 URL with bucket `forge` and key `capsules/…` stays.
        let url = "http://127.0.0.1:9000/forge/capsules/abc.zip?X-Amz-Signature=1";
        assert_eq!(rewrite_mounts(root, &pod, &mounts, url), url);
        assert_eq!(
            rewrite_mounts(
                root,
                &pod,
                &mounts,
                "file:///forge/capsule x=/forge/capsule"
            ),
            "file:///scratch/pods/u1/volumes/forge-capsule x=/scratch/pods/u1/volumes/forge-capsule"
        );
    }
}
