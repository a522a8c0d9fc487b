//! The semantic layer of spec validation ([`JobSpec::validate`]): names, ranges,
//! duplicates, reserved keys, frameworks without a configured image and storage the
//! cluster does not offer — one function per part of the spec, every problem reported
//! — and the team's part ([`JobSpec::validate_for_team`]): `secretEnv` may only name
//! the team's own Secrets.

use super::{
    FieldCode, FieldError, JobSpec, MAX_CPUS_PER_NODE, MAX_ENTRYPOINT_BYTES, MAX_ENV,
    MAX_ENV_TOTAL_BYTES, MAX_ENV_VALUE_BYTES, MAX_GPUS_PER_NODE, MAX_LABELS, MAX_NODES_PER_POOL,
    MAX_POOLS, MIN_MEMORY_BYTES, MIN_OBJECT_STORE_BYTES, PoolSpec, RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES, RESERVED_LABEL_PREFIXES, names, team_secret_prefix,
};
use crate::config::Config;

/// Collects problems.
#[derive(Default)]
struct Problems(Vec<FieldError>);

impl Problems {
    fn push(&mut self, field: impl Into<String>, code: FieldCode, message: impl Into<String>) {
        self.0.push(FieldError::new(field, code, message));
    }
}

/// The path of a map entry: `env["NAME"]`.
fn entry(map: &str, key: &str) -> String {
    format!("{map}[{}]", serde_json::Value::String(key.to_string()))
}

impl JobSpec {
    /// Semantic checks against the configuration; returns every problem.
    pub fn validate(&self, cfg: &Config) -> Vec<FieldError> {
        let mut p = Problems::default();
        self.check_name(&mut p);
        self.check_framework(cfg, &mut p);
        self.check_entrypoint(&mut p);
        self.check_pools(&mut p);
        self.check_env(&mut p);
        self.check_secret_env(&mut p);
        self.check_pip(&mut p);
        self.check_labels(&mut p);
        self.check_deadlines(cfg, &mut p);
        self.check_storage(cfg, &mut p);
        p.0
    }

    fn check_name(&self, p: &mut Problems) {
        if self.name.is_empty() {
            p.push("name", FieldCode::Required, "is required");
        } else if !names::is_dns1123_label(&self.name) {
            p.push(
                "name",
                FieldCode::Format,
                "must be at most 63 lowercase letters, digits and '-', starting and ending \
                 with a letter or digit",
            );
        }
    }

    fn check_framework(&self, cfg: &Config, p: &mut Problems) {
        if self.framework.is_empty() {
            p.push("framework", FieldCode::Required, "is required");
        } else if cfg.image_for(&self.framework).is_none() {
            let known: Vec<&str> = cfg.images.keys().map(String::as_str).collect();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            p.push(
                "framework",
                FieldCode::UnknownFramework,
                format!(
                    "no image is configured for framework `{}` (known: {known})",
                    self.framework
                ),
            );
        }
    }

    fn check_entrypoint(&self, p: &mut Problems) {
        if self.entrypoint.trim().is_empty() {
            p.push("entrypoint", FieldCode::Required, "is required");
        } else if self.entrypoint.len() > MAX_ENTRYPOINT_BYTES {
            p.push(
                "entrypoint",
                FieldCode::Range,
                format!("is longer than {MAX_ENTRYPOINT_BYTES} bytes"),
            );
        }
    }

    fn check_pools(&self, p: &mut Problems) {
        if self.pools.is_empty() {
            p.push(
                "pools",
                FieldCode::Required,
                "at least one pool is required",
            );
        } else if self.pools.len() > MAX_POOLS {
            p.push(
                "pools",
                FieldCode::Range,
                format!("at most {MAX_POOLS} pools"),
            );
        }
        for (i, pool) in self.pools.iter().enumerate() {
            check_pool(i, pool, &self.pools[..i], p);
        }
    }

    /// Semantic checks that depend on the submitting team (its name comes from
    /// authentication): every `secretEnv` Secret must be one of the team's.
    pub fn validate_for_team(&self, team: &str) -> Vec<FieldError> {
        let prefix = team_secret_prefix(team);
        self.secret_env
            .iter()
            .filter(|(_, r)| !r.secret.is_empty() && !r.secret.starts_with(&prefix))
            .map(|(name, r)| {
                FieldError::new(
                    format!("{}.secret", entry("secretEnv", name)),
                    FieldCode::Forbidden,
                    format!(
                        "Secret `{}` is not one of your team's: a team may use the Secrets \
                         whose name starts with `{prefix}`",
                        r.secret
                    ),
                )
            })
            .collect()
    }

