//! What the real API server's conversion, registry strategies and validation do to the
//! content of the built-in kinds whose content the emulator checks, on every create
//! and update (patches included):
//!
//! * Secret: `stringData` is folded into `data` (base64) and dropped, as the v1 →
//!   internal conversion does; `data` values must be base64 (400 `illegal base64 data
//!   at input byte N`, a decode error like the real one); `type` is immutable.
//! * ConfigMap: `binaryData` must be base64; no key in both maps.
//! * Both: valid config keys, at most 1 MiB of content, `immutable: true` freezes the
//!   content and the flag itself.
//! * PersistentVolumeClaim: at least one known access mode and a storage request; the
//!   spec is immutable after creation except `resources` and a first `volumeName`.
//! * Lease: `leaseDurationSeconds` > 0, `leaseTransitions` ≥ 0.
//! * NetworkPolicy (stored and served; nothing enforces it — the emulator has no pod
//!   network): `policyTypes` values `Ingress` / `Egress`, at most two; port
//!   protocols `TCP` / `UDP` / `SCTP`; an `ipBlock` needs a `cidr`.
//!
//! Errors are 422 Invalid with the real field paths and wording.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause};
use crate::resources::Resource;

/// The largest ConfigMap or Secret content the real server stores.
const MAX_CONTENT: usize = 1024 * 1024;

/// The access modes a claim may ask for.
const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// Normalizes and validates `obj` (being created when `old` is `None`).
pub(super) fn admit_builtin(
    r: &Resource,
    name: &str,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let causes = match r.kind {
        "Secret" => {
            fold_string_data(obj);
            let mut c = check_base64(r, obj, "data")?;
            c.extend(content_causes(obj, &["data"], &["data"]));
            if let Some(old) = old
                && old.get("type") != obj.get("type")
            {
                c.push(cause(
                    "FieldValueInvalid",
                    "type",
                    format!("Invalid value: {}: field is immutable", obj["type"]),
                ));
            }
            c.extend(immutability(obj, old, &["data"]));
            c
        }
        "ConfigMap" => {
            let mut c = check_base64(r, obj, "binaryData")?;
            c.extend(content_causes(
                obj,
                &["data", "binaryData"],
                &["binaryData"],
            ));
            c.extend(immutability(obj, old, &["data", "binaryData"]));
            c
        }
        "PersistentVolumeClaim" => claim_causes(obj, old),
        "Lease" => lease_causes(obj),
        "NetworkPolicy" => network_policy_causes(obj),
        _ => Vec::new(),
    };
    if causes.is_empty() {
        Ok(())
    } else {
        Err(r.invalid(name, causes))
    }
}

fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

/// A `FieldValueInvalid` cause worded like apimachinery's `field.Invalid`.
fn invalid(field: &str, value: impl std::fmt::Display, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {value}: {detail}"),
    )
}

/// `stringData` entries become base64 `data` entries (they win over `data`).
fn fold_string_data(obj: &mut Value) {
    let Some(string_data) = obj
        .as_object_mut()
        .and_then(|o| o.remove("stringData"))
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
    else {
        return;
    };
    if !obj.get("data").is_some_and(Value::is_object) {
        obj["data"] = json!({});
    }
    for (k, v) in string_data {
        let text = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        obj["data"][k] = json!(STANDARD.encode(text));
    }
}

/// The values of `obj[map]` decode as base64 (a 400 like the real decoding error
/// otherwise); returns no causes (the check is a decode, not a validation).
fn check_base64(r: &Resource, obj: &Value, map: &str) -> Result<Vec<Cause>, ApiError> {
    for v in obj
        .get(map)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(Map::values)
    {
        let Some(s) = v.as_str() else {
            return Err(ApiError::BadRequest(format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: json: cannot unmarshal {v} into Go struct field {kind}.{map} of type []uint8",
                kind = r.kind
            )));
        };
        if let Err(e) = STANDARD.decode(s) {
            let at = match e {
                base64::DecodeError::InvalidByte(at, _)
                | base64::DecodeError::InvalidLastSymbol(at, _) => at,
                base64::DecodeError::InvalidLength(len) => len,
                base64::DecodeError::InvalidPadding => s.len(),
            };
            return Err(ApiError::BadRequest(format!(
                "{kind} in version \"v1\" cannot be handled as a {kind}: illegal base64 data at input byte {at}",
                kind = r.kind
            )));
        }
    }
    Ok(Vec::new())
}

