//! Parsing a spec document (JSON or YAML) and validating it — structurally against the
//! schema, then semantically against the configuration — reporting every problem at
//! once.

use super::schema::structural_errors;
use super::{FieldCode, FieldError, JobSpec, SpecErrors, SpecFormat};
use crate::config::Config;

/// Parses a JSON or YAML document into a generic value. YAML is read as YAML 1.2
/// (its core schema, which JSON is a subset of): only `true`/`false` are booleans, so a
/// pool named `n`, `no` or `on` stays the string it is in JSON, and as the published
/// schema (and any YAML 1.2 writer) has it. serde-saphyr's default budget bounds
/// depth, nodes and aliases.
fn parse_document(body: &[u8], format: SpecFormat) -> Result<serde_json::Value, FieldError> {
    let syntax = |e: String| FieldError::new("", FieldCode::Syntax, e);
    match format {
        SpecFormat::Json => serde_json::from_slice(body).map_err(|e| syntax(e.to_string())),
        SpecFormat::Yaml => std::str::from_utf8(body)
            .map_err(|e| syntax(e.to_string()))
            .and_then(|text| {
                let options = serde_saphyr::options! { strict_booleans: true };
                serde_saphyr::from_str_with_options(text, options)
                    .map_err(|e| syntax(e.to_string()))
            }),
    }
}

/// Parses a spec document and validates it against the configuration and for the
/// submitting `team`, reporting every problem (structural and semantic) at once — the
/// first `FORGE_MAX_FIELD_ERRORS` of them listed, all counted. The caller bounds the
/// document's size (`FORGE_MAX_DOCUMENT_KIB`); JSON nesting is bounded by serde_json's
/// recursion limit and YAML by serde-saphyr's default budget (depth, nodes, aliases).
pub fn parse_and_validate(
    body: &[u8],
    format: SpecFormat,
    cfg: &Config,
    team: &str,
) -> Result<JobSpec, SpecErrors> {
    let doc = parse_document(body, format).map_err(SpecErrors::one)?;
    from_value_and_validate(doc, cfg, team)
}

/// Validates an already-parsed document (e.g. the `spec` member of a JSON request).
pub fn from_value_and_validate(
    mut doc: serde_json::Value,
    cfg: &Config,
    team: &str,
) -> Result<JobSpec, SpecErrors> {
    // `5.0` is an integer to the schema, so it is one to the spec too.
    crate::domain::json_number::integral_numbers(&mut doc);
    let mut errors = structural_errors(&doc);
    let typed = serde_json::from_value::<JobSpec>(doc);
    if let Ok(spec) = &typed {
        errors.extend(spec.validate(cfg));
        errors.extend(spec.validate_for_team(team));
    }
    if errors.is_empty() {
        return typed
            .map_err(|e| SpecErrors::one(FieldError::new("", FieldCode::Type, e.to_string())));
    }
    // A missing field is reported once as `required`, not also as a range/format
    // problem of its default value.
    let required: Vec<String> = errors
        .iter()
        .filter(|e| e.code == FieldCode::Required)
        .map(|e| e.field.clone())
        .collect();
    errors.retain(|e| e.code == FieldCode::Required || !required.contains(&e.field));
    errors.sort_by(|a, b| (&a.field, a.code).cmp(&(&b.field, b.code)));
    errors.dedup_by(|a, b| a.field == b.field && a.code == b.code);
    Err(SpecErrors::capped(errors, cfg.gateway.max_field_errors))
}
