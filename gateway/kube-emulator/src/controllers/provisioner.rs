//! The volume provisioner of the emulator's one StorageClass, `standard` (the default
//! the API server sets on claims without a class; `Immediate` binding): a pending
//! claim of that class is bound at once to a volume named `pvc-<claim uid>` — the
//! persistentvolume controller's annotations and `spec.volumeName`, then `status`
//! `Bound` with the claim's access modes and requested capacity, and a
//! `ProvisioningSucceeded` event. A claim of another class stays `Pending` with
//! `ProvisioningFailed` (`storageclass.storage.k8s.io "x" not found`); one with class
//! `""` waits for a pre-provisioned volume that never comes (`FailedBinding`).
//! PersistentVolume and StorageClass objects are not served. A deleted claim's data
//! (its host directory in process mode) is deleted with it (reclaim policy `Delete`).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::error::ControllerError;
use super::events::{Kind, emit_core};
use super::hostpaths::claim_dir;
use super::shared::Shared;
use super::status::merge_status;
use crate::store::DEFAULT_STORAGE_CLASS;

/// The provisioner's name (annotations, event source).
pub const PROVISIONER: &str = "kubesim.forge.dev/hostpath";

/// Runs the provisioner until shutdown.
pub async fn run(shared: Arc<Shared>) -> Result<(), ControllerError> {
    let api: Api<PersistentVolumeClaim> = Api::all(shared.client.clone());
    let mut stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    // Claims whose failure has been told (uid).
    let mut told: HashSet<String> = HashSet::new();
    loop {
        let ev = tokio::select! {
            () = shared.shutdown.cancelled() => return Ok(()),
            ev = stream.next() => match ev { Some(ev) => ev, None => return Ok(()) },
        };
        match ev {
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                if let Err(e) = reconcile(&shared, &c, &mut told).await {
                    tracing::debug!(error = %e, claim = %c.name_any(), "provisioning failed");
                }
            }
            Ok(watcher::Event::Delete(c)) => {
                told.remove(&c.uid().unwrap_or_default());
                let dir = claim_dir(
                    &shared.cfg.scratch_root,
                    &c.namespace().unwrap_or_default(),
                    &c.name_any(),
                );
                if dir.exists() {
                    let _ = tokio::fs::remove_dir_all(dir).await;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "provisioner watch error"),
        }
    }
}

async fn reconcile(
    shared: &Shared,
    c: &PersistentVolumeClaim,
    told: &mut HashSet<String>,
) -> Result<(), kube::Error> {
    let spec = c.spec.clone().unwrap_or_default();
    let pending = c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
    let unbound = spec.volume_name.as_deref().is_none_or(str::is_empty);
    if !pending || !unbound || c.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let uid = c.uid().unwrap_or_default();
    let class = spec.storage_class_name.clone().unwrap_or_default();
    if class != DEFAULT_STORAGE_CLASS {
        if told.insert(uid) {
            let (reason, msg) = if class.is_empty() {
                (
                    "FailedBinding",
                    "no persistent volumes available for this claim and no storage class is set"
                        .to_owned(),
                )
            } else {
                (
                    "ProvisioningFailed",
                    format!("storageclass.storage.k8s.io {class:?} not found"),
                )
            };
            emit_core(
                &shared.client,
                "persistentvolume-controller",
                None,
                &c.object_ref(&()),
                Kind::Warning,
                reason,
                &msg,
            )
            .await;
        }
        return Ok(());
    }
    let ns = c.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(shared.client.clone(), &ns);
    let volume = format!("pvc-{uid}");
    let bind = json!({
        "metadata": {
            "resourceVersion": c.resource_version(),
            "annotations": {
                "pv.kubernetes.io/bind-completed": "yes",
                "pv.kubernetes.io/bound-by-controller": "yes",
                "volume.beta.kubernetes.io/storage-provisioner": PROVISIONER,
                "volume.kubernetes.io/storage-provisioner": PROVISIONER,
            },
        },
        "spec": {"volumeName": volume},
    });
    api.patch(&c.name_any(), &PatchParams::default(), &Patch::Merge(bind))
        .await?;
    let capacity = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default();
    let status = json!({"phase": "Bound", "accessModes": spec.access_modes,
                        "capacity": {"storage": capacity}});
    merge_status(&api, &c.name_any(), &status).await?;
    emit_core(
        &shared.client,
        PROVISIONER,
        None,
        &c.object_ref(&()),
        Kind::Normal,
        "ProvisioningSucceeded",
        &format!("Successfully provisioned volume {volume}"),
    )
    .await;
    Ok(())
}