/// Valid config keys, no key in two maps, at most [`MAX_CONTENT`] bytes in all (the
/// `encoded` maps hold base64).
fn content_causes(obj: &Value, maps: &[&str], encoded: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    let mut total = 0usize;
    for map in maps {
        let entries = obj.get(*map).and_then(Value::as_object);
        for (k, v) in entries.into_iter().flatten() {
            let field = format!("{map}[{k}]");
            if !valid_config_key(k) {
                causes.push(invalid(
                    &field,
                    format!("{k:?}"),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
            if seen.contains(&k.as_str()) {
                causes.push(invalid(
                    &field,
                    format!("{k:?}"),
                    "duplicate of key present in data",
                ));
            }
            seen.push(k);
            total += v.as_str().map_or(0, |s| {
                if encoded.contains(map) {
                    s.len() / 4 * 3
                } else {
                    s.len()
                }
            });
        }
    }
    if total > MAX_CONTENT {
        causes.push(cause(
            "FieldValueTooLong",
            maps[0],
            format!("Too long: must have at most {MAX_CONTENT} bytes"),
        ));
    }
    causes
}

/// `[-._a-zA-Z0-9]+`, at most 253 characters, not `.` or `..`.
fn valid_config_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k != "."
        && k != ".."
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// With `immutable: true` stored, the content and the flag may not change.
fn immutability(obj: &Value, old: Option<&Value>, maps: &[&str]) -> Vec<Cause> {
    let Some(old) = old else {
        return Vec::new();
    };
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return Vec::new();
    }
    let mut causes = Vec::new();
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        causes.push(cause(
            "FieldValueForbidden",
            "immutable",
            "Forbidden: field is immutable when `immutable` is set",
        ));
    }
    for map in maps {
        if obj.get(*map) != old.get(*map) {
            causes.push(cause(
                "FieldValueForbidden",
                map,
                "Forbidden: field is immutable when `immutable` is set",
            ));
        }
    }
    causes
}

/// Access modes and the storage request; an immutable spec once created.
fn claim_causes(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let modes: Vec<&str> = spec
        .get("accessModes")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if modes.is_empty() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.accessModes",
            "Required value: at least 1 access mode is required",
        ));
    }
    for m in modes.iter().filter(|m| !ACCESS_MODES.contains(m)) {
        causes.push(cause(
            "FieldValueNotSupported",
            "spec.accessModes",
            format!(
                "Unsupported value: {m:?}: supported values: {}",
                ACCESS_MODES.map(|a| format!("{a:?}")).join(", ")
            ),
        ));
    }
    if spec.pointer("/resources/requests/storage").is_none() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.resources[storage]",
            "Required value",
        ));
    }
    if let Some(old) = old {
        let frozen = |o: &Value, first_bind: bool| {
            let mut s = o.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(m) = s.as_object_mut() {
                m.remove("resources");
                if first_bind {
                    m.remove("volumeName");
                }
            }
            s
        };
        let unbound = old
            .pointer("/spec/volumeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if frozen(obj, unbound) != frozen(old, unbound) {
            causes.push(cause(
                "FieldValueForbidden",
                "spec",
                "Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
            ));
        }
    }
    causes
}

/// `policyTypes`, port protocols and `ipBlock.cidr` of a NetworkPolicy.
fn network_policy_causes(obj: &Value) -> Vec<Cause> {
    const TYPES: [&str; 2] = ["Ingress", "Egress"];
    const PROTOCOLS: [&str; 3] = ["TCP", "UDP", "SCTP"];
    let quoted = |vs: &[&str]| {
        vs.iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let types = spec.get("policyTypes").and_then(Value::as_array);
    if let Some(t) = types.filter(|t| t.len() > TYPES.len()) {
        causes.push(invalid(
            "spec.policyTypes",
            Value::Array(t.clone()),
            "may not specify more than two policyTypes",
        ));
    }
    for (i, t) in types.into_iter().flatten().enumerate() {
        let t = t.as_str().unwrap_or("");
        if !TYPES.contains(&t) {
            causes.push(cause(
                "FieldValueNotSupported",
                &format!("spec.policyTypes[{i}]"),
                format!(
                    "Unsupported value: {t:?}: supported values: {}",
                    quoted(&TYPES)
                ),
            ));
        }
    }
    for (dir, peers) in [("ingress", "from"), ("egress", "to")] {
        let rules = spec.get(dir).and_then(Value::as_array);
        for (i, rule) in rules.into_iter().flatten().enumerate() {
            let ports = rule.get("ports").and_then(Value::as_array);
            for (j, port) in ports.into_iter().flatten().enumerate() {
                if let Some(p) = port.get("protocol").and_then(Value::as_str)
                    && !PROTOCOLS.contains(&p)
                {
                    causes.push(cause(
                        "FieldValueNotSupported",
                        &format!("spec.{dir}[{i}].ports[{j}].protocol"),
                        format!(
                            "Unsupported value: {p:?}: supported values: {}",
                            quoted(&PROTOCOLS)
                        ),
                    ));
                }
            }
            let list = rule.get(peers).and_then(Value::as_array);
            for (j, peer) in list.into_iter().flatten().enumerate() {
                let Some(block) = peer.get("ipBlock") else {
                    continue;
                };
                if block
                    .get("cidr")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(cause(
                        "FieldValueRequired",
                        &format!("spec.{dir}[{i}].{peers}[{j}].ipBlock.cidr"),
                        "Required value",
                    ));
                }
            }
        }
    }
    causes
}