    fn check_pip(&self, p: &mut Problems) {
        use forge_capsule::requirements::{MAX_REQUIREMENTS, check_requirement};
        if self.pip.len() > MAX_REQUIREMENTS {
            p.push(
                "pip",
                FieldCode::Range,
                format!("at most {MAX_REQUIREMENTS} entries"),
            );
        }
        for (i, entry) in self.pip.iter().enumerate() {
            let at = format!("pip[{i}]");
            if entry.trim().is_empty() {
                p.push(at, FieldCode::Required, "is empty");
            } else if let Err(e) = check_requirement(entry.trim()) {
                p.push(at, FieldCode::Format, e.to_string());
            }
        }
    }

    fn check_env(&self, p: &mut Problems) {
        if self.env.len() + self.secret_env.len() > MAX_ENV {
            p.push(
                "env",
                FieldCode::Range,
                format!("at most {MAX_ENV} variables (env and secretEnv together)"),
            );
        }
        let total: usize = self.env.iter().map(|(k, v)| k.len() + v.len()).sum();
        if total > MAX_ENV_TOTAL_BYTES {
            p.push(
                "env",
                FieldCode::Range,
                format!(
                    "names and values total {total} bytes; at most {MAX_ENV_TOTAL_BYTES} \
                     (the runtime env is part of the RayJob object)"
                ),
            );
        }
        // Entries past the count limit are not checked one by one: the count error
        // says what to fix, and a document cannot multiply the work.
        for (key, value) in self.env.iter().take(MAX_ENV) {
            let at = entry("env", key);
            if !env_name_ok(key, &at, p) {
                continue;
            }
            if value.len() > MAX_ENV_VALUE_BYTES {
                p.push(
                    at,
                    FieldCode::Range,
                    format!("value is longer than {MAX_ENV_VALUE_BYTES} bytes"),
                );
            }
        }
    }

    fn check_secret_env(&self, p: &mut Problems) {
        for (key, r) in &self.secret_env {
            let at = entry("secretEnv", key);
            if !env_name_ok(key, &at, p) {
                continue;
            }
            if self.env.contains_key(key) {
                p.push(
                    at.clone(),
                    FieldCode::Duplicate,
                    format!("`{key}` is set in `env` too; a variable comes from one place"),
                );
            }
            if r.secret.is_empty() {
                p.push(format!("{at}.secret"), FieldCode::Required, "is required");
            } else if !names::is_dns1123_subdomain(&r.secret) {
                p.push(
                    format!("{at}.secret"),
                    FieldCode::Format,
                    "must be a Secret name (a DNS-1123 subdomain)",
                );
            }
            if r.key.is_empty() {
                p.push(format!("{at}.key"), FieldCode::Required, "is required");
            } else if !names::is_config_map_key(&r.key) {
                p.push(
                    format!("{at}.key"),
                    FieldCode::Format,
                    "must be a Secret data key ([-._a-zA-Z0-9]+)",
                );
            }
        }
    }

    fn check_labels(&self, p: &mut Problems) {
        if self.labels.len() > MAX_LABELS {
            p.push(
                "labels",
                FieldCode::Range,
                format!("at most {MAX_LABELS} labels"),
            );
        }
        for (key, value) in self.labels.iter().take(MAX_LABELS) {
            let at = entry("labels", key);
            if !names::is_qualified_name(key) {
                p.push(
                    at,
                    FieldCode::Format,
                    "key is not a valid Kubernetes label key",
                );
            } else if RESERVED_LABEL_PREFIXES.iter().any(|r| key.starts_with(r)) {
                p.push(
                    at,
                    FieldCode::Reserved,
                    format!(
                        "label keys under {} are reserved",
                        RESERVED_LABEL_PREFIXES.join(", ")
                    ),
                );
            } else if !names::is_label_value(value) {
                p.push(
                    at,
                    FieldCode::Format,
                    "value is not a valid Kubernetes label value",
                );
            }
        }
    }

    fn check_deadlines(&self, cfg: &Config, p: &mut Problems) {
        let int32 = i64::from(i32::MAX);
        for (name, value) in [
            ("preRunningSeconds", self.deadlines.pre_running_seconds),
            ("activeSeconds", self.deadlines.active_seconds),
        ] {
            if let Some(v) = value
                && !(1..=int32).contains(&v)
            {
                p.push(
                    format!("deadlines.{name}"),
                    FieldCode::Range,
                    format!("must be 1..={int32} seconds"),
                );
            }
        }
        let max = cfg.gateway.preemption_max_grace_s;
        if let Some(v) = self.deadlines.checkpoint_grace_seconds
            && !(1..=i64::try_from(max).unwrap_or(i64::MAX)).contains(&v)
        {
            p.push(
                "deadlines.checkpointGraceSeconds",
                FieldCode::Range,
                format!("must be 1..={max} seconds (FORGE_PREEMPTION_MAX_GRACE_S)"),
            );
        }
    }

