//! The kubelet's volume manager for one pod: before any container starts, every
//! volume is attached and mounted, retried with back-off until it is:
//!
//! * `emptyDir`: a fresh host directory;
//! * `configMap` / `secret`: the object read through the API and its keys (or
//!   `items`, with `defaultMode` / `mode`) written as files into the volume's host
//!   directory (`hostpaths`); a missing object or key that is not `optional` is the
//!   kubelet's `FailedMount` (`MountVolume.SetUp failed for volume "v" : configmap
//!   "x" not found`) until it appears;
//! * `persistentVolumeClaim`: the claim must exist and be bound; its volume is
//!   attached to this node through [`Attachments`](crate::controllers::attach) — a
//!   `ReadWriteOnce` volume in use on another node gets the attach/detach controller's
//!   `FailedAttachVolume` Multi-Attach event and the pod stays `ContainerCreating`;
//!   the data lives in the claim's shared host directory.
//!
//! Then every container's `subPath` directory is created in its volume when missing.
//!
//! Other volume kinds (hostPath, projected, downwardAPI, …) are accepted and not
//! materialised. File contents are written once per mount (no later refresh).

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, PersistentVolumeClaim, Secret, Volume};
use kube::{Api, Resource, ResourceExt};

use super::worker::Worker;
use crate::controllers::attach::PodRef;
use crate::controllers::events::{Kind, emit_core};
use crate::controllers::hostpaths::{claim_dir, create_dir_under, mount_dir, volume_dir};

/// Why a volume is not ready yet.
#[derive(Debug, PartialEq, Eq)]
enum NotReady {
    /// The kubelet's `FailedMount`.
    Mount(String),
    /// The attach/detach controller's `FailedAttachVolume`.
    Attach(String),
}

impl Worker {
    /// Attaches and mounts every volume of the pod, waiting (with events) until all
    /// are; `false` when the worker was cancelled first.
    pub(super) async fn mount_volumes(&self) -> bool {
        let mut told: Option<NotReady> = None;
        let mut delay = Duration::from_millis(200);
        loop {
            let failure = self.try_mount().await;
            let Err(failure) = failure else { return true };
            if told.as_ref() != Some(&failure) {
                match &failure {
                    NotReady::Mount(msg) => {
                        self.event("", Kind::Warning, "FailedMount", msg).await;
                    }
                    NotReady::Attach(msg) => {
                        emit_core(
                            &self.shared.client,
                            "attachdetach-controller",
                            None,
                            &self.pod.object_ref(&()),
                            Kind::Warning,
                            "FailedAttachVolume",
                            msg,
                        )
                        .await;
                    }
                }
                told = Some(failure);
            }
            if !self.sleep(delay).await {
                return false;
            }
            delay = (delay * 2).min(Duration::from_secs(4));
        }
    }

