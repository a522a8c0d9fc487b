//! The JobSpec's JSON Schema (generated from the types with `schemars`) and the
//! structural layer of validation: every schema violation of a document as a
//! [`FieldError`] with a field path (`pools[1].gpusPerNode`).

use std::sync::OnceLock;

use super::{FieldCode, FieldError, JobSpec};

/// The JSON Schema of [`JobSpec`] (for the OpenAPI document and structural checks).
///
/// Fields that have a serde default (so that semantic validation can still run when
/// they are missing) are marked `required` here explicitly.
pub fn json_schema() -> serde_json::Value {
    let mut schema =
        serde_json::to_value(schemars::schema_for!(JobSpec)).expect("a schema always serializes");
    schema["required"] = serde_json::json!(["name", "framework", "entrypoint", "pools"]);
    if let Some(pool) = schema.pointer_mut("/$defs/PoolSpec") {
        pool["required"] = serde_json::json!(["name", "nodes", "gpusPerNode"]);
    }
    schema
}

fn compiled_schema() -> &'static jsonschema::Validator {
    static VALIDATOR: OnceLock<jsonschema::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(|| {
        jsonschema::validator_for(&json_schema()).expect("the generated JobSpec schema is valid")
    })
}

/// Turns a JSON pointer (`/pools/1/gpusPerNode`) into a field path
/// (`pools[1].gpusPerNode`).
pub(super) fn field_path(pointer: &str) -> String {
    let mut out = String::new();
    let mut parent = "";
    for raw in pointer.split('/').skip(1) {
        let seg = raw.replace("~1", "/").replace("~0", "~");
        let is_map_key = parent == "env" || parent == "labels";
        if !is_map_key && !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else if is_map_key {
            out.push_str(&format!("[{}]", serde_json::Value::String(seg.clone())));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&seg);
        }
        parent = if is_map_key { "" } else { raw };
    }
    out
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// Longest message taken from a schema error: the crate's messages quote the
/// offending value, which a hostile document makes as large as itself.
const MAX_MESSAGE_CHARS: usize = 200;

/// A schema error's message, cut to [`MAX_MESSAGE_CHARS`].
fn bounded(err: &jsonschema::ValidationError<'_>) -> String {
    let message = err.to_string();
    match message.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    }
}

/// Structural problems of a document against the schema.
pub(super) fn structural_errors(doc: &serde_json::Value) -> Vec<FieldError> {
    use jsonschema::error::ValidationErrorKind as K;
    let mut out = Vec::new();
    for err in compiled_schema().iter_errors(doc) {
        let path = field_path(err.instance_path().as_str());
        match err.kind() {
            K::Required { property } => {
                let name = property.as_str().unwrap_or_default();
                out.push(FieldError::new(
                    join(&path, name),
                    FieldCode::Required,
                    "is required",
                ));
            }
            K::AdditionalProperties { unexpected } => {
                for name in unexpected {
                    let message = if path.is_empty() && name == "team" {
                        "unknown field: the team comes from your credentials, not the spec"
                            .to_string()
                    } else {
                        format!("unknown field `{name}`")
                    };
                    out.push(FieldError::new(
                        join(&path, name),
                        FieldCode::UnknownField,
                        message,
                    ));
                }
            }
            K::Type { .. } => {
                out.push(FieldError::new(path, FieldCode::Type, bounded(&err)));
            }
            K::MaxProperties { limit } => {
                let message = format!("at most {limit} entries");
                out.push(FieldError::new(path, FieldCode::Range, message));
            }
            K::MaxItems { limit } => {
                let message = format!("at most {limit} items");
                out.push(FieldError::new(path, FieldCode::Range, message));
            }
            K::Minimum { .. }
            | K::Maximum { .. }
            | K::ExclusiveMinimum { .. }
            | K::ExclusiveMaximum { .. }
            | K::MinItems { .. }
            | K::MinProperties { .. } => {
                out.push(FieldError::new(path, FieldCode::Range, bounded(&err)));
            }
            _ => out.push(FieldError::new(path, FieldCode::Format, bounded(&err))),
        }
    }
    out
}
