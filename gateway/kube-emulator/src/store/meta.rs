//! Reading (and making room in) an object's `metadata`: name, uid, finalizers,
//! deletionTimestamp, ownerReferences, plus the `metav1.Time` rendering. Every store
//! verb reads objects through these.

use serde_json::{Value, json};

/// RFC 3339 timestamp with second precision, as Kubernetes renders `metav1.Time`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `metadata` (`null` when absent).
pub(super) fn meta(obj: &Value) -> &Value {
    obj.get("metadata").unwrap_or(&Value::Null)
}

/// A string field of `metadata`.
pub(super) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

/// `metadata` as a mutable map (made an object first if it is not one).
pub(super) fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

/// `metadata.finalizers`, plus `spec.finalizers` of a Namespace.
pub(super) fn finalizers(obj: &Value) -> Vec<String> {
    let mut out: Vec<String> = meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    // Namespaces are finalized through spec.finalizers ("kubernetes").
    if obj.get("kind").and_then(Value::as_str) == Some("Namespace")
        && let Some(spec) = obj.pointer("/spec/finalizers").and_then(Value::as_array)
    {
        out.extend(spec.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    out
}

/// Whether the object carries a `deletionTimestamp`.
pub(super) fn is_deleting(obj: &Value) -> bool {
    meta(obj)
        .get("deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The owners' uids with their `blockOwnerDeletion` flags.
pub(super) fn owner_uids(obj: &Value) -> Vec<(String, bool)> {
    meta(obj)
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    let uid = r.get("uid").and_then(Value::as_str)?;
                    let block = r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    Some((uid.to_owned(), block))
                })
                .collect()
        })
        .unwrap_or_default()
}
