//! Validation and defaulting of ray.io custom resources from the real KubeRay CRDs
//! (embedded unmodified from `crds/`). The `v1` `openAPIV3Schema` is converted to JSON
//! Schema (`nullable`, `x-kubernetes-int-or-string`) and validated with `jsonschema`;
//! `default`s are applied like the API server does: to absent fields of objects that
//! are present. [`undefined_fields`] lists what a real API server would prune. Not
//! done (documented in the README): pruning unknown fields on writes, and CEL
//! `x-kubernetes-validations` rules (the v1 RayJob/RayCluster schemas carry none on the
//! fields we serve, but if present they are ignored).

use std::sync::LazyLock;

use serde_json::{Map, Value};

use crate::error::Cause;

/// The RayJob CRD, byte-identical to KubeRay v1.7.0's `ray.io_rayjobs.yaml`.
pub const RAYJOB_CRD: &str = include_str!("../crds/ray.io_rayjobs.yaml");
/// The RayCluster CRD, byte-identical to KubeRay v1.7.0's `ray.io_rayclusters.yaml`.
pub const RAYCLUSTER_CRD: &str = include_str!("../crds/ray.io_rayclusters.yaml");

/// Errors loading an embedded CRD (a build defect, surfaced at first use).
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The YAML did not parse.
    #[error("CRD yaml: {0}")]
    Yaml(String),
    /// No `v1` version with an `openAPIV3Schema`.
    #[error("CRD has no v1 openAPIV3Schema")]
    NoSchema,
    /// The converted schema was rejected by the JSON-schema compiler.
    #[error("CRD schema does not compile: {0}")]
    Compile(String),
}

/// One CRD version's schema, compiled.
pub struct CrdSchema {
    /// The raw (OpenAPI) structural schema, used for defaulting.
    pub openapi: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for CrdSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrdSchema").finish_non_exhaustive()
    }
}

fn load(yaml: &str) -> Result<CrdSchema, SchemaError> {
    let crd: Value = serde_yaml::from_str(yaml).map_err(|e| SchemaError::Yaml(e.to_string()))?;
    let openapi = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some("v1"))
        })
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .cloned()
        .ok_or(SchemaError::NoSchema)?;
    let json_schema = to_json_schema(&openapi);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft4)
        .should_validate_formats(false)
        .build(&json_schema)
        .map_err(|e| SchemaError::Compile(e.to_string()))?;
    Ok(CrdSchema { openapi, validator })
}

static RAYJOB: LazyLock<Result<CrdSchema, SchemaError>> = LazyLock::new(|| load(RAYJOB_CRD));
static RAYCLUSTER: LazyLock<Result<CrdSchema, SchemaError>> =
    LazyLock::new(|| load(RAYCLUSTER_CRD));

/// The compiled schema for a ray.io kind (`RayJob` / `RayCluster`).
pub fn schema_for(kind: &str) -> Option<&'static Result<CrdSchema, SchemaError>> {
    match kind {
        "RayJob" => Some(&RAYJOB),
        "RayCluster" => Some(&RAYCLUSTER),
        _ => None,
    }
}

/// Converts an OpenAPI v3 structural schema to JSON Schema (draft 4 keywords).
pub fn to_json_schema(s: &Value) -> Value {
    let Value::Object(m) = s else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "properties" | "patternProperties" | "definitions" => {
                let props = v
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(pk, pv)| (pk.clone(), to_json_schema(pv)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Object(props));
            }
            "items" | "additionalProperties" | "not" => {
                out.insert(
                    k.clone(),
                    if v.is_object() {
                        to_json_schema(v)
                    } else {
                        v.clone()
                    },
                );
            }
            "allOf" | "anyOf" | "oneOf" => {
                let arr = v
                    .as_array()
                    .map(|a| a.iter().map(to_json_schema).collect())
                    .unwrap_or_default();
                out.insert(k.clone(), Value::Array(arr));
            }
            // OpenAPI-only keywords: handled below or irrelevant to validation.
            "nullable" | "default" | "description" | "example" | "format" => {}
            _ if k.starts_with("x-kubernetes-") => {}
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let int_or_string = m.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    if int_or_string {
        out.remove("type");
        if !out.contains_key("anyOf") {
            out.insert(
                "anyOf".into(),
                serde_json::json!([{"type": "integer"}, {"type": "string"}]),
            );
        }
        // `pattern` in int-or-string schemas only constrains strings, which JSON Schema
        // already does.
    }
    if m.get("nullable").and_then(Value::as_bool) == Some(true)
        && let Some(Value::String(t)) = out.get("type").cloned()
    {
        out.insert("type".into(), serde_json::json!([t, "null"]));
    }
    Value::Object(out)
}

