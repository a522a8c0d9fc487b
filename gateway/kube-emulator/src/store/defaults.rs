//! Create-time defaults of the real API server's registry strategies, for the fields
//! the controllers read: pods (`restartPolicy`, `schedulerName`, `imagePullPolicy`,
//! `status.phase: Pending`, ...), jobs (`parallelism`, `completions`,
//! `backoffLimit: 6`, the selector and the controller-uid / job-name template labels),
//! namespaces, services (`clusterIP`), secrets (`type: Opaque`), persistent volume
//! claims (`volumeMode`, the default StorageClass `standard` as the DefaultStorageClass
//! admission plugin sets it, `status.phase: Pending`); a custom resource's status is
//! dropped.

use rand::Rng;
use serde_json::{Value, json};

use super::meta::{meta_mut, meta_str};
use crate::resources::Resource;

/// Defaults the real API server's registry strategies apply on create.
pub(super) fn prepare_for_create(r: &Resource, obj: &mut Value) {
    match r.kind {
        "Pod" => pod(obj),
        "Job" => job(obj),
        "Namespace" => namespace(obj),
        "Service" => service(obj),
        "Secret" => secret(obj),
        "PersistentVolumeClaim" => claim(obj),
        _ if r.crd => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        _ => {}
    }
}

/// `spec`, made an object first if it is absent.
fn spec_of(obj: &mut Value) -> &mut Value {
    let spec = &mut obj["spec"];
    if spec.is_null() {
        *spec = json!({});
    }
    spec
}

/// Sets each `(key, value)` that `target` does not have yet.
fn set_absent(target: &mut Value, defaults: impl IntoIterator<Item = (&'static str, Value)>) {
    for (k, v) in defaults {
        if target.get(k).is_none() {
            target[k] = v;
        }
    }
}

fn pod(obj: &mut Value) {
    let spec = spec_of(obj);
    set_absent(
        spec,
        [
            ("restartPolicy", json!("Always")),
            ("dnsPolicy", json!("ClusterFirst")),
            ("schedulerName", json!("default-scheduler")),
            ("terminationGracePeriodSeconds", json!(30)),
            ("serviceAccountName", json!("default")),
            ("priority", json!(0)),
            ("enableServiceLinks", json!(true)),
        ],
    );
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs {
                if c.get("imagePullPolicy").is_none() {
                    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                    let last = image.rsplit('/').next().unwrap_or("");
                    let policy = if !last.contains(':') || image.ends_with(":latest") {
                        "Always"
                    } else {
                        "IfNotPresent"
                    };
                    c["imagePullPolicy"] = json!(policy);
                }
                if c.get("terminationMessagePath").is_none() {
                    c["terminationMessagePath"] = json!("/dev/termination-log");
                }
            }
        }
    }
    obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
}

fn job(obj: &mut Value) {
    let name = meta_str(obj, "name").unwrap_or("").to_owned();
    let uid = meta_str(obj, "uid").unwrap_or("").to_owned();
    let spec = spec_of(obj);
    set_absent(
        spec,
        [
            ("parallelism", json!(1)),
            ("completions", json!(1)),
            ("backoffLimit", json!(6)),
            ("completionMode", json!("NonIndexed")),
            ("suspend", json!(false)),
        ],
    );
    if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
        let tmpl_meta = &mut spec["template"]["metadata"];
        if tmpl_meta.is_null() {
            *tmpl_meta = json!({});
        }
        if !tmpl_meta.get("labels").is_some_and(Value::is_object) {
            tmpl_meta["labels"] = json!({});
        }
        let labels = &mut tmpl_meta["labels"];
        labels["batch.kubernetes.io/controller-uid"] = json!(uid);
        labels["controller-uid"] = json!(uid);
        labels["batch.kubernetes.io/job-name"] = json!(name);
        labels["job-name"] = json!(name);
    }
    if let Some(tspec) = spec.pointer_mut("/template/spec")
        && tspec.get("restartPolicy").is_none()
    {
        tspec["restartPolicy"] = json!("Never");
    }
    obj["status"] = json!({});
}

fn namespace(obj: &mut Value) {
    obj["spec"] = json!({"finalizers": ["kubernetes"]});
    obj["status"] = json!({"phase": "Active"});
    let name = meta_str(obj, "name").unwrap_or("").to_owned();
    let m = meta_mut(obj);
    let labels = m.entry("labels").or_insert_with(|| json!({}));
    labels["kubernetes.io/metadata.name"] = json!(name);
}

fn secret(obj: &mut Value) {
    if obj
        .get("type")
        .is_none_or(|t| t.as_str().is_none_or(str::is_empty))
    {
        obj["type"] = json!("Opaque");
    }
}

/// The StorageClass the emulator provisions (`controllers::provisioner`).
pub const DEFAULT_STORAGE_CLASS: &str = "standard";

fn claim(obj: &mut Value) {
    let spec = spec_of(obj);
    set_absent(
        spec,
        [
            ("volumeMode", json!("Filesystem")),
            ("storageClassName", json!(DEFAULT_STORAGE_CLASS)),
        ],
    );
    obj["status"] = json!({"phase": "Pending"});
}

fn service(obj: &mut Value) {
    let spec = spec_of(obj);
    if spec.get("type").is_none() {
        spec["type"] = json!("ClusterIP");
    }
    if spec.get("clusterIP").is_none() {
        let mut rng = rand::rng();
        spec["clusterIP"] = json!(format!(
            "10.96.{}.{}",
            rng.random_range(0..255),
            rng.random_range(1..255)
        ));
    }
    obj["status"] = json!({"loadBalancer": {}});
}
