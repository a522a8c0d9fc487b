//! Gateway configuration: one typed [`Config`] built from `FORGE_*` environment
//! variables (plus an optional `FORGE_CONFIG_FILE`, TOML or YAML; the environment wins),
//! validated at start-up so that every problem is reported at once, each naming the
//! variable and why.
//!
//! The config file is a flat map of the same variable names to scalar values, e.g.
//!
//! ```toml
//! FORGE_K8S_NAMESPACE = "starforge"
//! FORGE_KUBERAY_TTL_SECONDS = 600
//! FORGE_IMAGE_NEMO_RL = "registry.internal/starforge/nemo-rl:v0.7.0"
//! ```
//!
//! Unknown keys in the file are rejected (typo protection); unknown `FORGE_*`
//! environment variables are ignored (other Forge components read their own).
//!
//! Secrets (`FORGE_K8S_TOKEN`, `FORGE_S3_ACCESS_KEY`, `FORGE_S3_SECRET_KEY`) are held in
//! [`Secret`], whose `Debug` is redacted, and are never echoed in errors.
//!
//! # Variables
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `FORGE_CONFIG_FILE` | — | optional TOML (`.toml`) or YAML (`.yaml`/`.yml`) file with any of these variables; the environment wins |
//! | `FORGE_DEFAULT_FLEET_KIND` | `kuberay` | fleet jobs run on: `kuberay` (RayJobs) or `local` (no cluster) |
//! | `FORGE_IMAGE_<FRAMEWORK>` | — | container image of a framework; `FORGE_IMAGE_NEMO_RL` serves framework `nemo-rl`. A job's framework must have one |
//! | `FORGE_NEMO_RL_DIR` | — | absolute path of NeMo-RL inside its image |
//! | `FORGE_K8S_API_SERVER` | — (kubeconfig / in-cluster) | Kubernetes API server URL (`https://…`) |
//! | `FORGE_K8S_TOKEN` | — | ServiceAccount bearer token (secret); needs `FORGE_K8S_API_SERVER` |
//! | `FORGE_K8S_NAMESPACE` | `starforge` | namespace of every object Forge creates |
//! | `FORGE_K8S_GPU_NODE_LABEL` | `starforge/gpu-series` | node label key naming a node's GPU series (capacity and nodeSelector) |
//! | `FORGE_K8S_SHM_SIZE` | `64Gi` | size of the `/dev/shm` memory emptyDir (Kubernetes quantity) |
//! | `FORGE_K8S_GPU_PASSTHROUGH` | `1` | `0` = pods request no `nvidia.com/gpu` (Ray logical GPUs only; GPU-less test clusters) |
//! | `FORGE_STORAGE_ROOT` | `/starforge` | the one storage root (absolute path) |
//! | `FORGE_K8S_STORAGE_PVC` | — | claim behind the storage root; mounted at the root (or `FORGE_K8S_STORAGE_MOUNT`) |
//! | `FORGE_K8S_STORAGE_SHARED` | `true` | `false` if the claim is ReadWriteOnce: multi-node jobs are then rejected |
//! | `FORGE_K8S_STORAGE_MOUNT` | — | mount path when pods cannot mount at the root; needs `FORGE_K8S_STORAGE_PVC` |
//! | `FORGE_K8S_CORPUS_PVC` | — | optional read-only corpus claim (mounted at `<mount>/corpus` for jobs asking for it) |
//! | `FORGE_KUBERAY_RAY_VERSION` | — (required for `kuberay`) | `rayVersion` of every RayJob, e.g. `2.55.1` |
//! | `FORGE_KUBERAY_TTL_SECONDS` | `600` | `ttlSecondsAfterFinished`: GC fallback if active cleanup fails (0..=2147483647) |
//! | `FORGE_KUBERAY_PRERUNNING_DEADLINE_S` | `1800` | default `preRunningDeadlineSeconds` (> 0) |
//! | `FORGE_S3_ENDPOINT` | — | object storage URL; all four `FORGE_S3_*` or none |
//! | `FORGE_S3_BUCKET` | — | bucket for capsules |
//! | `FORGE_S3_ACCESS_KEY` | — | access key (secret) |
//! | `FORGE_S3_SECRET_KEY` | — | secret key (secret) |
//! | `FORGE_LISTEN` | `127.0.0.1:8080` | HTTP listen address |
//! | `FORGE_DATA_DIR` | `./forge-data` | data directory (SQLite job store, capsules in dev mode) |
//! | `FORGE_TOKENS_FILE` | `<FORGE_DATA_DIR>/tokens.yaml` | bearer-token file (hashed tokens → team, role) |
//! | `FORGE_POLICY_DEADLINE_MS` | `50` | wall-clock deadline of one policy plugin call (> 0) |
//! | `FORGE_POLICY_MEMORY_MIB` | `32` | memory cap of one plugin instance (> 0) |
//! | `FORGE_POLICY_CONCURRENCY` | number of CPUs | concurrent policy evaluations (> 0) |
//! | `FORGE_POLICY_SYNC_MS` | `1000` | how often a gateway polls the store for policy changes made by other replicas (> 0) |
//! | `FORGE_PLUGIN_MAX_KIB` | `4096` | largest policy plugin component accepted (1..=16384) |
//! | `FORGE_TEAM_PLUGIN_MAX_COUNT` | `20` | plugins (versions) one team may register (> 0) |
//! | `FORGE_TEAM_PLUGIN_MAX_MIB` | `64` | total plugin bytes one team may register (≥ one plugin) |
//! | `FORGE_MAX_BODY_MIB` | `256` | maximum request body (spec + code archive) (> 0) |
//! | `FORGE_CAPSULE_INIT_IMAGE` | `busybox:1.36` | image of the `forge-capsule-fetch` init container (needs `sh`, `wget`, `sha256sum`) |
//! | `FORGE_PUBLIC_URL` | — | external base URL of the gateway (`http(s)://…`), used in capsule URLs |

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::jobspec::names;

/// A secret string: its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where jobs run by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetKind {
    /// One ephemeral RayJob per training job (production).
    Kuberay,
    /// No cluster (development / embedded mode).
    Local,
}