    async fn try_mount(&self) -> Result<(), NotReady> {
        let volumes = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.clone())
            .unwrap_or_default();
        let root = &self.shared.cfg.scratch_root;
        let uid = self.pod.uid().unwrap_or_default();
        let io = |v: &Volume, e: std::io::Error| {
            NotReady::Mount(format!(
                "MountVolume.SetUp failed for volume {:?} : {e}",
                v.name
            ))
        };
        for v in &volumes {
            let dir = volume_dir(root, &uid, &v.name);
            if v.empty_dir.is_some() {
                create_dir_under(root, &dir).map_err(|e| io(v, e))?;
            } else if let Some(src) = &v.config_map {
                let api: Api<ConfigMap> = Api::namespaced(self.shared.client.clone(), &self.ns());
                let cm = api
                    .get_opt(&src.name)
                    .await
                    .map_err(|e| self.api_failure(v, &e))?;
                let files = match cm {
                    Some(cm) => {
                        let mut data: Vec<(String, Vec<u8>)> = cm
                            .data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.into_bytes()))
                            .collect();
                        data.extend(
                            cm.binary_data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, v)| (k, v.0)),
                        );
                        data
                    }
                    None if src.optional == Some(true) => Vec::new(),
                    None => {
                        return Err(NotReady::Mount(format!(
                            "MountVolume.SetUp failed for volume {:?} : configmap {:?} not found",
                            v.name, src.name
                        )));
                    }
                };
                let items = src.items.as_deref().unwrap_or_default();
                let mode = src.default_mode.unwrap_or(0o644);
                write_files(root, &dir, &files, items, mode, src.optional == Some(true))
                    .map_err(|e| match e {
                        WriteError::MissingKey(k) => NotReady::Mount(format!(
                            "MountVolume.SetUp failed for volume {:?} : configmap references non-existent config key: {k}",
                            v.name
                        )),
                        WriteError::Io(e) => io(v, e),
                    })?;
            } else if let Some(src) = &v.secret {
                let name = src.secret_name.clone().unwrap_or_default();
                let api: Api<Secret> = Api::namespaced(self.shared.client.clone(), &self.ns());
                let secret = api
                    .get_opt(&name)
                    .await
                    .map_err(|e| self.api_failure(v, &e))?;
                let files: Vec<(String, Vec<u8>)> = match secret {
                    Some(s) => s
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect(),
                    None if src.optional == Some(true) => Vec::new(),
                    None => {
                        return Err(NotReady::Mount(format!(
                            "MountVolume.SetUp failed for volume {:?} : secret {name:?} not found",
                            v.name
                        )));
                    }
                };
                let items = src.items.as_deref().unwrap_or_default();
                let mode = src.default_mode.unwrap_or(0o644);
                write_files(root, &dir, &files, items, mode, src.optional == Some(true))
                    .map_err(|e| match e {
                        WriteError::MissingKey(k) => NotReady::Mount(format!(
                            "MountVolume.SetUp failed for volume {:?} : references non-existent secret key: {k}",
                            v.name
                        )),
                        WriteError::Io(e) => io(v, e),
                    })?;
            } else if let Some(src) = &v.persistent_volume_claim {
                self.attach_claim(v, &src.claim_name).await?;
                create_dir_under(root, &claim_dir(root, &self.ns(), &src.claim_name))
                    .map_err(|e| io(v, e))?;
            }
        }
        self.create_sub_paths()
    }

    /// Creates the `subPath` directories the containers mount that do not exist yet,
    /// as the kubelet does, so a container sees just that directory of its volume.
    fn create_sub_paths(&self) -> Result<(), NotReady> {
        let Some(spec) = self.pod.spec.as_ref() else {
            return Ok(());
        };
        let root = &self.shared.cfg.scratch_root;
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        let mounts = containers.flat_map(|c| c.volume_mounts.iter().flatten());
        for m in mounts.filter(|m| m.sub_path.as_deref().is_some_and(|s| !s.is_empty())) {
            let Some(dir) = mount_dir(root, &self.pod, m) else {
                continue;
            };
            if !dir.exists() {
                create_dir_under(root, &dir).map_err(|e| {
                    NotReady::Mount(format!(
                        "failed to prepare subPath for volumeMount {:?}: {e}",
                        m.name
                    ))
                })?;
            }
        }
        Ok(())
    }

    /// The claim exists, is bound, and its volume attaches to this node.
    async fn attach_claim(&self, v: &Volume, claim: &str) -> Result<(), NotReady> {
        let ns = self.ns();
        let unattached = |why: String| {
            NotReady::Mount(format!(
                "Unable to attach or mount volumes: unmounted volumes=[{name}], unattached volumes=[{name}]: error processing PVC {ns}/{claim}: {why}",
                name = v.name
            ))
        };
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.shared.client.clone(), &ns);
        let pvc = match api.get_opt(claim).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(unattached(format!(
                    "failed to fetch PVC from API server: persistentvolumeclaims {claim:?} not found"
                )));
            }
            Err(e) => {
                return Err(unattached(format!(
                    "failed to fetch PVC from API server: {e}"
                )));
            }
        };
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .filter(|n| !n.is_empty());
        let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let Some(volume) = volume.filter(|_| bound) else {
            return Err(unattached("PVC is not bound".into()));
        };
        let modes: Vec<String> = pvc
            .status
            .as_ref()
            .and_then(|s| s.access_modes.clone())
            .or_else(|| pvc.spec.as_ref().and_then(|s| s.access_modes.clone()))
            .unwrap_or_default();
        let exclusive = !modes
            .iter()
            .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany");
        let me = PodRef {
            uid: self.pod.uid().unwrap_or_default(),
            namespace: ns.clone(),
            name: self.name(),
        };
        self.shared
            .attachments
            .attach(&volume, exclusive, &self.node, &me)
            .map_err(NotReady::Attach)
    }

    fn api_failure(&self, v: &Volume, e: &kube::Error) -> NotReady {
        NotReady::Mount(format!(
            "MountVolume.SetUp failed for volume {:?} : {e}",
            v.name
        ))
    }
}

