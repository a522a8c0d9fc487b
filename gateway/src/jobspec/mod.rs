//! The job specification a team submits (JSON or YAML), its JSON Schema, and its
//! validation, which reports every problem at once, each with a field path
//! (`pools[1].gpusPerNode`) and a stable code.
//!
//! Validation runs in two layers, merged into one list:
//! 1. structural, against the generated JSON Schema (types, unknown fields — including
//!    `team`, which comes from authentication, never from the body — and missing
//!    fields), using the `jsonschema` crate so that every structural error is found;
//! 2. semantic ([`JobSpec::validate`]): names, ranges, duplicates, reserved keys,
//!    frameworks without a configured image, storage the cluster does not offer; and
//!    what depends on the submitting team ([`JobSpec::validate_for_team`]): only the
//!    team's own Secrets in `secretEnv`.
//!
//! `env` is for values that are not secret: they are stored with the job, packed
//! into the capsule and written into the RayJob. Credentials go in `secretEnv`, which
//! names a key of a Kubernetes Secret; the kubelet resolves it into the Ray
//! containers' environment, so the value never passes through Forge.

pub mod names;
mod parse;
mod published;
mod schema;
mod validate;

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use parse::{from_value_and_validate, parse_and_validate};
pub use published::{UNSTATED_RULES, published_schema};
pub use schema::json_schema;

/// The spec's bytes as a capsule carries them (`capsule/.forge/jobspec.json`): the
/// gateway packs these, and `POST /v1/admission/review` hands them to clients that
/// pack their own capsule, so both compute the same digest.
pub fn capsule_bytes(spec: &JobSpec) -> Vec<u8> {
    serde_json::to_vec_pretty(spec).expect("a JobSpec serializes")
}

/// Most GPUs a single machine may ask for.
pub const MAX_GPUS_PER_NODE: u32 = 16;
/// Most pools in one job (KubeRay worker groups; Kueue allows 7 + head).
pub const MAX_POOLS: usize = 7;
/// Most machines in one pool.
pub const MAX_NODES_PER_POOL: u32 = 1024;
/// Most environment variables in one job.
pub const MAX_ENV: usize = 256;
/// Most bytes of all environment names and values together: the runtime env is part
/// of the RayJob object, and Kubernetes caps an object's annotations at the same
/// 256 KiB (etcd refuses objects over 1.5 MiB).
pub const MAX_ENV_TOTAL_BYTES: usize = 256 * 1024;
/// Most labels on one job (Kubernetes has no count limit of its own; every label is
/// copied to the RayJob and its pods, and shown to every policy plugin).
pub const MAX_LABELS: usize = 64;
/// Longest entrypoint, in bytes.
pub const MAX_ENTRYPOINT_BYTES: usize = 16 * 1024;
/// Longest environment value, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;

/// Environment-variable prefixes a job may not set: Forge's own and Ray's (they
/// control the cluster the job runs in).
pub const RESERVED_ENV_PREFIXES: &[&str] = &["FORGE_", "RAY_"];
/// Environment variables a job may not set: Ray assigns GPUs to workers itself.
pub const RESERVED_ENV_NAMES: &[&str] = &["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"];
/// The Secrets a team may use in `secretEnv`: those in Forge's namespace whose name
/// starts with `<team>.` (e.g. `team-a.wandb`). A team name is a DNS-1123 label, which
/// has no `.`, so one team's prefix never matches another team's Secrets.
pub fn team_secret_prefix(team: &str) -> String {
    format!("{team}.")
}

/// Label-key prefixes owned by Forge, KubeRay and Kueue.
pub const RESERVED_LABEL_PREFIXES: &[&str] = &[
    "forge.dev/",
    "app.kubernetes.io/",
    "ray.io/",
    "kueue.x-k8s.io/",
];

/// Most CPUs a single machine may ask for.
pub const MAX_CPUS_PER_NODE: u32 = 1024;
/// Least memory a machine may ask for (the Ray head and workers need some).
pub const MIN_MEMORY_BYTES: u64 = 256 << 20;
/// Least Ray object store memory (Ray refuses less than 75 MiB).
pub const MIN_OBJECT_STORE_BYTES: u64 = 75 << 20;

/// One pool of identical machines.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// CPUs per machine (requests = limits, Ray `num-cpus`); defaults to
    /// `FORGE_K8S_CPUS_PER_NODE` for the pool's series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub cpus_per_node: Option<u32>,
    /// Memory per machine, a Kubernetes quantity such as `64Gi` (requests = limits);
    /// defaults to `FORGE_K8S_MEMORY_PER_NODE` for the pool's series.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_per_node: Option<String>,
    /// Ray object store per machine (it lives in `/dev/shm`), a quantity; defaults to
    /// `FORGE_K8S_OBJECT_STORE_MEMORY`, else 30% of the memory (at most the `/dev/shm`
    /// size). Must be less than the memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_store_memory: Option<String>,
}