/// Kubernetes settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sConfig {
    /// `FORGE_K8S_API_SERVER`; `None` = kubeconfig or in-cluster config.
    pub api_server: Option<String>,
    /// `FORGE_K8S_TOKEN`.
    pub token: Option<Secret>,
    /// `FORGE_K8S_NAMESPACE`.
    pub namespace: String,
    /// `FORGE_K8S_GPU_NODE_LABEL`.
    pub gpu_node_label: String,
    /// `FORGE_K8S_SHM_SIZE` (a Kubernetes quantity).
    pub shm_size: String,
    /// `FORGE_K8S_GPU_PASSTHROUGH` (false = no `nvidia.com/gpu` requests).
    pub gpu_passthrough: bool,
}

/// Shared storage settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// `FORGE_STORAGE_ROOT`.
    pub root: String,
    /// `FORGE_K8S_STORAGE_PVC`.
    pub pvc: Option<String>,
    /// `FORGE_K8S_STORAGE_SHARED` (RWX when true).
    pub shared: bool,
    /// `FORGE_K8S_CORPUS_PVC`.
    pub corpus_pvc: Option<String>,
    /// `FORGE_K8S_STORAGE_MOUNT`.
    pub mount: Option<String>,
}

impl StorageConfig {
    /// Where pods mount the storage claim: `FORGE_K8S_STORAGE_MOUNT` or the root.
    pub fn mount_path(&self) -> &str {
        self.mount.as_deref().unwrap_or(&self.root)
    }

    /// Where pods mount the read-only corpus claim.
    pub fn corpus_mount_path(&self) -> String {
        format!("{}/corpus", self.mount_path().trim_end_matches('/'))
    }
}

/// KubeRay settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeRayConfig {
    /// `FORGE_KUBERAY_RAY_VERSION`.
    pub ray_version: Option<String>,
    /// `FORGE_KUBERAY_TTL_SECONDS`.
    pub ttl_seconds: i32,
    /// `FORGE_KUBERAY_PRERUNNING_DEADLINE_S`.
    pub prerunning_deadline_s: i32,
}

/// Object storage settings (all or nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// `FORGE_S3_ENDPOINT`.
    pub endpoint: String,
    /// `FORGE_S3_BUCKET`.
    pub bucket: String,
    /// `FORGE_S3_ACCESS_KEY`.
    pub access_key: Secret,
    /// `FORGE_S3_SECRET_KEY`.
    pub secret_key: Secret,
}

/// The gateway's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// `FORGE_LISTEN`.
    pub listen: SocketAddr,
    /// `FORGE_DATA_DIR`.
    pub data_dir: PathBuf,
    /// `FORGE_TOKENS_FILE` as given.
    pub tokens_file: Option<PathBuf>,
    /// `FORGE_POLICY_DEADLINE_MS`.
    pub policy_deadline_ms: u64,
    /// `FORGE_POLICY_MEMORY_MIB`.
    pub policy_memory_mib: u64,
    /// `FORGE_POLICY_CONCURRENCY`.
    pub policy_concurrency: usize,
    /// `FORGE_POLICY_SYNC_MS`.
    pub policy_sync_ms: u64,
    /// `FORGE_PLUGIN_MAX_KIB`.
    pub plugin_max_kib: u64,
    /// `FORGE_TEAM_PLUGIN_MAX_COUNT`.
    pub team_plugin_max_count: u64,
    /// `FORGE_TEAM_PLUGIN_MAX_MIB`.
    pub team_plugin_max_mib: u64,
    /// `FORGE_MAX_BODY_MIB`.
    pub max_body_mib: u64,
    /// `FORGE_CAPSULE_INIT_IMAGE`.
    pub capsule_init_image: String,
    /// `FORGE_PUBLIC_URL`.
    pub public_url: Option<String>,
}

impl GatewayConfig {
    /// The tokens file: `FORGE_TOKENS_FILE` or `<data dir>/tokens.yaml`.
    pub fn tokens_path(&self) -> PathBuf {
        self.tokens_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("tokens.yaml"))
    }

    /// The SQLite job store file inside the data directory.
    pub fn store_path(&self) -> PathBuf {
        self.data_dir.join("forge.sqlite3")
    }

    /// `FORGE_MAX_BODY_MIB` in bytes.
    pub fn max_body_bytes(&self) -> usize {
        usize::try_from(self.max_body_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }
}

/// The whole gateway configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FORGE_DEFAULT_FLEET_KIND`.
    pub fleet_kind: FleetKind,
    /// Framework name (`nemo-rl`) → image, from `FORGE_IMAGE_<FRAMEWORK>`.
    pub images: BTreeMap<String, String>,
    /// `FORGE_NEMO_RL_DIR`.
    pub nemo_rl_dir: Option<String>,
    /// Kubernetes.
    pub k8s: K8sConfig,
    /// Storage.
    pub storage: StorageConfig,
    /// KubeRay.
    pub kuberay: KubeRayConfig,
    /// Object storage, when configured.
    pub s3: Option<S3Config>,
    /// Gateway.
    pub gateway: GatewayConfig,
}

/// One configuration problem, naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The value cannot be used.
    #[error("{var}: {reason}")]
    Invalid {
        /// The variable.
        var: String,
        /// Why (never contains a secret value).
        reason: String,
    },
    /// A required variable is missing.
    #[error("{var}: required {reason}")]
    Missing {
        /// The variable.
        var: String,
        /// When it is required.
        reason: String,
    },
    /// The variable only makes sense together with another one.
    #[error("{var}: set without {requires} ({reason})")]
    Requires {
        /// The variable that is set.
        var: String,
        /// The variable that is missing.
        requires: String,
        /// Why they go together.
        reason: String,
    },
    /// Only part of a group of variables is set.
    #[error("{group}: partial configuration, missing {}", missing.join(", "))]
    Partial {
        /// The group, e.g. `FORGE_S3_*`.
        group: String,
        /// The missing members.
        missing: Vec<String>,
    },
    /// The config file cannot be read or parsed.
    #[error("FORGE_CONFIG_FILE ({path}): {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The config file has a key that is not a Forge variable.
    #[error("FORGE_CONFIG_FILE ({path}): unknown key {key}")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
    },
}

impl ConfigError {
    /// The variable (or group) the problem is about.
    pub fn var(&self) -> &str {
        match self {
            Self::Invalid { var, .. } | Self::Missing { var, .. } | Self::Requires { var, .. } => {
                var
            }
            Self::Partial { group, .. } => group,
            Self::File { .. } | Self::UnknownKey { .. } => "FORGE_CONFIG_FILE",
        }
    }
}

