//! The first global chain of a fresh store: the gateway's start-up chain (a chain file
//! given to `serve`, or the reference chain in `dev`) is registered as global plugins
//! and stored as global version 1. Once the store has a policy, the stored one wins.

use std::path::Path;

use bytes::Bytes;
use forge_policy_host::chain_file::{ChainFileError, LinkSpec, read};

use super::active::Scope;
use super::error::PolicyAdminError;
use super::registry::{GLOBAL, Registry, Upload};
use crate::store::{LinkRef, NewVersion, PolicyStore};

/// A plugin the gateway starts with when the store has no global policy yet (from
/// the chain file or the dev reference chain).
#[derive(Debug, Clone)]
pub struct BootLink {
    pub name: String,
    pub component: Bytes,
    pub settings: serde_json::Value,
}

/// The start-up chain of a chain file: every component read, for the manager to
/// register and activate (it runs the same checks as an upload).
pub fn boot_links(specs: &[LinkSpec]) -> Result<Vec<BootLink>, ChainFileError> {
    specs
        .iter()
        .map(|l| {
            let bytes = std::fs::read(&l.component).map_err(|source| ChainFileError::Io {
                path: l.component.display().to_string(),
                source,
            })?;
            Ok(BootLink {
                name: l.name.clone(),
                component: bytes.into(),
                settings: l.settings.clone().unwrap_or(serde_json::Value::Null),
            })
        })
        .collect()
}

/// [`boot_links`] of the chain file at `path`.
pub fn boot_links_from_file(path: &Path) -> Result<Vec<BootLink>, ChainFileError> {
    boot_links(&read(path)?)
}

/// Registers the start-up chain's plugins and stores it as global version 1 (unless
/// another replica got there first: then its version is used).
pub(super) async fn bootstrap(
    registry: &Registry,
    store: &dyn PolicyStore,
    boot: Vec<BootLink>,
) -> Result<(), PolicyAdminError> {
    let mut links = Vec::with_capacity(boot.len());
    for b in boot {
        let hexd = forge_policy_host::digest_of(&b.component);
        let version = format!(
            "boot-{}",
            hexd.trim_start_matches("sha256:").get(..12).unwrap_or("")
        );
        let (rec, _) = registry
            .upload(Upload {
                owner: GLOBAL.into(),
                name: b.name.clone(),
                version,
                description: "from the gateway's start-up chain".into(),
                component: b.component,
                settings: Some(b.settings.clone()),
                memory_mib: None,
                deadline_ms: None,
                uploaded_by: "gateway".into(),
            })
            .await?;
        links.push(LinkRef {
            owner: rec.owner,
            name: rec.name,
            version: rec.version,
            digest: rec.digest,
            settings: b.settings,
        });
    }
    let first = NewVersion {
        scope: Scope::Global.key(),
        expected: 0,
        plugins: links,
        fair_share: Default::default(),
        action: "bootstrap",
        author: "gateway".into(),
        comment: "the start-up chain".into(),
    };
    match store.append(first).await.map_err(PolicyAdminError::from) {
        // Another replica bootstrapped first: use its version.
        Ok(_) | Err(PolicyAdminError::VersionConflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
