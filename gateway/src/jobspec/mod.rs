//! The job specification a team submits (JSON or YAML), its JSON Schema, and its
//! validation, which reports every problem at once, each with a field path
//! (`pools[1].gpusPerNode`) and a stable code.
//!
//! Validation runs in two layers, merged into one list:
//! 1. structural, against the generated JSON Schema (types, unknown fields — including
//!    `team`, which comes from authentication, never from the body — and missing
//!    fields), using the `jsonschema` crate so that every structural error is found;
//! 2. semantic ([`JobSpec::validate`]): names, ranges, duplicates, reserved keys,
//!    frameworks without a configured image, storage the cluster does not offer.

pub mod names;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// Most GPUs a single machine may ask for.
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// Most pools in one job (KubeRay worker groups; Kueue allows 7 + head).
pub const MAX_POOLS: usize = 7;
/// Most machines in one pool.
pub const MAX_NODES_PER_POOL: u32 = 1024;
/// Most environment variables in one job.
pub const MAX_ENV: usize = 256;
/// Longest entrypoint, in bytes.
pub const MAX_ENTRYPOINT_BYTES: usize = 16 * 1024;
/// Longest environment value, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;

/// Environment-variable prefixes a job may not set: Forge's own and Ray's (they
/// control the cluster the job runs in).
pub const RESERVED_ENV_PREFIXES: &[&str] = &["FORGE_", "RAY_"];
/// Environment variables a job may not set: Ray assigns GPUs to workers itself.
pub const RESERVED_ENV_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"];
/// Label-key prefixes owned by Forge, KubeRay and Kueue.
pub const RESERVED_LABEL_PREFIXES: &[&str] = &[
    "forge.dev/",
    "app.kubernetes.io/",
    "ray.io/",
    "kueue.x-k8s.io/",
];

/// One pool of identical machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolSpec {
    /// Unique within the job (DNS-1123 label); the first pool is the primary: it hosts
    /// the Ray head.
    #[serde(default)]
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Number of machines (pods), at least 1.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1024))]
    pub nodes: u32,
    /// GPUs per machine, 0..=16.
    #[serde(default)]
    #[schemars(range(max = 16))]
    pub gpus_per_node: u32,
    /// GPU series (a node-label value, e.g. `h200`); policy may choose one if absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<String>,
}

/// Deadlines of a job, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deadlines {
    /// How long the job may take to start running (image pull, scheduling); defaults
    /// to `FORGE_KUBERAY_PRERUNNING_DEADLINE_S`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub pre_running_seconds: Option<i64>,
    /// How long the job may exist in total; none = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 2147483647))]
    pub active_seconds: Option<i64>,
}

/// A training job as submitted. The team is not part of it: it comes from the
/// caller's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "JobSpec")]
pub struct JobSpec {
    /// Human name of the job (DNS-1123 label, at most 63 characters).
    #[serde(default)]
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Training framework; selects the image `FORGE_IMAGE_<FRAMEWORK>` (e.g. `nemo-rl`).
    #[serde(default)]
    #[schemars(length(min = 1, max = 63))]
    pub framework: String,
    /// Command run by `ray job submit`, inside the capsule's working directory.
    #[serde(default)]
    #[schemars(length(min = 1, max = 16384))]
    pub entrypoint: String,
    /// The pools, primary first.
    #[serde(default)]
    #[schemars(length(min = 1, max = 7))]
    pub pools: Vec<PoolSpec>,
    /// Environment of the job (runtime env `env_vars`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Whether the job needs the shared storage claim.
    #[serde(default)]
    pub shared_storage: bool,
    /// Whether to mount the read-only corpus claim.
    #[serde(default)]
    pub corpus: bool,
    /// Deadlines.
    #[serde(default)]
    pub deadlines: Deadlines,
    /// Larger is more important.
    #[serde(default)]
    pub priority: i32,
    /// Kubernetes-style labels, visible to policy and set on the RayJob.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// Stable code of a field problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FieldCode {
    /// The document is not JSON/YAML.
    Syntax,
    /// Wrong JSON type.
    Type,
    /// A field that the spec does not have (e.g. `team`).
    UnknownField,
    /// Missing or empty.
    Required,
    /// Number or count out of range.
    Range,
    /// Malformed string (name, label, identifier).
    Format,
    /// Repeated where it must be unique.
    Duplicate,
    /// A name Forge, Ray or Kubernetes controls.
    Reserved,
    /// No image is configured for the framework.
    UnknownFramework,
    /// The cluster does not offer what the field asks for.
    Unavailable,
}

