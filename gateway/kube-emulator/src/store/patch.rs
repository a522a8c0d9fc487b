//! Patch (PATCH) by content type: JSON merge patch; strategic merge patch applied as
//! a JSON merge patch (lists are replaced, not merged by key); JSON patch (RFC 6902);
//! server-side apply approximated as create-if-missing (named by the URL), else a
//! merge patch. The
//! patched document then goes through [`Store::update`]'s checks.

use std::sync::Arc;

use serde_json::Value;

use super::meta::meta_mut;
use super::state::Store;
use super::update::Sub;
use crate::error::{ApiError, Cause};
use crate::resources::{ResId, res};

/// Patch flavours, by request content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`: applied as a JSON merge patch.
    Strategic,
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/apply-patch+yaml`: approximated as create-or-merge.
    Apply,
}

impl Store {
    /// Patches an object (PATCH). Server-side apply creates a missing object.
    pub fn patch(
        &self,
        rid: ResId,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Sub,
    ) -> Result<Arc<Value>, ApiError> {
        let mut inner = self.lock();
        let r = res(rid);
        let bad = |e: String| ApiError::BadRequest(e);
        let current = inner.objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned();
        let mut doc = match (current, kind) {
            (Some(c), _) => (*c).clone(),
            (None, PatchKind::Apply) => {
                let mut obj: Value =
                    serde_yaml::from_slice(body).map_err(|e| bad(e.to_string()))?;
                if sub == Sub::Status {
                    return Err(r.not_found(name));
                }
                // The object is named by the URL when the applied config does not say.
                if obj.is_object() && obj.pointer("/metadata/name").is_none() {
                    meta_mut(&mut obj).insert("name".into(), Value::from(name));
                }
                return self.create_locked(&mut inner, rid, ns, obj);
            }
            (None, _) => return Err(r.not_found(name)),
        };
        match kind {
            PatchKind::Merge | PatchKind::Strategic => {
                let p: Value = serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::merge(&mut doc, &p);
            }
            PatchKind::Apply => {
                let p: Value = serde_yaml::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::merge(&mut doc, &p);
            }
            PatchKind::Json => {
                let p: json_patch::Patch =
                    serde_json::from_slice(body).map_err(|e| bad(e.to_string()))?;
                json_patch::patch(&mut doc, &p).map_err(|e| {
                    r.invalid(
                        name,
                        vec![Cause {
                            reason: "FieldValueInvalid".into(),
                            message: e.to_string(),
                            field: String::new(),
                        }],
                    )
                })?;
            }
        }
        self.update_locked(&mut inner, rid, ns, name, doc, sub)
    }
}
