//! Create (POST, and server-side apply of a missing object): the object's namespace
//! and name (`generateName` gets 5 random characters like the real server), the
//! system metadata (`uid`, `creationTimestamp`, `generation`), the namespace must
//! exist and not be terminating, AlreadyExists, then defaults and CRD admission.

use std::sync::Arc;

use rand::Rng;
use serde_json::{Map, Value, json};

use super::admission::{check_body, crd_admit};
use super::builtin::admit_builtin;
use super::defaults::prepare_for_create;
use super::event::EventKind;
use super::meta::{is_deleting, meta_mut, now_rfc3339, owner_uids};
use super::state::{Inner, Store};
use crate::error::{ApiError, Cause};
use crate::resources::{NAMESPACES, ResId, Resource, res};

const NAME_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    let mut rng = rand::rng();
    (0..5)
        .map(|_| NAME_CHARS[rng.random_range(0..NAME_CHARS.len())] as char)
        .collect()
}

fn valid_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric()
}

impl Store {
    /// Creates an object (POST). `ns` is `""` for cluster-scoped resources.
    pub fn create(&self, rid: ResId, ns: &str, obj: Value) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.create_locked(&mut inner, rid, ns, obj)
    }

    pub(super) fn create_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        check_body(r, &obj)?;
        obj["kind"] = json!(r.kind);
        obj["apiVersion"] = json!(r.api_version());
        let m = meta_mut(&mut obj);
        place_in_namespace(r, ns, m)?;
        let name = object_name(r, m)?;
        m.insert("name".into(), json!(name));
        reset_system_meta(r, m);
        if r.namespaced {
            namespace_accepts(inner, r, ns, &name)?;
        }
        let key = (
            if r.namespaced {
                ns.to_owned()
            } else {
                String::new()
            },
            name.clone(),
        );
        if inner.objects[rid].contains_key(&key) {
            return Err(ApiError::AlreadyExists {
                resource: r.plural.into(),
                group: r.group.into(),
                name,
            });
        }
        prepare_for_create(r, &mut obj);
        admit_builtin(r, &name, &mut obj, None)?;
        if r.crd {
            crd_admit(r, &name, &mut obj)?;
        }
        let created = self.commit(inner, rid, EventKind::Added, obj, None);
        // An object created with owners that are already gone (a controller acting on a
        // stale cache while its owner was deleted) is the garbage collector's at once,
        // as on a real cluster, where the GC's graph sees the new dependent.
        let owners = owner_uids(&created);
        if !owners.is_empty() && owners.iter().all(|(uid, _)| !inner.uids.contains_key(uid)) {
            self.gc.notify_one();
        }
        inner.created.push(super::state::Created {
            resource: r.plural,
            namespace: key.0,
            name: key.1,
            uid: meta_str(&created, "uid"),
        });
        Ok(created)
    }
}

fn meta_str(obj: &Value, field: &str) -> String {
    obj.pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Sets `metadata.namespace` to the URL's (a different one in the body is 400), or
/// removes it for a cluster-scoped resource.
fn place_in_namespace(r: &Resource, ns: &str, m: &mut Map<String, Value>) -> Result<(), ApiError> {
    if !r.namespaced {
        m.remove("namespace");
        return Ok(());
    }
    match m.get("namespace").and_then(Value::as_str) {
        Some(n) if !n.is_empty() && n != ns => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request"
                .into(),
        )),
        _ => {
            m.insert("namespace".into(), json!(ns));
            Ok(())
        }
    }
}

/// `metadata.name`, or `generateName` plus a random suffix; a valid DNS subdomain.
fn object_name(r: &Resource, m: &Map<String, Value>) -> Result<String, ApiError> {
    let non_empty = |k: &str| m.get(k).and_then(Value::as_str).filter(|n| !n.is_empty());
    let name = match (non_empty("name"), non_empty("generateName")) {
        (Some(n), _) => n.to_owned(),
        (None, Some(prefix)) => format!("{prefix}{}", random_suffix()),
        (None, None) => {
            return Err(r.invalid(
                "",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
    };
    if !valid_dns_subdomain(&name) {
        return Err(r.invalid(
            &name,
            vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
                field: "metadata.name".into(),
            }],
        ));
    }
    Ok(name)
}

/// Drops client-set system fields and sets `uid`, `creationTimestamp`, `generation`.
fn reset_system_meta(r: &Resource, m: &mut Map<String, Value>) {
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ] {
        m.remove(k);
    }
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(now_rfc3339()));
    if r.tracks_generation() {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
}

/// The namespace exists (404) and is not being terminated (403).
fn namespace_accepts(inner: &Inner, r: &Resource, ns: &str, name: &str) -> Result<(), ApiError> {
    match inner.objects[NAMESPACES].get(&(String::new(), ns.to_owned())) {
        None => Err(res(NAMESPACES).not_found(ns)),
        Some(n) if is_deleting(n) => Err(ApiError::Forbidden(format!(
            "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
            r.plural
        ))),
        Some(_) => Ok(()),
    }
}