fn lease_causes(obj: &Value) -> Vec<Cause> {
    let int = |f: &str| obj.pointer(&format!("/spec/{f}")).and_then(Value::as_i64);
    let mut causes = Vec::new();
    if let Some(d) = int("leaseDurationSeconds").filter(|d| *d <= 0) {
        causes.push(invalid(
            "spec.leaseDurationSeconds",
            d,
            "must be greater than 0",
        ));
    }
    if let Some(t) = int("leaseTransitions").filter(|t| *t < 0) {
        causes.push(invalid(
            "spec.leaseTransitions",
            t,
            "must be greater than or equal to 0",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{RESOURCES, Resource};

    fn kind(k: &str) -> &'static Resource {
        RESOURCES.iter().find(|r| r.kind == k).expect("served")
    }

    #[test]
    fn string_data_is_folded_into_data() {
        let mut s =
            json!({"data": {"a": "eA==", "b": "eA=="}, "stringData": {"b": "two", "c": "three"}});
        admit_builtin(kind("Secret"), "s", &mut s, None).expect("valid");
        assert_eq!(
            s,
            json!({"data": {"a": "eA==", "b": "dHdv", "c": "dGhyZWU="}})
        );
    }

    #[test]
    fn bad_base64_is_a_decode_error() {
        let mut s = json!({"data": {"a": "no!"}});
        let e = admit_builtin(kind("Secret"), "s", &mut s, None).expect_err("400");
        assert_eq!(
            e.to_string(),
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 2"
        );
        assert_eq!(e.code(), 400);
    }

    #[test]
    fn keys_sizes_and_immutability() {
        let mut cm = json!({"data": {"a b": "x", "k": "v"}, "binaryData": {"k": "eA=="}});
        let e = admit_builtin(kind("ConfigMap"), "c", &mut cm, None).expect_err("invalid");
        assert!(
            e.to_string()
                .contains("data[a b]: Invalid value: \"a b\": a valid config key"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("binaryData[k]: Invalid value: \"k\": duplicate"),
            "{e}"
        );
        let old = json!({"immutable": true, "data": {"k": "v"}});
        let mut new = json!({"immutable": true, "data": {"k": "w"}});
        let e = admit_builtin(kind("ConfigMap"), "c", &mut new, Some(&old)).expect_err("frozen");
        assert!(
            e.to_string()
                .contains("data: Forbidden: field is immutable when `immutable` is set"),
            "{e}"
        );
        let mut big = json!({"data": {"k": "x".repeat(MAX_CONTENT + 1)}});
        let e = admit_builtin(kind("ConfigMap"), "c", &mut big, None).expect_err("too long");
        assert!(
            e.to_string()
                .contains("Too long: must have at most 1048576 bytes"),
            "{e}"
        );
    }

    #[test]
    fn claims_need_modes_and_storage() {
        let mut c = json!({"spec": {"accessModes": ["ReadWriteSometimes"]}});
        let e =
            admit_builtin(kind("PersistentVolumeClaim"), "c", &mut c, None).expect_err("invalid");
        assert_eq!(
            e.to_string(),
            "PersistentVolumeClaim \"c\" is invalid: [spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\", spec.resources[storage]: Required value]"
        );
        let old = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
        let mut bound = old.clone();
        bound["spec"]["volumeName"] = json!("pvc-1");
        bound["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
        admit_builtin(kind("PersistentVolumeClaim"), "c", &mut bound, Some(&old))
            .expect("binding and resizing");
        let mut changed = bound.clone();
        changed["spec"]["accessModes"] = json!(["ReadWriteMany"]);
        let e = admit_builtin(
            kind("PersistentVolumeClaim"),
            "c",
            &mut changed,
            Some(&bound),
        )
        .expect_err("immutable");
        assert!(
            e.to_string()
                .contains("spec: Forbidden: spec is immutable after creation"),
            "{e}"
        );
    }
}