impl FieldCode {
    /// The code as it appears in API bodies.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Syntax => "syntax",
            Self::Type => "type",
            Self::UnknownField => "unknown-field",
            Self::Required => "required",
            Self::Range => "range",
            Self::Format => "format",
            Self::Duplicate => "duplicate",
            Self::Reserved => "reserved",
            Self::UnknownFramework => "unknown-framework",
            Self::Unavailable => "unavailable",
        }
    }
}

impl fmt::Display for FieldCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem with one field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{field}: {message} ({code})")]
pub struct FieldError {
    /// Path of the field, e.g. `pools[1].gpusPerNode` (empty for the whole document).
    pub field: String,
    /// Stable code.
    pub code: FieldCode,
    /// What is wrong and what to do.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, code: FieldCode, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

/// Every problem of a spec (never empty).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("invalid job spec: {} problem(s)", .0.len())]
pub struct SpecErrors(pub Vec<FieldError>);

/// Input format of a spec document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecFormat {
    /// JSON.
    Json,
    /// YAML (a superset of JSON).
    Yaml,
}

impl SpecFormat {
    /// The format for a media type (`application/yaml`, `application/x-yaml`,
    /// `text/yaml` → YAML; anything else → JSON).
    pub fn from_content_type(content_type: &str) -> Self {
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if mime.ends_with("yaml") || mime.ends_with("yml") {
            Self::Yaml
        } else {
            Self::Json
        }
    }
}

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
fn field_path(pointer: &str) -> String {
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

/// Structural problems of a document against the schema.
fn structural_errors(doc: &serde_json::Value) -> Vec<FieldError> {
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
                out.push(FieldError::new(path, FieldCode::Type, err.to_string()));
            }
            K::Minimum { .. }
            | K::Maximum { .. }
            | K::ExclusiveMinimum { .. }
            | K::ExclusiveMaximum { .. }
            | K::MinItems { .. }
            | K::MaxItems { .. }
            | K::MinProperties { .. }
            | K::MaxProperties { .. } => {
                out.push(FieldError::new(path, FieldCode::Range, err.to_string()));
            }
            _ => out.push(FieldError::new(path, FieldCode::Format, err.to_string())),
        }
    }
    out
}

/// Parses a JSON or YAML document into a generic value.
fn parse_document(body: &[u8], format: SpecFormat) -> Result<serde_json::Value, FieldError> {
    let syntax = |e: String| FieldError::new("", FieldCode::Syntax, e);
    match format {
        SpecFormat::Json => serde_json::from_slice(body).map_err(|e| syntax(e.to_string())),
        SpecFormat::Yaml => serde_yaml::from_slice(body).map_err(|e| syntax(e.to_string())),
    }
}

/// Parses a spec document and validates it against the configuration, reporting every
/// problem (structural and semantic) at once.
pub fn parse_and_validate(
    body: &[u8],
    format: SpecFormat,
    cfg: &Config,
) -> Result<JobSpec, SpecErrors> {
    let doc = parse_document(body, format).map_err(|e| SpecErrors(vec![e]))?;
    from_value_and_validate(doc, cfg)
}

