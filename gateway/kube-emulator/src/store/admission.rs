//! What every create and update checks before it is stored: the body is an object of
//! the kind and apiVersion on the URL, and a ray.io object is defaulted and validated
//! against its CRD schema (422 Invalid with field causes). Built-in kinds: `builtin`.

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::Resource;
use crate::schema;

/// The body is a JSON object whose `kind` / `apiVersion`, when set, match the URL's.
pub(super) fn check_body(r: &Resource, obj: &Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::BadRequest(
            "the body of the request must be a JSON object".into(),
        ));
    }
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && !k.is_empty()
        && k != r.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind of the object ({k}) does not match the kind on the URL ({})",
            r.kind
        )));
    }
    if let Some(v) = obj.get("apiVersion").and_then(Value::as_str)
        && !v.is_empty()
        && v != r.api_version()
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({v}) does not match the expected API version ({})",
            r.api_version()
        )));
    }
    Ok(())
}

/// Validates and defaults a ray.io object against its CRD schema.
pub(super) fn crd_admit(r: &Resource, name: &str, obj: &mut Value) -> Result<(), ApiError> {
    let Some(loaded) = schema::schema_for(r.kind) else {
        return Ok(());
    };
    let s = loaded
        .as_ref()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    schema::apply_defaults(&s.openapi, obj);
    let causes = schema::validate(s, obj);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(r.invalid(name, causes))
    }
}