/// Every problem found while loading the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration ({} problem(s)):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Every variable this module reads (besides `FORGE_IMAGE_*`).
pub const KNOWN_VARS: &[&str] = &[
    "FORGE_CONFIG_FILE",
    "FORGE_DEFAULT_FLEET_KIND",
    "FORGE_NEMO_RL_DIR",
    "FORGE_K8S_API_SERVER",
    "FORGE_K8S_TOKEN",
    "FORGE_K8S_NAMESPACE",
    "FORGE_K8S_GPU_NODE_LABEL",
    "FORGE_K8S_SHM_SIZE",
    "FORGE_K8S_GPU_PASSTHROUGH",
    "FORGE_STORAGE_ROOT",
    "FORGE_K8S_STORAGE_PVC",
    "FORGE_K8S_STORAGE_SHARED",
    "FORGE_K8S_CORPUS_PVC",
    "FORGE_K8S_STORAGE_MOUNT",
    "FORGE_KUBERAY_RAY_VERSION",
    "FORGE_KUBERAY_TTL_SECONDS",
    "FORGE_KUBERAY_PRERUNNING_DEADLINE_S",
    "FORGE_S3_ENDPOINT",
    "FORGE_S3_BUCKET",
    "FORGE_S3_ACCESS_KEY",
    "FORGE_S3_SECRET_KEY",
    "FORGE_LISTEN",
    "FORGE_DATA_DIR",
    "FORGE_TOKENS_FILE",
    "FORGE_POLICY_DEADLINE_MS",
    "FORGE_POLICY_MEMORY_MIB",
    "FORGE_POLICY_CONCURRENCY",
    "FORGE_POLICY_SYNC_MS",
    "FORGE_PLUGIN_MAX_KIB",
    "FORGE_TEAM_PLUGIN_MAX_COUNT",
    "FORGE_TEAM_PLUGIN_MAX_MIB",
    "FORGE_MAX_BODY_MIB",
    "FORGE_CAPSULE_INIT_IMAGE",
    "FORGE_PUBLIC_URL",
];

const IMAGE_PREFIX: &str = "FORGE_IMAGE_";

/// Collects values and problems while parsing.
struct Reader<'a> {
    vars: &'a HashMap<String, String>,
    errors: Vec<ConfigError>,
}