/// Why the files of a ConfigMap/Secret volume could not be written.
enum WriteError {
    /// An `items` key the object does not have.
    MissingKey(String),
    Io(std::io::Error),
}

/// Writes `files` (or the `items` selected from them, at their paths) into `dir`, below
/// the scratch `root`, with `mode` (an item's own mode wins).
fn write_files(
    root: &Path,
    dir: &Path,
    files: &[(String, Vec<u8>)],
    items: &[KeyToPath],
    mode: i32,
    optional: bool,
) -> Result<(), WriteError> {
    create_dir_under(root, dir).map_err(WriteError::Io)?;
    let mut plan: Vec<(&str, &[u8], i32)> = Vec::new();
    if items.is_empty() {
        plan.extend(files.iter().map(|(k, v)| (k.as_str(), v.as_slice(), mode)));
    } else {
        for item in items {
            match files.iter().find(|(k, _)| *k == item.key) {
                Some((_, v)) => {
                    plan.push((item.path.as_str(), v.as_slice(), item.mode.unwrap_or(mode)))
                }
                None if optional => {}
                None => return Err(WriteError::MissingKey(item.key.clone())),
            }
        }
    }
    for (path, bytes, mode) in plan {
        let rel = Path::new(path);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            continue;
        }
        let target = dir.join(rel);
        if let Some(parent) = target.parent() {
            create_dir_under(root, parent).map_err(WriteError::Io)?;
        }
        std::fs::write(&target, bytes).map_err(WriteError::Io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let perm = std::fs::Permissions::from_mode((mode as u32) & 0o777);
            std::fs::set_permissions(&target, perm).map_err(WriteError::Io)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_select_and_rename_keys() {
        let root = tempfile_dir("items");
        std::fs::create_dir_all(&root).expect("root");
        let dir = root.join("pods/uid/volumes/code");
        let files = vec![
            ("a.py".to_owned(), b"print(1)".to_vec()),
            ("b".to_owned(), b"x".to_vec()),
        ];
        let items: Vec<KeyToPath> = serde_json::from_value(serde_json::json!([
            {"key": "a.py", "path": "code/main.py", "mode": 0o755}
        ]))
        .expect("items");
        assert!(write_files(&root, &dir, &files, &items, 0o644, false).is_ok());
        assert_eq!(
            std::fs::read_to_string(dir.join("code/main.py")).expect("file"),
            "print(1)"
        );
        assert!(!dir.join("b").exists(), "only the selected keys");
        let missing: Vec<KeyToPath> =
            serde_json::from_value(serde_json::json!([{"key": "nope", "path": "x"}]))
                .expect("items");
        assert!(matches!(
            write_files(&root, &dir, &files, &missing, 0o644, false),
            Err(WriteError::MissingKey(k)) if k == "nope"
        ));
        assert!(write_files(&root, &dir, &files, &missing, 0o644, true).is_ok());
        std::fs::remove_dir_all(&root).expect("cleanup");
        assert!(
            matches!(
                write_files(&root, &dir, &files, &[], 0o644, false),
                Err(WriteError::Io(_))
            ),
            "nothing is written once the scratch root is gone"
        );
        assert!(!root.exists(), "the removed root was made again");
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("kubesim-volumes-{name}-{}", std::process::id()))
    }
}
