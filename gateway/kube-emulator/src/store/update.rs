//! Update (PUT, and the last step of every patch): optimistic concurrency on
//! `metadata.resourceVersion` (409 Conflict), the status subresource split (writes to
//! the main resource keep the stored `.status`, writes to `/status` keep everything
//! else), system metadata kept from the stored object, `generation` bumped on changes
//! outside metadata/status, no-op writes not committed, and an object whose last
//! finalizer goes while it is being deleted removed.

use std::sync::Arc;

use serde_json::{Value, json};

use super::admission::{check_body, crd_admit};
use super::builtin::admit_builtin;
use super::event::EventKind;
use super::meta::{finalizers, is_deleting, meta, meta_mut, meta_str, owner_uids};
use super::state::{Inner, Store};
use crate::error::ApiError;
use crate::resources::{ResId, Resource, res};

/// Which part of an object a write targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sub {
    /// The main resource (status changes ignored when a status subresource exists).
    Main,
    /// The `/status` subresource (only status changes kept).
    Status,
}

/// Metadata fields a write cannot change: always taken from the stored object.
const SYSTEM_META: [&str; 9] = [
    "uid",
    "creationTimestamp",
    "name",
    "namespace",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "generateName",
];

impl Store {
    /// Replaces an object (PUT), on the main resource or its status.
    pub fn update(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        obj: Value,
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.update_locked(&mut inner, rid, ns, name, obj, sub)
    }

    pub(super) fn update_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        name: &str,
        mut new: Value,
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        let old = inner.stored(rid, ns, name)?;
        check_body(r, &new)?;
        check_identity(r, name, &new, &old)?;
        keep_status_split(r, sub, &old, &mut new);
        new["kind"] = json!(r.kind);
        new["apiVersion"] = json!(r.api_version());
        let old_meta = meta(&old).clone();
        let m = meta_mut(&mut new);
        for k in SYSTEM_META {
            match old_meta.get(k) {
                Some(v) => {
                    m.insert(k.into(), v.clone());
                }
                None => {
                    m.remove(k);
                }
            }
        }
        m.remove("managedFields");
        admit_builtin(r, name, &mut new, Some(&*old))?;
        if r.crd {
            crd_admit(r, name, &mut new)?;
        }
        if sub == Sub::Main && r.tracks_generation() && spec_part(&new) != spec_part(&old) {
            let g = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            meta_mut(&mut new).insert("generation".into(), json!(g));
        }
        if new == *old {
            return Ok(old);
        }
        if owner_uids(&new) != owner_uids(&old) || finalizers(&new) != finalizers(&old) {
            self.gc.notify_one();
        }
        if is_deleting(&new) && finalizers(&new).is_empty() {
            return Ok(self.commit(inner, rid, EventKind::Deleted, new, Some(old)));
        }
        Ok(self.commit(inner, rid, EventKind::Modified, new, Some(old)))
    }
}

/// The body names the URL's object (400) at the stored resourceVersion, if it gives
/// one (409 Conflict).
fn check_identity(r: &Resource, name: &str, new: &Value, old: &Value) -> Result<(), ApiError> {
    if let Some(n) = meta_str(new, "name")
        && n != name
    {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if let Some(rv) = meta_str(new, "resourceVersion").filter(|s| !s.is_empty())
        && Some(rv) != meta_str(old, "resourceVersion")
    {
        return Err(r.conflict(
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        ));
    }
    Ok(())
}

/// A `/status` write keeps everything but the status from `old`; a main-resource
/// write of a kind with a status subresource keeps `old`'s status.
fn keep_status_split(r: &Resource, sub: Sub, old: &Value, new: &mut Value) {
    let status = match sub {
        Sub::Status => {
            let status = new.get("status").cloned();
            *new = old.clone();
            status
        }
        Sub::Main if r.status_subresource => old.get("status").cloned(),
        Sub::Main => return,
    };
    match status {
        Some(s) => new["status"] = s,
        None => {
            if let Some(o) = new.as_object_mut() {
                o.remove("status");
            }
        }
    }
}

/// The object without `metadata` and `status` (what bumps `generation`).
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}