impl Reader<'_> {
    /// A set, non-blank value (trimmed).
    fn get(&self, var: &str) -> Option<String> {
        self.vars
            .get(var)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    fn invalid(&mut self, var: &str, reason: impl Into<String>) {
        self.errors.push(ConfigError::Invalid {
            var: var.to_string(),
            reason: reason.into(),
        });
    }

    fn string(&self, var: &str, default: &str) -> String {
        self.get(var).unwrap_or_else(|| default.to_string())
    }

    fn boolean(&mut self, var: &str, default: bool) -> bool {
        match self.get(var).map(|v| v.to_ascii_lowercase()).as_deref() {
            None => default,
            Some("1" | "true" | "yes" | "on") => true,
            Some("0" | "false" | "no" | "off") => false,
            Some(other) => {
                let reason = format!("`{other}` is not a boolean (use 1/0 or true/false)");
                self.invalid(var, reason);
                default
            }
        }
    }

    /// An integer in `min..=max`; on error records it and returns the default.
    fn integer(&mut self, var: &str, default: i64, min: i64, max: i64) -> i64 {
        let Some(raw) = self.get(var) else {
            return default;
        };
        match raw.parse::<i64>() {
            Ok(v) if (min..=max).contains(&v) => v,
            Ok(v) => {
                self.invalid(var, format!("{v} is out of range {min}..={max}"));
                default
            }
            Err(_) => {
                self.invalid(var, format!("`{raw}` is not an integer"));
                default
            }
        }
    }

    fn url(&mut self, var: &str) -> Option<String> {
        let v = self.get(var)?;
        let rest = v
            .strip_prefix("https://")
            .or_else(|| v.strip_prefix("http://"));
        match rest {
            Some(host) if !host.is_empty() && !host.starts_with('/') && !host.contains(' ') => {
                Some(v)
            }
            _ => {
                self.invalid(var, format!("`{v}` is not an http(s) URL"));
                None
            }
        }
    }

    fn absolute_path(&mut self, var: &str, default: Option<&str>) -> Option<String> {
        let v = self.get(var).or_else(|| default.map(str::to_string))?;
        if v.starts_with('/') {
            let trimmed = v.trim_end_matches('/');
            Some(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
        } else {
            self.invalid(var, format!("`{v}` is not an absolute path"));
            None
        }
    }

    fn claim_name(&mut self, var: &str) -> Option<String> {
        let v = self.get(var)?;
        if names::is_dns1123_subdomain(&v) {
            Some(v)
        } else {
            self.invalid(
                var,
                format!("`{v}` is not a valid PersistentVolumeClaim name (DNS-1123 subdomain)"),
            );
            None
        }
    }
}

/// The framework served by an image variable: `FORGE_IMAGE_NEMO_RL` → `nemo-rl`.
pub fn framework_of_image_var(var: &str) -> Option<String> {
    var.strip_prefix(IMAGE_PREFIX)
        .map(|f| f.to_ascii_lowercase().replace('_', "-"))
}

/// Default values for the embedded `dev` mode, to be layered under the environment
/// (the environment wins): a local fleet and a Ray version, so that an empty
/// environment yields a valid config.
pub fn dev_defaults() -> HashMap<String, String> {
    HashMap::from([
        ("FORGE_DEFAULT_FLEET_KIND".to_string(), "local".to_string()),
        (
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        ),
    ])
}

/// Reads the optional config file into a flat map of variables.
fn read_file(path: &Path) -> Result<HashMap<String, String>, Vec<ConfigError>> {
    let shown = path.display().to_string();
    let file_err = |reason: String| {
        vec![ConfigError::File {
            path: shown.clone(),
            reason,
        }]
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let table: BTreeMap<String, serde_json::Value> = match ext {
        "toml" => toml::from_str(&text).map_err(|e| file_err(e.to_string()))?,
        "yaml" | "yml" => serde_yaml::from_str(&text).map_err(|e| file_err(e.to_string()))?,
        _ => {
            return Err(file_err(
                "unknown format: the name must end in .toml, .yaml or .yml".to_string(),
            ));
        }
    };
    let mut out = HashMap::new();
    let mut errors = Vec::new();
    for (key, value) in table {
        if !KNOWN_VARS.contains(&key.as_str()) && !key.starts_with(IMAGE_PREFIX) {
            errors.push(ConfigError::UnknownKey {
                path: shown.clone(),
                key,
            });
            continue;
        }
        let text = match value {
            serde_json::Value::String(s) => s,
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::Bool(b) => b.to_string(),
            _ => {
                errors.push(ConfigError::Invalid {
                    var: key,
                    reason: format!("in {shown}: must be a string, number or boolean"),
                });
                continue;
            }
        };
        out.insert(key, text);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

impl Config {
    /// Loads from the process environment (and `FORGE_CONFIG_FILE`).
    pub fn from_env() -> Result<Self, ConfigErrors> {
        Self::from_env_map(std::env::vars().collect())
    }

    /// Loads from a variable map (and `FORGE_CONFIG_FILE` if the map names one); the
    /// map wins over the file. Every problem is reported at once.
    pub fn from_env_map(env: HashMap<String, String>) -> Result<Self, ConfigErrors> {
        let mut merged = HashMap::new();
        let mut errors = Vec::new();
        if let Some(file) = env
            .get("FORGE_CONFIG_FILE")
            .filter(|f| !f.trim().is_empty())
        {
            match read_file(Path::new(file.trim())) {
                Ok(vars) => merged.extend(vars),
                Err(mut e) => errors.append(&mut e),
            }
        }
        merged.extend(env);
        let mut reader = Reader {
            vars: &merged,
            errors,
        };
        let config = Self::parse(&mut reader);
        let mut errors = reader.errors;
        errors.extend(config.validate());
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors(errors))
        }
    }

    fn parse(r: &mut Reader<'_>) -> Self {
        let fleet_kind = match r.get("FORGE_DEFAULT_FLEET_KIND").as_deref() {
            None | Some("kuberay") => FleetKind::Kuberay,
            Some("local") => FleetKind::Local,
            Some(other) => {
                let reason = format!("`{other}` is not a fleet kind (kuberay or local)");
                r.invalid("FORGE_DEFAULT_FLEET_KIND", reason);
                FleetKind::Kuberay
            }
        };

        let mut images = BTreeMap::new();
        let mut image_vars: Vec<&String> = r
            .vars
            .keys()
            .filter(|k| k.starts_with(IMAGE_PREFIX))
            .collect();
        image_vars.sort();
        for var in image_vars {
            let framework = framework_of_image_var(var).unwrap_or_default();
            let Some(image) = r.get(var) else {
                r.invalid(var, "empty image reference");
                continue;
            };
            if !names::is_dns1123_label(&framework) {
                r.invalid(
                    var,
                    format!("framework name `{framework}` must be lowercase letters, digits and -"),
                );
            } else if image.chars().any(char::is_whitespace) {
                r.invalid(var, "image reference contains whitespace");
            } else {
                images.insert(framework, image);
            }
        }

        let nemo_rl_dir = r.absolute_path("FORGE_NEMO_RL_DIR", None);

        let api_server = r.url("FORGE_K8S_API_SERVER");
        let token = r.get("FORGE_K8S_TOKEN").map(Secret::new);
        let k8s = K8sConfig {
            api_server,
            token,
            namespace: r.string("FORGE_K8S_NAMESPACE", "starforge"),
            gpu_node_label: r.string("FORGE_K8S_GPU_NODE_LABEL", "starforge/gpu-series"),
            shm_size: r.string("FORGE_K8S_SHM_SIZE", "64Gi"),
            gpu_passthrough: r.boolean("FORGE_K8S_GPU_PASSTHROUGH", true),
        };

        let storage = StorageConfig {
            root: r
                .absolute_path("FORGE_STORAGE_ROOT", Some("/starforge"))
                .unwrap_or_else(|| "/starforge".to_string()),
            pvc: r.claim_name("FORGE_K8S_STORAGE_PVC"),
            shared: r.boolean("FORGE_K8S_STORAGE_SHARED", true),
            corpus_pvc: r.claim_name("FORGE_K8S_CORPUS_PVC"),
            mount: r.absolute_path("FORGE_K8S_STORAGE_MOUNT", None),
        };

        let int32 = i64::from(i32::MAX);
        let kuberay = KubeRayConfig {
            ray_version: r.get("FORGE_KUBERAY_RAY_VERSION"),
            ttl_seconds: i32::try_from(r.integer("FORGE_KUBERAY_TTL_SECONDS", 600, 0, int32))
                .unwrap_or(600),
            prerunning_deadline_s: i32::try_from(r.integer(
                "FORGE_KUBERAY_PRERUNNING_DEADLINE_S",
                1800,
                1,
                int32,
            ))
            .unwrap_or(1800),
        };

        let s3 = Self::parse_s3(r);

        let listen = match r.get("FORGE_LISTEN") {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(v) => v.parse().unwrap_or_else(|_| {
                r.invalid(
                    "FORGE_LISTEN",
                    format!("`{v}` is not an address:port (e.g. 0.0.0.0:8080)"),
                );
                SocketAddr::from(([127, 0, 0, 1], 8080))
            }),
        };
        let cpus = std::thread::available_parallelism().map_or(2, std::num::NonZero::get);
        let gateway = GatewayConfig {
            listen,
            data_dir: PathBuf::from(r.string("FORGE_DATA_DIR", "./forge-data")),
            tokens_file: r.get("FORGE_TOKENS_FILE").map(PathBuf::from),
            policy_deadline_ms: r.integer("FORGE_POLICY_DEADLINE_MS", 50, 1, 600_000) as u64,
            policy_memory_mib: r.integer("FORGE_POLICY_MEMORY_MIB", 32, 1, 65_536) as u64,
            policy_concurrency: r.integer("FORGE_POLICY_CONCURRENCY", cpus as i64, 1, 4096)
                as usize,
            policy_sync_ms: r.integer("FORGE_POLICY_SYNC_MS", 1000, 1, 3_600_000) as u64,
            plugin_max_kib: r.integer("FORGE_PLUGIN_MAX_KIB", 4096, 1, 16_384) as u64,
            team_plugin_max_count: r.integer("FORGE_TEAM_PLUGIN_MAX_COUNT", 20, 1, 10_000) as u64,
            team_plugin_max_mib: r.integer("FORGE_TEAM_PLUGIN_MAX_MIB", 64, 1, 65_536) as u64,
            max_body_mib: r.integer("FORGE_MAX_BODY_MIB", 256, 1, 1_048_576) as u64,
            capsule_init_image: r.string("FORGE_CAPSULE_INIT_IMAGE", "busybox:1.36"),
            public_url: r.url("FORGE_PUBLIC_URL"),
        };

        Self {
            fleet_kind,
            images,
            nemo_rl_dir,
            k8s,
            storage,
            kuberay,
            s3,
            gateway,
        }
    }

    fn parse_s3(r: &mut Reader<'_>) -> Option<S3Config> {
        const S3: [&str; 4] = [
            "FORGE_S3_ENDPOINT",
            "FORGE_S3_BUCKET",
            "FORGE_S3_ACCESS_KEY",
            "FORGE_S3_SECRET_KEY",
        ];
        let set: Vec<&str> = S3.iter().copied().filter(|v| r.get(v).is_some()).collect();
        if set.is_empty() {
            return None;
        }
        if set.len() < S3.len() {
            r.errors.push(ConfigError::Partial {
                group: "FORGE_S3_*".to_string(),
                missing: S3
                    .iter()
                    .filter(|v| !set.contains(v))
                    .map(|v| v.to_string())
                    .collect(),
            });
            return None;
        }
        let endpoint = r.url("FORGE_S3_ENDPOINT")?;
        let bucket = r.get("FORGE_S3_BUCKET")?;
        if !names::is_dns1123_subdomain(&bucket) || bucket.len() < 3 || bucket.len() > 63 {
            r.invalid(
                "FORGE_S3_BUCKET",
                format!("`{bucket}` is not a valid bucket name (3-63 lowercase letters, digits, - and .)"),
            );
            return None;
        }
        Some(S3Config {
            endpoint,
            bucket,
            access_key: Secret::new(r.get("FORGE_S3_ACCESS_KEY")?),
            secret_key: Secret::new(r.get("FORGE_S3_SECRET_KEY")?),
        })
    }

    /// Cross-field and format checks on a built config; returns every problem.
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        let mut invalid = |var: &str, reason: String| {
            errors.push(ConfigError::Invalid {
                var: var.to_string(),
                reason,
            })
        };
        if !names::is_dns1123_label(&self.k8s.namespace) {
            invalid(
                "FORGE_K8S_NAMESPACE",
                format!("`{}` is not a DNS-1123 label", self.k8s.namespace),
            );
        }
        if !names::is_qualified_name(&self.k8s.gpu_node_label) {
            invalid(
                "FORGE_K8S_GPU_NODE_LABEL",
                format!(
                    "`{}` is not a valid label key ([prefix/]name)",
                    self.k8s.gpu_node_label
                ),
            );
        }
        if !names::is_positive_quantity(&self.k8s.shm_size) {
            invalid(
                "FORGE_K8S_SHM_SIZE",
                format!(
                    "`{}` is not a positive Kubernetes quantity (e.g. 64Gi)",
                    self.k8s.shm_size
                ),
            );
        }
        if let Some(version) = &self.kuberay.ray_version {
            let parts: Vec<&str> = version.split('.').collect();
            let numeric = parts
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
            if !(2..=3).contains(&parts.len()) || !numeric {
                invalid(
                    "FORGE_KUBERAY_RAY_VERSION",
                    format!("`{version}` is not a Ray version like 2.55.1"),
                );
            }
        }
        if self.kuberay.ttl_seconds < 0 {
            invalid("FORGE_KUBERAY_TTL_SECONDS", "must be ≥ 0".to_string());
        }
        if self.kuberay.prerunning_deadline_s <= 0 {
            invalid(
                "FORGE_KUBERAY_PRERUNNING_DEADLINE_S",
                "must be > 0".to_string(),
            );
        }
        if self
            .gateway
            .capsule_init_image
            .chars()
            .any(char::is_whitespace)
        {
            invalid(
                "FORGE_CAPSULE_INIT_IMAGE",
                "image reference contains whitespace".to_string(),
            );
        }
        if self.gateway.plugin_max_kib > self.gateway.team_plugin_max_mib * 1024 {
            errors.push(ConfigError::Requires {
                var: "FORGE_TEAM_PLUGIN_MAX_MIB".to_string(),
                requires: "FORGE_PLUGIN_MAX_KIB".to_string(),
                reason: format!(
                    "a team's plugin budget ({} MiB) is smaller than one plugin may be ({} KiB)",
                    self.gateway.team_plugin_max_mib, self.gateway.plugin_max_kib
                ),
            });
        }
        if self.k8s.token.is_some() && self.k8s.api_server.is_none() {
            errors.push(ConfigError::Requires {
                var: "FORGE_K8S_TOKEN".to_string(),
                requires: "FORGE_K8S_API_SERVER".to_string(),
                reason: "a token is only used against an explicit API server".to_string(),
            });
        }
        if self.storage.mount.is_some() && self.storage.pvc.is_none() {
            errors.push(ConfigError::Requires {
                var: "FORGE_K8S_STORAGE_MOUNT".to_string(),
                requires: "FORGE_K8S_STORAGE_PVC".to_string(),
                reason: "the mount path is where the storage claim is mounted".to_string(),
            });
        }
        if self.fleet_kind == FleetKind::Kuberay && self.kuberay.ray_version.is_none() {
            errors.push(ConfigError::Missing {
                var: "FORGE_KUBERAY_RAY_VERSION".to_string(),
                reason: "when FORGE_DEFAULT_FLEET_KIND is kuberay".to_string(),
            });
        }
        errors
    }

    /// The image of a framework, if configured.
    pub fn image_for(&self, framework: &str) -> Option<&str> {
        self.images.get(framework).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> HashMap<String, String> {
        HashMap::from([
            (
                "FORGE_IMAGE_NEMO_RL".to_string(),
                "registry.internal/starforge/nemo-rl:v0.7.0".to_string(),
            ),
            (
                "FORGE_KUBERAY_RAY_VERSION".to_string(),
                "2.55.1".to_string(),
            ),
        ])
    }

    fn with(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        let mut m = base();
        for (k, v) in pairs {
            m.insert(k.to_string(), v.to_string());
        }
        m
    }

    fn errors(pairs: &[(&str, &str)]) -> Vec<ConfigError> {
        match Config::from_env_map(with(pairs)) {
            Ok(c) => panic!("expected errors, got {c:?}"),
            Err(ConfigErrors(e)) => e,
        }
    }

    fn only_error_var(pairs: &[(&str, &str)]) -> String {
        let e = errors(pairs);
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].var().to_string()
    }

    #[test]
    fn defaults_apply() {
        let c = Config::from_env_map(base()).expect("valid");
        assert_eq!(c.fleet_kind, FleetKind::Kuberay);
        assert_eq!(c.k8s.namespace, "starforge");
        assert_eq!(c.k8s.gpu_node_label, "starforge/gpu-series");
        assert_eq!(c.k8s.shm_size, "64Gi");
        assert!(c.k8s.gpu_passthrough);
        assert_eq!(c.storage.root, "/starforge");
        assert!(c.storage.shared);
        assert_eq!(c.storage.mount_path(), "/starforge");
        assert_eq!(c.kuberay.ttl_seconds, 600);
        assert_eq!(c.kuberay.prerunning_deadline_s, 1800);
        assert_eq!(c.gateway.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.gateway.policy_deadline_ms, 50);
        assert_eq!(c.gateway.policy_memory_mib, 32);
        assert!(c.gateway.policy_concurrency >= 1);
        assert_eq!(
            c.gateway.tokens_path(),
            PathBuf::from("./forge-data/tokens.yaml")
        );
        assert!(c.s3.is_none());
        assert_eq!(
            c.image_for("nemo-rl"),
            Some("registry.internal/starforge/nemo-rl:v0.7.0")
        );
    }

    #[test]
    fn full_seed_config_is_accepted() {
        let c = Config::from_env_map(with(&[
            ("FORGE_DEFAULT_FLEET_KIND", "kuberay"),
            ("FORGE_IMAGE_VERL", "registry.internal/verl:1"),
            ("FORGE_NEMO_RL_DIR", "/opt/nemo-rl"),
            ("FORGE_K8S_API_SERVER", "https://10.0.0.1:6443"),
            ("FORGE_K8S_TOKEN", "sa-token-value"),
            ("FORGE_K8S_NAMESPACE", "team-a"),
            ("FORGE_K8S_SHM_SIZE", "16Gi"),
            ("FORGE_STORAGE_ROOT", "/starforge"),
            ("FORGE_K8S_STORAGE_PVC", "starforge-storage"),
            ("FORGE_K8S_STORAGE_SHARED", "false"),
            ("FORGE_K8S_CORPUS_PVC", "starforge-corpus"),
            ("FORGE_K8S_STORAGE_MOUNT", "/storage/"),
            ("FORGE_KUBERAY_TTL_SECONDS", "0"),
            ("FORGE_K8S_GPU_PASSTHROUGH", "0"),
            ("FORGE_S3_ENDPOINT", "http://127.0.0.1:9000"),
            ("FORGE_S3_BUCKET", "starforge"),
            ("FORGE_S3_ACCESS_KEY", "AKIAEXAMPLE"),
            ("FORGE_S3_SECRET_KEY", "very-secret-key"),
            ("FORGE_LISTEN", "0.0.0.0:9090"),
            ("FORGE_PUBLIC_URL", "https://forge.example"),
        ]))
        .expect("valid");
        assert_eq!(c.images.len(), 2);
        assert_eq!(c.image_for("verl"), Some("registry.internal/verl:1"));
        assert!(!c.storage.shared);
        assert!(!c.k8s.gpu_passthrough);
        assert_eq!(c.storage.mount_path(), "/storage");
        assert_eq!(c.storage.corpus_mount_path(), "/storage/corpus");
        assert_eq!(c.kuberay.ttl_seconds, 0);
        let s3 = c.s3.as_ref().expect("s3");
        assert_eq!(s3.secret_key.expose(), "very-secret-key");
        let debug = format!("{c:?}");
        for secret in ["sa-token-value", "AKIAEXAMPLE", "very-secret-key"] {
            assert!(!debug.contains(secret), "secret leaked in Debug: {debug}");
        }
        assert!(debug.contains("<redacted>"));
    }

    #[test]
    fn image_var_maps_to_framework_name() {
        assert_eq!(
            framework_of_image_var("FORGE_IMAGE_NEMO_RL").as_deref(),
            Some("nemo-rl")
        );
        assert_eq!(framework_of_image_var("FORGE_LISTEN"), None);
    }

    #[test]
    fn all_problems_reported_at_once() {
        let e = errors(&[
            ("FORGE_POLICY_DEADLINE_MS", "0"),
            ("FORGE_K8S_SHM_SIZE", "lots"),
            ("FORGE_K8S_TOKEN", "t"),
            ("FORGE_S3_BUCKET", "b"),
        ]);
        let vars: Vec<&str> = e.iter().map(ConfigError::var).collect();
        assert_eq!(e.len(), 4, "{e:?}");
        for v in [
            "FORGE_POLICY_DEADLINE_MS",
            "FORGE_K8S_SHM_SIZE",
            "FORGE_K8S_TOKEN",
            "FORGE_S3_*",
        ] {
            assert!(vars.contains(&v), "{v} missing in {vars:?}");
        }
        let text = ConfigErrors(e).to_string();
        assert!(text.contains("4 problem(s)"), "{text}");
    }

    #[test]
    fn rejects_partial_s3() {
        let e = errors(&[
            ("FORGE_S3_ENDPOINT", "http://127.0.0.1:9000"),
            ("FORGE_S3_SECRET_KEY", "hunter2"),
        ]);
        assert_eq!(
            e,
            vec![ConfigError::Partial {
                group: "FORGE_S3_*".to_string(),
                missing: vec![
                    "FORGE_S3_BUCKET".to_string(),
                    "FORGE_S3_ACCESS_KEY".to_string()
                ],
            }]
        );
        assert!(!format!("{e:?}").contains("hunter2"));
    }

    #[test]
    fn rejects_bad_s3_endpoint() {
        let var = only_error_var(&[
            ("FORGE_S3_ENDPOINT", "ftp://x"),
            ("FORGE_S3_BUCKET", "bucket"),
            ("FORGE_S3_ACCESS_KEY", "a"),
            ("FORGE_S3_SECRET_KEY", "s"),
        ]);
        assert_eq!(var, "FORGE_S3_ENDPOINT");
    }

    #[test]
    fn rejects_bad_s3_bucket() {
        let var = only_error_var(&[
            ("FORGE_S3_ENDPOINT", "http://x:9000"),
            ("FORGE_S3_BUCKET", "Bad_Bucket"),
            ("FORGE_S3_ACCESS_KEY", "a"),
            ("FORGE_S3_SECRET_KEY", "s"),
        ]);
        assert_eq!(var, "FORGE_S3_BUCKET");
    }

    #[test]
    fn rejects_token_without_api_server() {
        let e = errors(&[("FORGE_K8S_TOKEN", "secret-token")]);
        assert!(
            matches!(&e[..], [ConfigError::Requires { var, requires, .. }]
            if var == "FORGE_K8S_TOKEN" && requires == "FORGE_K8S_API_SERVER")
        );
        assert!(!e[0].to_string().contains("secret-token"));
    }

    #[test]
    fn rejects_api_server_that_is_not_a_url() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_API_SERVER", "10.0.0.1:6443")]),
            "FORGE_K8S_API_SERVER"
        );
    }

    #[test]
    fn rejects_storage_mount_without_pvc() {
        let e = errors(&[("FORGE_K8S_STORAGE_MOUNT", "/storage")]);
        assert!(
            matches!(&e[..], [ConfigError::Requires { var, requires, .. }]
            if var == "FORGE_K8S_STORAGE_MOUNT" && requires == "FORGE_K8S_STORAGE_PVC")
        );
    }

    #[test]
    fn rejects_relative_storage_paths() {
        assert_eq!(
            only_error_var(&[("FORGE_STORAGE_ROOT", "starforge")]),
            "FORGE_STORAGE_ROOT"
        );
        assert_eq!(
            only_error_var(&[
                ("FORGE_K8S_STORAGE_PVC", "claim"),
                ("FORGE_K8S_STORAGE_MOUNT", "storage")
            ]),
            "FORGE_K8S_STORAGE_MOUNT"
        );
        assert_eq!(
            only_error_var(&[("FORGE_NEMO_RL_DIR", "opt/nemo")]),
            "FORGE_NEMO_RL_DIR"
        );
    }

    #[test]
    fn rejects_bad_claim_names() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_STORAGE_PVC", "Bad_Claim")]),
            "FORGE_K8S_STORAGE_PVC"
        );
        assert_eq!(
            only_error_var(&[("FORGE_K8S_CORPUS_PVC", "-corpus")]),
            "FORGE_K8S_CORPUS_PVC"
        );
    }

    #[test]
    fn rejects_non_numeric_and_zero_deadlines() {
        assert_eq!(
            only_error_var(&[("FORGE_POLICY_DEADLINE_MS", "fast")]),
            "FORGE_POLICY_DEADLINE_MS"
        );
        assert_eq!(
            only_error_var(&[("FORGE_POLICY_DEADLINE_MS", "0")]),
            "FORGE_POLICY_DEADLINE_MS"
        );
        assert_eq!(
            only_error_var(&[("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", "0")]),
            "FORGE_KUBERAY_PRERUNNING_DEADLINE_S"
        );
        assert_eq!(
            only_error_var(&[("FORGE_KUBERAY_PRERUNNING_DEADLINE_S", "1h")]),
            "FORGE_KUBERAY_PRERUNNING_DEADLINE_S"
        );
    }

    #[test]
    fn rejects_negative_or_huge_ttl() {
        assert_eq!(
            only_error_var(&[("FORGE_KUBERAY_TTL_SECONDS", "-1")]),
            "FORGE_KUBERAY_TTL_SECONDS"
        );
        assert_eq!(
            only_error_var(&[("FORGE_KUBERAY_TTL_SECONDS", "99999999999")]),
            "FORGE_KUBERAY_TTL_SECONDS"
        );
    }

    #[test]
    fn rejects_zero_policy_limits_and_body() {
        for var in [
            "FORGE_POLICY_MEMORY_MIB",
            "FORGE_POLICY_CONCURRENCY",
            "FORGE_MAX_BODY_MIB",
        ] {
            assert_eq!(only_error_var(&[(var, "0")]), var);
        }
    }

    #[test]
    fn rejects_out_of_range_plugin_limits() {
        for (var, v) in [
            ("FORGE_POLICY_SYNC_MS", "0"),
            ("FORGE_PLUGIN_MAX_KIB", "0"),
            ("FORGE_PLUGIN_MAX_KIB", "16385"),
            ("FORGE_TEAM_PLUGIN_MAX_COUNT", "0"),
        ] {
            assert_eq!(only_error_var(&[(var, v)]), var, "{var}={v}");
        }
    }

    #[test]
    fn rejects_team_plugin_budget_below_one_plugin() {
        assert_eq!(
            only_error_var(&[
                ("FORGE_TEAM_PLUGIN_MAX_MIB", "1"),
                ("FORGE_PLUGIN_MAX_KIB", "2048")
            ]),
            "FORGE_TEAM_PLUGIN_MAX_MIB"
        );
        assert!(
            Config::from_env_map(with(&[
                ("FORGE_TEAM_PLUGIN_MAX_MIB", "2"),
                ("FORGE_PLUGIN_MAX_KIB", "2048")
            ]))
            .is_ok()
        );
    }

    #[test]
    fn rejects_shm_size_that_is_not_a_quantity() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_SHM_SIZE", "64GB")]),
            "FORGE_K8S_SHM_SIZE"
        );
        assert_eq!(
            only_error_var(&[("FORGE_K8S_SHM_SIZE", "0")]),
            "FORGE_K8S_SHM_SIZE"
        );
    }

    #[test]
    fn rejects_invalid_label_key() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_GPU_NODE_LABEL", "Star Forge/gpu")]),
            "FORGE_K8S_GPU_NODE_LABEL"
        );
    }

    #[test]
    fn rejects_invalid_namespace() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_NAMESPACE", "Star_Forge")]),
            "FORGE_K8S_NAMESPACE"
        );
    }

    #[test]
    fn rejects_kuberay_without_ray_version() {
        let mut env = base();
        env.remove("FORGE_KUBERAY_RAY_VERSION");
        let Err(ConfigErrors(e)) = Config::from_env_map(env) else {
            panic!("expected an error");
        };
        assert!(
            matches!(&e[..], [ConfigError::Missing { var, .. }] if var == "FORGE_KUBERAY_RAY_VERSION")
        );
    }

    #[test]
    fn local_fleet_needs_no_ray_version_and_dev_defaults_are_valid() {
        let mut env = base();
        env.remove("FORGE_KUBERAY_RAY_VERSION");
        env.insert("FORGE_DEFAULT_FLEET_KIND".into(), "local".into());
        assert_eq!(
            Config::from_env_map(env).expect("valid").fleet_kind,
            FleetKind::Local
        );
        assert!(Config::from_env_map(dev_defaults()).is_ok());
    }

    #[test]
    fn rejects_bad_ray_version() {
        assert_eq!(
            only_error_var(&[("FORGE_KUBERAY_RAY_VERSION", "latest")]),
            "FORGE_KUBERAY_RAY_VERSION"
        );
    }

    #[test]
    fn rejects_unknown_fleet_kind() {
        assert_eq!(
            only_error_var(&[("FORGE_DEFAULT_FLEET_KIND", "slurm")]),
            "FORGE_DEFAULT_FLEET_KIND"
        );
    }

    #[test]
    fn rejects_bad_booleans() {
        assert_eq!(
            only_error_var(&[("FORGE_K8S_GPU_PASSTHROUGH", "maybe")]),
            "FORGE_K8S_GPU_PASSTHROUGH"
        );
        assert_eq!(
            only_error_var(&[("FORGE_K8S_STORAGE_SHARED", "rwx")]),
            "FORGE_K8S_STORAGE_SHARED"
        );
    }

    #[test]
    fn rejects_bad_listen_and_public_url() {
        assert_eq!(
            only_error_var(&[("FORGE_LISTEN", "localhost")]),
            "FORGE_LISTEN"
        );
        assert_eq!(
            only_error_var(&[("FORGE_PUBLIC_URL", "forge.example")]),
            "FORGE_PUBLIC_URL"
        );
    }

    #[test]
    fn rejects_bad_image_vars() {
        assert_eq!(
            only_error_var(&[("FORGE_IMAGE_VERL", "  ")]),
            "FORGE_IMAGE_VERL"
        );
        assert_eq!(only_error_var(&[("FORGE_IMAGE_", "x:1")]), "FORGE_IMAGE_");
        assert_eq!(
            only_error_var(&[("FORGE_IMAGE_VERL", "a b")]),
            "FORGE_IMAGE_VERL"
        );
        assert_eq!(
            only_error_var(&[("FORGE_CAPSULE_INIT_IMAGE", "busy box")]),
            "FORGE_CAPSULE_INIT_IMAGE"
        );
    }

    #[test]
    fn file_layers_under_env() {
        let dir = tempfile::tempdir().expect("tempdir");
        let toml_path = dir.path().join("forge.toml");
        std::fs::write(
            &toml_path,
            "FORGE_K8S_NAMESPACE = \"from-file\"\nFORGE_KUBERAY_TTL_SECONDS = 42\nFORGE_K8S_GPU_PASSTHROUGH = false\n",
        )
        .expect("write");
        let c = Config::from_env_map(with(&[
            ("FORGE_CONFIG_FILE", toml_path.to_str().expect("utf-8")),
            ("FORGE_KUBERAY_TTL_SECONDS", "7"),
        ]))
        .expect("valid");
        assert_eq!(c.k8s.namespace, "from-file");
        assert_eq!(c.kuberay.ttl_seconds, 7, "env wins over the file");
        assert!(!c.k8s.gpu_passthrough);

        let yaml_path = dir.path().join("forge.yaml");
        std::fs::write(
            &yaml_path,
            "FORGE_K8S_SHM_SIZE: 8Gi\nFORGE_IMAGE_VERL: verl:2\n",
        )
        .expect("write");
        let c = Config::from_env_map(with(&[(
            "FORGE_CONFIG_FILE",
            yaml_path.to_str().expect("utf-8"),
        )]))
        .expect("valid");
        assert_eq!(c.k8s.shm_size, "8Gi");
        assert_eq!(c.image_for("verl"), Some("verl:2"));
    }

    #[test]
    fn rejects_bad_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let unknown = dir.path().join("forge.toml");
        std::fs::write(&unknown, "FORGE_K8S_NAMESPAEC = \"typo\"\n").expect("write");
        let e = errors(&[("FORGE_CONFIG_FILE", unknown.to_str().expect("utf-8"))]);
        assert!(
            matches!(&e[..], [ConfigError::UnknownKey { key, .. }] if key == "FORGE_K8S_NAMESPAEC")
        );

        let json = dir.path().join("forge.json");
        std::fs::write(&json, "{}").expect("write");
        let e = errors(&[("FORGE_CONFIG_FILE", json.to_str().expect("utf-8"))]);
        assert!(matches!(&e[..], [ConfigError::File { .. }]));

        let broken = dir.path().join("broken.yaml");
        std::fs::write(&broken, "FORGE_K8S_NAMESPACE: [unclosed").expect("write");
        let e = errors(&[("FORGE_CONFIG_FILE", broken.to_str().expect("utf-8"))]);
        assert!(matches!(&e[..], [ConfigError::File { .. }]));

        let missing = dir.path().join("missing.toml");
        let e = errors(&[("FORGE_CONFIG_FILE", missing.to_str().expect("utf-8"))]);
        assert!(matches!(&e[..], [ConfigError::File { .. }]));

        let nested = dir.path().join("nested.yaml");
        std::fs::write(&nested, "FORGE_K8S_NAMESPACE: {a: 1}\n").expect("write");
        let e = errors(&[("FORGE_CONFIG_FILE", nested.to_str().expect("utf-8"))]);
        assert!(
            matches!(&e[..], [ConfigError::Invalid { var, .. }] if var == "FORGE_K8S_NAMESPACE")
        );
    }
}