impl PoolSpec {
    /// Memory per machine in bytes, if the pool names a valid quantity.
    pub fn memory_bytes(&self) -> Option<u64> {
        self.memory_per_node
            .as_deref()
            .and_then(crate::domain::quantity::bytes)
    }

    /// Object store per machine in bytes, if the pool names a valid quantity.
    pub fn object_store_bytes(&self) -> Option<u64> {
        self.object_store_memory
            .as_deref()
            .and_then(crate::domain::quantity::bytes)
    }
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
    /// How long the job has, once preempted (SIGTERM), to checkpoint and exit before
    /// its GPUs are taken; defaults to 60, at most `FORGE_PREEMPTION_MAX_GRACE_S`.
    /// (`checkpointGraceS` is accepted too.)
    #[serde(
        default,
        alias = "checkpointGraceS",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1, max = 86400))]
    pub checkpoint_grace_seconds: Option<i64>,
}

/// The grace a preempted job gets when its spec names none, in seconds.
pub const DEFAULT_CHECKPOINT_GRACE_S: i64 = 60;

impl Deadlines {
    /// The grace a preempted job gets, in seconds.
    pub fn checkpoint_grace_s(&self) -> i64 {
        self.checkpoint_grace_seconds
            .unwrap_or(DEFAULT_CHECKPOINT_GRACE_S)
    }
}

/// An environment value taken from a Kubernetes Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    /// The Secret, in Forge's namespace; its name must start with `<team>.` (your
    /// team's Secrets, created by the cluster's administrators).
    #[serde(default)]
    #[schemars(length(min = 1, max = 253))]
    pub secret: String,
    /// The key of the Secret's data.
    #[serde(default)]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A training job as submitted. The team is not part of it: it comes from the
/// caller's credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// Environment of the job (runtime env `env_vars`): at most 256 variables, 256 KiB
    /// of names and values in all. Not for secrets: these values are stored with the
    /// job, packed into the capsule and written into the RayJob.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 256))]
    pub env: BTreeMap<String, String>,
    /// Environment variables whose values come from Kubernetes Secrets of the team
    /// (`NAME: {secret, key}`). The values never pass through Forge: the kubelet puts
    /// them in the Ray containers' environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secret_env: BTreeMap<String, SecretRef>,
    /// Python packages Ray installs with pip in every Ray pod (runtime env `pip`), one
    /// requirements-file line each (`torch==2.4.0`, `--extra-index-url …`). The code's
    /// `requirements.txt` is added in front of them at submission. URLs with
    /// credentials are refused (the runtime env is readable in the RayJob).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 500))]
    pub pip: Vec<String>,
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
    /// Kubernetes-style labels, visible to policy and set on the RayJob: at most 64,
    /// keys `[prefix/]name` (prefix a DNS subdomain of at most 253 characters, name at
    /// most 63), values at most 63 characters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
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
    /// Something the submitting team may not use (another team's Secret).
    Forbidden,
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
            Self::Forbidden => "forbidden",
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
    pub(crate) fn new(
        field: impl Into<String>,
        code: FieldCode,
        message: impl Into<String>,
    ) -> Self {
        Self {
            field: field.into(),
            code,
            message: message.into(),
        }
    }
}

/// The problems of a spec (never empty): the first `FORGE_MAX_FIELD_ERRORS` of them,
/// sorted by field, and how many there were in all — so that a document built to
/// produce a million errors gets a small answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("invalid job spec: {total} problem(s)")]
pub struct SpecErrors {
    /// The problems listed.
    pub errors: Vec<FieldError>,
    /// How many problems there were in all (`errors.len()` or more).
    pub total: usize,
}

impl SpecErrors {
    /// A single problem.
    pub fn one(error: FieldError) -> Self {
        Self {
            errors: vec![error],
            total: 1,
        }
    }

    /// At most `max` (at least 1) of `errors`, counting them all.
    pub fn capped(mut errors: Vec<FieldError>, max: usize) -> Self {
        let total = errors.len();
        errors.truncate(max.max(1));
        Self { errors, total }
    }

    /// How many problems are counted but not listed.
    pub fn omitted(&self) -> usize {
        self.total.saturating_sub(self.errors.len())
    }
}

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

impl JobSpec {
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

/// 422 `invalid-spec`, every listed problem with its field path.
impl crate::answer::Answers for SpecErrors {
    fn answer(&self) -> crate::answer::Answer {
        crate::answer::Answer::new(
            http::StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-spec",
            format!("the job spec has {} problem(s)", self.total),
        )
        .details(serde_json::json!({
            "fields": self.errors,
            "total": self.total,
            "omitted": self.omitted(),
        }))
    }
}

#[cfg(test)]
mod tests;