/// Applies schema `default`s to absent fields of present objects, recursively.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, sub) in props {
                    if !obj.contains_key(k)
                        && let Some(d) = sub.get("default")
                    {
                        obj.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = obj.get_mut(k) {
                        apply_defaults(sub, child);
                    }
                }
            }
            if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in obj.values_mut() {
                    apply_defaults(ap, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for child in items {
                    apply_defaults(item_schema, child);
                }
            }
        }
        _ => {}
    }
}

/// Converts a JSON pointer (`/spec/groups/0/name`) to the API server's field path
/// (`spec.groups[0].name`).
pub fn pointer_to_field(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        let seg = seg.replace("~1", "/").replace("~0", "~");
        if !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
    }
    out
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Validates `obj` against the schema; returns the causes of a 422 (empty = valid).
pub fn validate(schema: &CrdSchema, obj: &Value) -> Vec<Cause> {
    use jsonschema::error::ValidationErrorKind as K;
    let mut causes: Vec<Cause> = Vec::new();
    for err in schema.validator.iter_errors(obj) {
        let field = pointer_to_field(err.instance_path().as_str());
        let instance = err.instance();
        let cause = match err.kind() {
            K::Required { property } => {
                let prop = property
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| property.to_string());
                Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: if field.is_empty() {
                        prop
                    } else {
                        format!("{field}.{prop}")
                    },
                }
            }
            K::Enum { options } => {
                let supported: Vec<String> = options
                    .as_array()
                    .map(|a| a.iter().map(render).collect())
                    .unwrap_or_default();
                Cause {
                    reason: "FieldValueNotSupported".into(),
                    message: format!(
                        "Unsupported value: {}: supported values: {}",
                        render(instance),
                        supported.join(", ")
                    ),
                    field,
                }
            }
            K::Type { kind } => {
                let want = match kind {
                    jsonschema::error::TypeKind::Single(t) => t.to_string(),
                    jsonschema::error::TypeKind::Multiple(ts) => ts
                        .iter()
                        .map(|t| t.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                Cause {
                    reason: "FieldValueTypeInvalid".into(),
                    message: format!(
                        "Invalid value: \"{}\": {field} in body must be of type {want}: \"{}\"",
                        type_name(instance),
                        type_name(instance)
                    ),
                    field,
                }
            }
            _ => Cause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {}: {}", render(instance), err),
                field,
            },
        };
        if !causes.contains(&cause) {
            causes.push(cause);
        }
    }
    causes
}

/// The paths (`status.readyTimestamp`, `items[0].x`) of the fields of `value` that the
/// structural schema `schema` does not define: what a real API server prunes from a
/// custom resource before storing it. An object with
/// `x-kubernetes-preserve-unknown-fields` keeps everything below it, and
/// `additionalProperties` defines every key.
pub fn undefined_fields(schema: &Value, value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_undefined(schema, value, "", &mut out);
    out
}

fn collect_undefined(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return;
    }
    match value {
        Value::Object(fields) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (k, v) in fields {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (props.and_then(|p| p.get(k)), additional) {
                    (Some(s), _) => collect_undefined(s, v, &child, out),
                    (None, Some(a)) if a.is_object() => collect_undefined(a, v, &child, out),
                    (None, Some(Value::Bool(true))) => {}
                    _ => out.push(child),
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    collect_undefined(s, v, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointer_paths_render_like_the_api_server() {
        assert_eq!(
            pointer_to_field("/spec/rayClusterSpec/workerGroupSpecs/0/groupName"),
            "spec.rayClusterSpec.workerGroupSpecs[0].groupName"
        );
        assert_eq!(pointer_to_field(""), "");
    }

    #[test]
    fn embedded_crds_compile_and_default() {
        let s = schema_for("RayJob")
            .expect("known kind")
            .as_ref()
            .expect("compiles");
        let mut obj = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"}, "spec": {"entrypoint": "python x.py"}});
        apply_defaults(&s.openapi, &mut obj);
        assert!(validate(s, &obj).is_empty(), "{:?}", validate(s, &obj));
        assert_eq!(obj["spec"]["submissionMode"], "K8sJobMode");
        let bad = json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"}, "spec": {"entrypoint": 5}});
        let causes = validate(s, &bad);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.entrypoint");
        assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
    }

    #[test]
    fn undefined_fields_are_what_the_api_server_prunes() {
        let s = schema_for("RayCluster")
            .expect("known kind")
            .as_ref()
            .expect("compiles");
        let status_schema = s.openapi.pointer("/properties/status").expect("status");
        let status = json!({
            "state": "ready", "readyTimestamp": "2026-01-01T00:00:00Z",
            "stateTransitionTimes": {"ready": "2026-01-01T00:00:00Z"},
            "endpoints": {"client": "10001"},
            "head": {"podIP": "10.0.0.1", "bogus": 1},
            "conditions": [{"type": "HeadPodReady", "status": "True", "extra": 1}],
        });
        let mut undefined = undefined_fields(status_schema, &status);
        undefined.sort();
        assert_eq!(
            undefined,
            ["conditions[0].extra", "head.bogus", "readyTimestamp"]
        );
    }
}