/// Validates an already-parsed document (e.g. the `spec` member of a JSON request).
pub fn from_value_and_validate(
    doc: serde_json::Value,
    cfg: &Config,
) -> Result<JobSpec, SpecErrors> {
    let mut errors = structural_errors(&doc);
    let typed = serde_json::from_value::<JobSpec>(doc);
    if let Ok(spec) = &typed {
        errors.extend(spec.validate(cfg));
    }
    if errors.is_empty() {
        return typed
            .map_err(|e| SpecErrors(vec![FieldError::new("", FieldCode::Type, e.to_string())]));
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
    Err(SpecErrors(errors))
}

impl JobSpec {
    /// Semantic checks against the configuration; returns every problem.
    pub fn validate(&self, cfg: &Config) -> Vec<FieldError> {
        let mut out = Vec::new();
        let mut push = |field: String, code: FieldCode, message: String| {
            out.push(FieldError::new(field, code, message));
        };

        if self.name.is_empty() {
            push("name".into(), FieldCode::Required, "is required".into());
        } else if !names::is_dns1123_label(&self.name) {
            push(
                "name".into(),
                FieldCode::Format,
                "must be at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit".into(),
            );
        }

        if self.framework.is_empty() {
            push(
                "framework".into(),
                FieldCode::Required,
                "is required".into(),
            );
        } else if cfg.image_for(&self.framework).is_none() {
            let known: Vec<&str> = cfg.images.keys().map(String::as_str).collect();
            push(
                "framework".into(),
                FieldCode::UnknownFramework,
                format!(
                    "no image is configured for framework `{}` (known: {})",
                    self.framework,
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            );
        }

        if self.entrypoint.trim().is_empty() {
            push(
                "entrypoint".into(),
                FieldCode::Required,
                "is required".into(),
            );
        } else if self.entrypoint.len() > MAX_ENTRYPOINT_BYTES {
            push(
                "entrypoint".into(),
                FieldCode::Range,
                format!("is longer than {MAX_ENTRYPOINT_BYTES} bytes"),
            );
        }

        if self.pools.is_empty() {
            push(
                "pools".into(),
                FieldCode::Required,
                "at least one pool is required".into(),
            );
        } else if self.pools.len() > MAX_POOLS {
            push(
                "pools".into(),
                FieldCode::Range,
                format!("at most {MAX_POOLS} pools"),
            );
        }
        for (i, pool) in self.pools.iter().enumerate() {
            let at = |f: &str| format!("pools[{i}].{f}");
            if pool.name.is_empty() {
                push(at("name"), FieldCode::Required, "is required".into());
            } else if !names::is_dns1123_label(&pool.name) {
                push(
                    at("name"),
                    FieldCode::Format,
                    "must be a DNS-1123 label (lowercase letters, digits, '-')".into(),
                );
            } else if self.pools[..i].iter().any(|p| p.name == pool.name) {
                push(
                    at("name"),
                    FieldCode::Duplicate,
                    format!("pool name `{}` is used twice", pool.name),
                );
            }
            if pool.nodes < 1 || pool.nodes > MAX_NODES_PER_POOL {
                push(
                    at("nodes"),
                    FieldCode::Range,
                    format!("must be 1..={MAX_NODES_PER_POOL}"),
                );
            }
            if pool.gpus_per_node > MAX_GPUS_PER_NODE {
                push(
                    at("gpusPerNode"),
                    FieldCode::Range,
                    format!("must be 0..={MAX_GPUS_PER_NODE}"),
                );
            }
            if let Some(series) = &pool.series
                && (series.is_empty() || !names::is_label_value(series))
            {
                push(
                    at("series"),
                    FieldCode::Format,
                    "must be a non-empty Kubernetes label value".into(),
                );
            }
        }

        if self.env.len() > MAX_ENV {
            push(
                "env".into(),
                FieldCode::Range,
                format!("at most {MAX_ENV} variables"),
            );
        }
        for (key, value) in &self.env {
            let at = format!("env[{}]", serde_json::Value::String(key.clone()));
            if !names::is_c_identifier(key) {
                push(
                    at,
                    FieldCode::Format,
                    "must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)".into(),
                );
            } else if RESERVED_ENV_PREFIXES.iter().any(|p| key.starts_with(p))
                || RESERVED_ENV_NAMES.contains(&key.as_str())
            {
                push(
                    at,
                    FieldCode::Reserved,
                    "FORGE_*, RAY_*, CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES are set by the platform".into(),
                );
            } else if value.len() > MAX_ENV_VALUE_BYTES {
                push(
                    at,
                    FieldCode::Range,
                    format!("value is longer than {MAX_ENV_VALUE_BYTES} bytes"),
                );
            }
        }

        for (key, value) in &self.labels {
            let at = format!("labels[{}]", serde_json::Value::String(key.clone()));
            if !names::is_qualified_name(key) {
                push(
                    at,
                    FieldCode::Format,
                    "key is not a valid Kubernetes label key".into(),
                );
            } else if RESERVED_LABEL_PREFIXES.iter().any(|p| key.starts_with(p)) {
                push(
                    at,
                    FieldCode::Reserved,
                    format!(
                        "label keys under {} are reserved",
                        RESERVED_LABEL_PREFIXES.join(", ")
                    ),
                );
            } else if !names::is_label_value(value) {
                push(
                    at,
                    FieldCode::Format,
                    "value is not a valid Kubernetes label value".into(),
                );
            }
        }

        let int32 = i64::from(i32::MAX);
        for (name, value) in [
            ("preRunningSeconds", self.deadlines.pre_running_seconds),
            ("activeSeconds", self.deadlines.active_seconds),
        ] {
            if let Some(v) = value
                && !(1..=int32).contains(&v)
            {
                push(
                    format!("deadlines.{name}"),
                    FieldCode::Range,
                    format!("must be 1..={int32} seconds"),
                );
            }
        }

        if self.shared_storage && cfg.storage.pvc.is_none() {
            push(
                "sharedStorage".into(),
                FieldCode::Unavailable,
                "this gateway has no storage claim (FORGE_K8S_STORAGE_PVC)".into(),
            );
        }
        if self.corpus && cfg.storage.corpus_pvc.is_none() {
            push(
                "corpus".into(),
                FieldCode::Unavailable,
                "this gateway has no corpus claim (FORGE_K8S_CORPUS_PVC)".into(),
            );
        }
        out
    }

    /// The primary pool (hosts the Ray head). `None` only for an invalid spec.
    pub fn primary(&self) -> Option<&PoolSpec> {
        self.pools.first()
    }

    /// Total GPUs the job needs (all pools, all machines).
    pub fn total_gpus(&self) -> u64 {
        self.pools
            .iter()
            .map(|p| u64::from(p.nodes) * u64::from(p.gpus_per_node))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn cfg() -> Config {
        Config::from_env_map(HashMap::from([
            ("FORGE_IMAGE_NEMO_RL".to_string(), "nemo:1".to_string()),
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
            (
                "FORGE_K8S_STORAGE_PVC".to_string(),
                "starforge-storage".to_string(),
            ),
        ]))
        .expect("valid config")
    }

    const GOOD: &str = r#"{
        "name": "grpo-7b",
        "framework": "nemo-rl",
        "entrypoint": "python train.py",
        "pools": [
            {"name": "trainer", "nodes": 2, "gpusPerNode": 8, "series": "h200"},
            {"name": "rollout", "nodes": 1, "gpusPerNode": 4}
        ],
        "env": {"WANDB_MODE": "offline"},
        "sharedStorage": true,
        "deadlines": {"preRunningSeconds": 600},
        "priority": 5,
        "labels": {"project": "rl"}
    }"#;

    fn errors_of(json: &str) -> Vec<FieldError> {
        match parse_and_validate(json.as_bytes(), SpecFormat::Json, &cfg()) {
            Ok(s) => panic!("expected errors, got {s:?}"),
            Err(SpecErrors(e)) => e,
        }
    }

    fn has(errors: &[FieldError], field: &str, code: FieldCode) -> bool {
        errors.iter().any(|e| e.field == field && e.code == code)
    }

    fn patched(patch: impl FnOnce(&mut serde_json::Value)) -> String {
        let mut v: serde_json::Value = serde_json::from_str(GOOD).expect("json");
        patch(&mut v);
        v.to_string()
    }

    #[test]
    fn accepts_a_good_spec_in_json_and_yaml() {
        let spec = parse_and_validate(GOOD.as_bytes(), SpecFormat::Json, &cfg()).expect("valid");
        assert_eq!(spec.pools.len(), 2);
        assert_eq!(spec.primary().map(|p| p.name.as_str()), Some("trainer"));
        assert_eq!(spec.total_gpus(), 20);
        let yaml = "name: grpo-7b\nframework: nemo-rl\nentrypoint: python train.py\npools:\n  - name: trainer\n    nodes: 1\n    gpusPerNode: 8\n";
        let spec = parse_and_validate(yaml.as_bytes(), SpecFormat::Yaml, &cfg()).expect("valid");
        assert_eq!(spec.pools[0].gpus_per_node, 8);
        assert!(spec.env.is_empty());
        assert_eq!(spec.deadlines, Deadlines::default());
    }

    #[test]
    fn team_in_body_is_an_unknown_field() {
        let e = errors_of(&patched(|v| v["team"] = "other-team".into()));
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(has(&e, "team", FieldCode::UnknownField));
        assert!(e[0].message.contains("credentials"));
    }

    #[test]
    fn reports_every_problem_at_once_with_paths() {
        let e = errors_of(&patched(|v| {
            v["name"] = "Bad Name".into();
            v["framework"] = "megatron".into();
            v["pools"][1]["gpusPerNode"] = 17.into();
            v["pools"][1]["name"] = "trainer".into();
            v["env"]["RAY_ADDRESS"] = "x".into();
            v["env"]["1BAD"] = "x".into();
            v["labels"]["forge.dev/team"] = "x".into();
            v["deadlines"]["activeSeconds"] = 0.into();
        }));
        for (field, code) in [
            ("name", FieldCode::Format),
            ("framework", FieldCode::UnknownFramework),
            ("pools[1].gpusPerNode", FieldCode::Range),
            ("pools[1].name", FieldCode::Duplicate),
            ("env[\"RAY_ADDRESS\"]", FieldCode::Reserved),
            ("env[\"1BAD\"]", FieldCode::Format),
            ("labels[\"forge.dev/team\"]", FieldCode::Reserved),
            ("deadlines.activeSeconds", FieldCode::Range),
        ] {
            assert!(has(&e, field, code), "missing {field} {code}: {e:#?}");
        }
    }

    #[test]
    fn missing_fields_are_required_once() {
        let e = errors_of(r#"{"pools": [{"gpusPerNode": 1}]}"#);
        for field in [
            "name",
            "framework",
            "entrypoint",
            "pools[0].name",
            "pools[0].nodes",
        ] {
            let n = e.iter().filter(|x| x.field == field).count();
            assert_eq!(n, 1, "{field}: {e:#?}");
            assert!(has(&e, field, FieldCode::Required), "{field}: {e:#?}");
        }
    }

    #[test]
    fn empty_pools_and_zero_nodes() {
        let e = errors_of(&patched(|v| v["pools"] = serde_json::json!([])));
        assert!(
            has(&e, "pools", FieldCode::Required) || has(&e, "pools", FieldCode::Range),
            "{e:?}"
        );
        let e = errors_of(&patched(|v| v["pools"][0]["nodes"] = 0.into()));
        assert!(has(&e, "pools[0].nodes", FieldCode::Range), "{e:?}");
    }

    #[test]
    fn type_errors_and_unknown_nested_fields() {
        let e = errors_of(&patched(|v| {
            v["pools"][0]["nodes"] = "two".into();
            v["pools"][1]["gpu"] = 1.into();
            v["priority"] = "high".into();
        }));
        assert!(has(&e, "pools[0].nodes", FieldCode::Type), "{e:#?}");
        assert!(has(&e, "pools[1].gpu", FieldCode::UnknownField), "{e:#?}");
        assert!(has(&e, "priority", FieldCode::Type), "{e:#?}");
        let e = errors_of(&patched(|v| v["pools"][0]["nodes"] = (-1).into()));
        assert!(has(&e, "pools[0].nodes", FieldCode::Range), "{e:#?}");
    }

    #[test]
    fn syntax_errors() {
        let e = errors_of("{not json");
        assert_eq!(e[0].code, FieldCode::Syntax);
        let Err(SpecErrors(e)) = parse_and_validate(b"name: [", SpecFormat::Yaml, &cfg()) else {
            panic!("expected a syntax error");
        };
        assert_eq!(e[0].code, FieldCode::Syntax);
    }

    #[test]
    fn name_length_and_series_format() {
        let e = errors_of(&patched(|v| {
            v["name"] = "a".repeat(64).into();
            v["pools"][0]["series"] = "h200 sxm".into();
        }));
        assert!(
            has(&e, "name", FieldCode::Format) || has(&e, "name", FieldCode::Range),
            "{e:?}"
        );
        assert!(has(&e, "pools[0].series", FieldCode::Format), "{e:?}");
    }

    #[test]
    fn storage_not_offered() {
        let cfg = Config::from_env_map(HashMap::from([
            ("FORGE_IMAGE_NEMO_RL".to_string(), "nemo:1".to_string()),
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
        ]))
        .expect("valid config");
        let doc = patched(|v| v["corpus"] = true.into());
        let Err(SpecErrors(e)) = parse_and_validate(doc.as_bytes(), SpecFormat::Json, &cfg) else {
            panic!("expected errors");
        };
        assert!(has(&e, "sharedStorage", FieldCode::Unavailable), "{e:?}");
        assert!(has(&e, "corpus", FieldCode::Unavailable), "{e:?}");
    }

    #[test]
    fn reserved_env_names_and_bad_labels() {
        let e = errors_of(&patched(|v| {
            v["env"]["CUDA_VISIBLE_DEVICES"] = "0".into();
            v["env"]["FORGE_CAPSULE_URL"] = "x".into();
            v["labels"]["bad key!"] = "x".into();
            v["labels"]["ok"] = "-bad-value".into();
        }));
        assert!(has(
            &e,
            "env[\"CUDA_VISIBLE_DEVICES\"]",
            FieldCode::Reserved
        ));
        assert!(has(&e, "env[\"FORGE_CAPSULE_URL\"]", FieldCode::Reserved));
        assert!(has(&e, "labels[\"bad key!\"]", FieldCode::Format));
        assert!(has(&e, "labels[\"ok\"]", FieldCode::Format));
    }

    #[test]
    fn schema_is_exported_and_strict() {
        let schema = json_schema();
        assert_eq!(
            schema["additionalProperties"],
            serde_json::Value::Bool(false)
        );
        let required = schema["required"].as_array().expect("required list");
        for f in ["name", "framework", "entrypoint", "pools"] {
            assert!(required.contains(&f.into()), "{f} not required: {schema}");
        }
        assert!(schema["properties"]["pools"].is_object());
    }

    #[test]
    fn content_types() {
        assert_eq!(
            SpecFormat::from_content_type("application/yaml"),
            SpecFormat::Yaml
        );
        assert_eq!(
            SpecFormat::from_content_type("text/x-yaml; charset=utf-8"),
            SpecFormat::Yaml
        );
        assert_eq!(
            SpecFormat::from_content_type("application/json"),
            SpecFormat::Json
        );
    }

    #[test]
    fn field_paths() {
        assert_eq!(field_path("/pools/1/gpusPerNode"), "pools[1].gpusPerNode");
        assert_eq!(field_path(""), "");
        assert_eq!(field_path("/labels/a~1b"), "labels[\"a/b\"]");
    }
}