    fn check_storage(&self, cfg: &Config, p: &mut Problems) {
        if self.shared_storage && cfg.storage.pvc.is_none() {
            p.push(
                "sharedStorage",
                FieldCode::Unavailable,
                "this gateway has no storage claim (FORGE_K8S_STORAGE_PVC)",
            );
        }
        if self.corpus && cfg.storage.corpus_pvc.is_none() {
            p.push(
                "corpus",
                FieldCode::Unavailable,
                "this gateway has no corpus claim (FORGE_K8S_CORPUS_PVC)",
            );
        }
    }
}

/// Checks an environment variable name (of `env` or `secretEnv`); false when it is
/// not usable (the problem is recorded).
fn env_name_ok(key: &str, at: &str, p: &mut Problems) -> bool {
    if !names::is_c_identifier(key) {
        p.push(
            at,
            FieldCode::Format,
            "must be a C identifier ([A-Za-z_][A-Za-z0-9_]*)",
        );
        false
    } else if RESERVED_ENV_PREFIXES.iter().any(|r| key.starts_with(r))
        || RESERVED_ENV_NAMES.contains(&key)
    {
        p.push(
            at,
            FieldCode::Reserved,
            "FORGE_*, RAY_*, CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES are set by the \
             platform",
        );
        false
    } else {
        true
    }
}

/// Checks pool `i` (`earlier` are the pools before it, for duplicate names).
fn check_pool(i: usize, pool: &PoolSpec, earlier: &[PoolSpec], p: &mut Problems) {
    let at = |f: &str| format!("pools[{i}].{f}");
    if pool.name.is_empty() {
        p.push(at("name"), FieldCode::Required, "is required");
    } else if !names::is_dns1123_label(&pool.name) {
        p.push(
            at("name"),
            FieldCode::Format,
            "must be a DNS-1123 label (lowercase letters, digits, '-')",
        );
    } else if earlier.iter().any(|e| e.name == pool.name) {
        p.push(
            at("name"),
            FieldCode::Duplicate,
            format!("pool name `{}` is used twice", pool.name),
        );
    }
    if pool.nodes < 1 || pool.nodes > MAX_NODES_PER_POOL {
        p.push(
            at("nodes"),
            FieldCode::Range,
            format!("must be 1..={MAX_NODES_PER_POOL}"),
        );
    }
    if pool.gpus_per_node > MAX_GPUS_PER_NODE {
        p.push(
            at("gpusPerNode"),
            FieldCode::Range,
            format!("must be 0..={MAX_GPUS_PER_NODE}"),
        );
    }
    if let Some(series) = &pool.series
        && (series.is_empty() || !names::is_label_value(series))
    {
        p.push(
            at("series"),
            FieldCode::Format,
            "must be a non-empty Kubernetes label value",
        );
    }
    check_pool_resources(pool, &at, p);
}

/// CPU, memory and object store of pool `i` (`at` makes its field paths).
fn check_pool_resources(pool: &PoolSpec, at: &dyn Fn(&str) -> String, p: &mut Problems) {
    if let Some(cpus) = pool.cpus_per_node
        && !(1..=MAX_CPUS_PER_NODE).contains(&cpus)
    {
        p.push(
            at("cpusPerNode"),
            FieldCode::Range,
            format!("must be 1..={MAX_CPUS_PER_NODE}"),
        );
    }
    let quantity = |field: &str, value: &Option<String>, min: u64, p: &mut Problems| {
        let text = value.as_deref()?;
        match crate::domain::quantity::bytes(text) {
            Some(b) if names::is_positive_quantity(text) && b >= min => Some(b),
            Some(_) if names::is_positive_quantity(text) => {
                p.push(
                    at(field),
                    FieldCode::Range,
                    format!("must be at least {} MiB", min >> 20),
                );
                None
            }
            _ => {
                p.push(
                    at(field),
                    FieldCode::Format,
                    "must be a Kubernetes quantity such as 64Gi",
                );
                None
            }
        }
    };
    let memory = quantity("memoryPerNode", &pool.memory_per_node, MIN_MEMORY_BYTES, p);
    let store = quantity(
        "objectStoreMemory",
        &pool.object_store_memory,
        MIN_OBJECT_STORE_BYTES,
        p,
    );
    if let (Some(m), Some(s)) = (memory, store)
        && s >= m
    {
        p.push(
            at("objectStoreMemory"),
            FieldCode::Range,
            "must be less than memoryPerNode (the object store is part of the memory)",
        );
    }
}
