//! Where a playground's model comes from: a model id (`org/name`, which the server
//! downloads from its hub), or a directory on the storage the team's training jobs
//! write — a checkpoint is served where it was saved.
//!
//! A storage path is written as the team's pods see it: under the storage mount
//! (`FORGE_K8S_STORAGE_MOUNT`, e.g. `/starforge/ckpt/run-7`, the team's own
//! `teams/<team>` directory of the claim), under `<mount>/common/` (the read-only common
//! directory, when `FORGE_K8S_STORAGE_COMMON_SUBPATH` is set) or under `<mount>/corpus/`
//! (the corpus claim, when `FORGE_K8S_CORPUS_PVC` is set). The playground's pod mounts
//! exactly that volume, **read-only** (a server never writes the team's storage), so a
//! team can serve only what its own jobs could read. A path under none of them, or a
//! storage path without the storage configured, is refused naming the field `model`.
//!
//! *Decision:* with a ReadWriteOnce claim a playground on another node than a running
//! job cannot mount it; the pod then waits with Kubernetes' `Multi-Attach` reason (its
//! pending reason shows it), as a job's pod would.

use k8s_openapi::api::core::v1::{Volume, VolumeMount};

use crate::config::{Config, StorageConfig};
use crate::manifests::{claim_volume, volume_mount};

/// Where the model is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A model id the server fetches itself.
    Id,
    /// A directory of the team's storage directory (`teams/<team>` of the claim).
    TeamStorage,
    /// A directory of the claim's common directory (read-only for every team).
    Common,
    /// A directory of the corpus claim.
    Corpus,
}

/// The volume and mount names of a playground's storage.
const STORAGE_VOLUME: &str = "forge-storage";
const CORPUS_VOLUME: &str = "forge-corpus";

fn under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.len() > 1 && rest.starts_with('/'))
}

impl ModelSource {
    /// Where `model` is, given the storage settings (`Err`: why a path is refused).
    pub fn of(model: &str, cfg: &Config) -> Result<Self, String> {
        if !model.starts_with('/') {
            return Ok(ModelSource::Id);
        }
        let st = &cfg.storage;
        let mount = st.mount_path();
        if st.corpus_pvc.is_some() && under(model, &st.corpus_mount_path()) {
            return Ok(ModelSource::Corpus);
        }
        if st.pvc.is_some() && st.common_subpath.is_some() && under(model, &st.common_mount_path())
        {
            return Ok(ModelSource::Common);
        }
        if st.pvc.is_some() && under(model, mount) {
            return Ok(ModelSource::TeamStorage);
        }
        if st.pvc.is_none() && st.corpus_pvc.is_none() {
            return Err("a path names the team's storage, and no storage is configured (FORGE_K8S_STORAGE_PVC); use a model id".into());
        }
        Err(format!(
            "a storage path must be a directory under {mount}/ (the team's storage, as its jobs see it)"
        ))
    }

    /// The volumes and read-only mounts the server needs for this source.
    pub fn volumes(&self, team: &str, st: &StorageConfig) -> (Vec<Volume>, Vec<VolumeMount>) {
        let ro = |name: &str, path: &str, sub_path: Option<String>| VolumeMount {
            sub_path,
            ..volume_mount(name, path, true)
        };
        match (self, &st.pvc, &st.corpus_pvc) {
            (ModelSource::TeamStorage, Some(pvc), _) => (
                vec![claim_volume(STORAGE_VOLUME, pvc, true)],
                vec![ro(
                    STORAGE_VOLUME,
                    st.mount_path(),
                    Some(StorageConfig::team_subpath(team)),
                )],
            ),
            (ModelSource::Common, Some(pvc), _) => (
                vec![claim_volume(STORAGE_VOLUME, pvc, true)],
                vec![ro(
                    STORAGE_VOLUME,
                    &st.common_mount_path(),
                    st.common_subpath.clone(),
                )],
            ),
            (ModelSource::Corpus, _, Some(pvc)) => (
                vec![claim_volume(CORPUS_VOLUME, pvc, true)],
                vec![ro(CORPUS_VOLUME, &st.corpus_mount_path(), None)],
            ),
            _ => (Vec::new(), Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(vars: &[(&str, &str)]) -> Config {
        let mut env: std::collections::HashMap<String, String> = [
            ("FORGE_IMAGE_NEMO_RL", "rayproject/ray:2.41.0"),
            ("FORGE_KUBERAY_RAY_VERSION", "2.41.0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Config::from_env_map(env).expect("config")
    }

    #[test]
    fn ids_and_paths_under_each_mount_are_told_apart() {
        let all = cfg(&[
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_MOUNT", "/starforge"),
            ("FORGE_K8S_STORAGE_COMMON_SUBPATH", "shared/models"),
            ("FORGE_K8S_CORPUS_PVC", "corpus"),
        ]);
        for (model, source) in [
            ("meta/llama-3-8b", ModelSource::Id),
            ("/starforge/ckpt/run-7", ModelSource::TeamStorage),
            ("/starforge/common/llama", ModelSource::Common),
            ("/starforge/corpus/base/llama", ModelSource::Corpus),
        ] {
            assert_eq!(ModelSource::of(model, &all), Ok(source), "{model}");
        }
        for bad in ["/etc/passwd", "/starforge", "/starforge/", "/starforgeX/m"] {
            assert!(ModelSource::of(bad, &all).is_err(), "{bad}");
        }
        // Without the common directory or the corpus those prefixes are just the team's.
        let team_only = cfg(&[
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_MOUNT", "/starforge"),
        ]);
        assert_eq!(
            ModelSource::of("/starforge/common/llama", &team_only),
            Ok(ModelSource::TeamStorage)
        );
        let none = cfg(&[]);
        let e = ModelSource::of("/starforge/ckpt", &none).expect_err("no storage");
        assert!(e.contains("FORGE_K8S_STORAGE_PVC"), "{e}");
        assert_eq!(ModelSource::of("org/m", &none), Ok(ModelSource::Id));
    }

    #[test]
    fn the_server_mounts_only_its_source_read_only() {
        let c = cfg(&[
            ("FORGE_K8S_STORAGE_PVC", "forge-storage"),
            ("FORGE_K8S_STORAGE_MOUNT", "/starforge"),
            ("FORGE_K8S_STORAGE_COMMON_SUBPATH", "shared/models"),
            ("FORGE_K8S_CORPUS_PVC", "corpus"),
        ]);
        let (volumes, mounts) = ModelSource::TeamStorage.volumes("team-a", &c.storage);
        assert_eq!(volumes.len(), 1);
        let claim = volumes[0]
            .persistent_volume_claim
            .as_ref()
            .expect("a claim");
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("forge-storage", Some(true))
        );
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].mount_path, "/starforge");
        assert_eq!(mounts[0].sub_path.as_deref(), Some("teams/team-a"));
        assert_eq!(mounts[0].read_only, Some(true));
        let (_, mounts) = ModelSource::Common.volumes("team-a", &c.storage);
        assert_eq!(
            (mounts[0].mount_path.as_str(), mounts[0].sub_path.as_deref()),
            ("/starforge/common", Some("shared/models"))
        );
        let (volumes, mounts) = ModelSource::Corpus.volumes("team-a", &c.storage);
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|p| p.claim_name.as_str()),
            Some("corpus")
        );
        assert_eq!(mounts[0].mount_path, "/starforge/corpus");
        assert_eq!(
            ModelSource::Id.volumes("team-a", &c.storage),
            (vec![], vec![])
        );
    }
}
