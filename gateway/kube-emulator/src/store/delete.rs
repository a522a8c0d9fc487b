//! Delete: preconditions (uid, resourceVersion), the propagation policy (Background
//! by default, Orphan for batch/v1 Jobs like the real server; Foreground and Orphan
//! add their finalizer while dependents exist), and finalizers: an object with any
//! gets a `deletionTimestamp` and waits for the garbage collector or its controller;
//! one without is removed at once.

use std::sync::Arc;

use serde_json::{Value, json};

use super::event::EventKind;
use super::meta::{finalizers, is_deleting, meta_mut, meta_str, now_rfc3339, owner_uids};
use super::state::{Inner, Store};
use crate::error::{ApiError, Cause};
use crate::resources::{NAMESPACES, ResId, Resource, res};

/// Deletion options from the request body / query.
#[derive(Clone, Debug, Default)]
pub struct DeleteOpts {
    /// `Foreground`, `Background` or `Orphan`.
    pub propagation: Option<String>,
    /// Legacy `orphanDependents`.
    pub orphan_dependents: Option<bool>,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

impl DeleteOpts {
    /// Background propagation (what the garbage collector deletes with).
    pub(super) fn default_background() -> Self {
        Self {
            propagation: Some("Background".into()),
            ..Self::default()
        }
    }

    /// The finalizer the propagation policy adds (`None` for Background).
    fn propagation_finalizer(
        &self,
        r: &Resource,
        name: &str,
    ) -> Result<Option<&'static str>, ApiError> {
        let policy = match (self.propagation.as_deref(), self.orphan_dependents) {
            (Some(p), _) => p,
            (None, Some(true)) => "Orphan",
            (None, Some(false)) => "Background",
            // batch/v1 Jobs default to orphaning their pods, as in the real server.
            (None, None) if r.kind == "Job" => "Orphan",
            (None, None) => "Background",
        };
        match policy {
            "Foreground" => Ok(Some("foregroundDeletion")),
            "Orphan" => Ok(Some("orphan")),
            "Background" => Ok(None),
            other => Err(r.invalid(
                name,
                vec![Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!(
                        "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                    ),
                    field: "propagationPolicy".into(),
                }],
            )),
        }
    }

    /// 409 Conflict when a precondition does not hold for `old`.
    fn check_preconditions(&self, r: &Resource, name: &str, old: &Value) -> Result<(), ApiError> {
        if let Some(uid) = &self.uid
            && Some(uid.as_str()) != meta_str(old, "uid")
        {
            return Err(r.conflict(
                name,
                format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(old, "uid").unwrap_or("")
                ),
            ));
        }
        if let Some(rv) = &self.resource_version
            && Some(rv.as_str()) != meta_str(old, "resourceVersion")
        {
            return Err(r.conflict(
                name,
                format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(old, "resourceVersion").unwrap_or("")
                ),
            ));
        }
        Ok(())
    }
}

impl Store {
    /// Deletes an object honouring finalizers and the propagation policy. Returns the
    /// object as last stored (with `deletionTimestamp` if deletion is pending).
    pub fn delete(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        self.delete_locked(&mut inner, rid, ns, name, opts)
    }

    pub(super) fn delete_locked(
        &self,
        inner: &mut Inner,
        rid: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Arc<Value>, ApiError> {
        let r = res(rid);
        let old = inner.stored(rid, ns, name)?;
        opts.check_preconditions(r, name, &old)?;
        let extra = opts.propagation_finalizer(r, name)?;
        let mut obj = (*old).clone();
        if let Some(f) = extra {
            let has_dependents = inner.has_dependents(meta_str(&old, "uid").unwrap_or(""));
            if has_dependents && !finalizers(&obj).iter().any(|x| x == f) {
                let m = meta_mut(&mut obj);
                let list = m.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(json!(f));
                }
            }
        }
        if is_deleting(&old) {
            if obj == *old {
                return Ok(old);
            }
            self.gc.notify_one();
            return Ok(self.commit(inner, rid, EventKind::Modified, obj, Some(old)));
        }
        if finalizers(&obj).is_empty() {
            return Ok(self.commit(inner, rid, EventKind::Deleted, obj, Some(old)));
        }
        let m = meta_mut(&mut obj);
        m.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if rid == NAMESPACES {
            obj["status"]["phase"] = json!("Terminating");
        }
        self.gc.notify_one();
        Ok(self.commit(inner, rid, EventKind::Modified, obj, Some(old)))
    }
}

impl Inner {
    /// Whether any object names `uid` among its owners.
    fn has_dependents(&self, uid: &str) -> bool {
        self.objects.iter().any(|m| {
            m.values()
                .any(|o| owner_uids(o).iter().any(|(u, _)| u == uid))
        })
    }
}
