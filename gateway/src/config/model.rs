//! The typed gateway configuration: [`Config`] and its groups, as the rest of the
//! gateway reads it. Each field names the `FORGE_*` variable it comes from; how a
//! variable becomes a field is the table in `vars.rs`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use forge_policy_host::model::Toleration;

use super::per_series::PerSeries;
use super::secret::Secret;

/// CPUs a machine gets when neither its pool nor `FORGE_K8S_CPUS_PER_NODE` names any.
pub const DEFAULT_CPUS_PER_NODE: u32 = 8;
/// Memory a machine gets when neither its pool nor `FORGE_K8S_MEMORY_PER_NODE` names any.
pub const DEFAULT_MEMORY_PER_NODE: u64 = 32 << 30;

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
    /// `FORGE_K8S_CA_FILE`: the API server's CA (PEM), with `FORGE_K8S_API_SERVER`.
    pub ca_file: Option<PathBuf>,
    /// `FORGE_K8S_INSECURE_SKIP_TLS_VERIFY` (test clusters only).
    pub insecure_skip_tls_verify: bool,
    /// `FORGE_K8S_NAMESPACE`.
    pub namespace: String,
    /// `FORGE_K8S_GPU_NODE_LABEL`.
    pub gpu_node_label: String,
    /// `FORGE_K8S_SHM_SIZE` (a Kubernetes quantity).
    pub shm_size: String,
    /// `FORGE_K8S_GPU_PASSTHROUGH` (false = no `nvidia.com/gpu` requests).
    pub gpu_passthrough: bool,
    /// `FORGE_K8S_OPERATOR_NAMESPACE`: the KubeRay operator's namespace.
    pub operator_namespace: String,
    /// `FORGE_K8S_RUN_AS_USER`: the uid of Ray containers (`None`: the image's user).
    pub run_as_user: Option<i64>,
}

/// How Forge's pods are sized and where they may run: per-machine resources, the
/// tolerations of GPU-node taints, and where a node's GPU count comes from on clusters
/// without `nvidia.com/gpu`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodsConfig {
    /// `FORGE_K8S_CPUS_PER_NODE`: CPUs per machine, per series.
    pub cpus_per_node: PerSeries<u32>,
    /// `FORGE_K8S_MEMORY_PER_NODE`: memory bytes per machine, per series.
    pub memory_per_node: PerSeries<u64>,
    /// `FORGE_K8S_OBJECT_STORE_MEMORY`: Ray object store bytes per machine, per series.
    pub object_store_memory: PerSeries<u64>,
    /// `FORGE_K8S_GPU_TOLERATIONS`: tolerations on every Forge pod.
    pub tolerations: Vec<Toleration>,
    /// `FORGE_K8S_GPU_COUNT_LABEL`: node label with the GPU count when nodes have no
    /// `nvidia.com/gpu` (GPU-less clusters, `FORGE_K8S_GPU_PASSTHROUGH=0`).
    pub gpu_count_label: String,
    /// `FORGE_K8S_GPUS_PER_NODE`: GPU count of nodes without `nvidia.com/gpu` nor the
    /// count label, per series.
    pub gpus_per_node: PerSeries<u32>,
}

impl PodsConfig {
    /// CPU millicores of a machine on `series` whose pool names none.
    pub fn cpu_millis(&self, series: &str) -> u64 {
        u64::from(
            self.cpus_per_node
                .get(series)
                .copied()
                .unwrap_or(DEFAULT_CPUS_PER_NODE),
        ) * 1000
    }

    /// Memory bytes of a machine on `series` whose pool names none.
    pub fn memory_bytes(&self, series: &str) -> u64 {
        self.memory_per_node
            .get(series)
            .copied()
            .unwrap_or(DEFAULT_MEMORY_PER_NODE)
    }
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
    /// `FORGE_K8S_STORAGE_COMMON_SUBPATH`: a directory of the claim shared read-only.
    pub common_subpath: Option<String>,
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

    /// Where pods mount the read-only common directory of the storage claim.
    pub fn common_mount_path(&self) -> String {
        format!("{}/common", self.mount_path().trim_end_matches('/'))
    }

    /// The directory of the storage claim a team's jobs mount (read-write).
    pub fn team_subpath(team: &str) -> String {
        format!("teams/{team}")
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

/// The database and the identities replicas share it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// `FORGE_DATABASE_URL`: PostgreSQL; `None` = SQLite in the data directory.
    pub url: Option<Secret>,
    /// `FORGE_INSTANCE`: the installation identity (`None`: the store's, generated on
    /// first start).
    pub instance: Option<String>,
    /// `FORGE_REPLICA`: this replica's identity in the leader lease (`None`: the
    /// host name).
    pub replica: Option<String>,
}

/// Leader election timings (client-go's defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// `FORGE_LEADER_LEASE_MS`: how long a lease holds without renewal.
    pub lease_ms: u64,
    /// `FORGE_LEADER_RENEW_DEADLINE_MS`: a leader that could not renew for this long
    /// stops acting.
    pub renew_deadline_ms: u64,
    /// `FORGE_LEADER_RETRY_MS`: how often the lease is renewed or tried.
    pub retry_ms: u64,
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
    /// `FORGE_METRICS_TOKEN`: the scraper's token for the detailed `/metrics`.
    pub metrics_token: Option<Secret>,
    /// `FORGE_POLICY_DEADLINE_MS`.
    pub policy_deadline_ms: u64,
    /// `FORGE_POLICY_MEMORY_MIB`.
    pub policy_memory_mib: u64,
    /// `FORGE_POLICY_MAX_MEMORY_MIB`.
    pub policy_max_memory_mib: u64,
    /// `FORGE_POLICY_MAX_DEADLINE_MS`.
    pub policy_max_deadline_ms: u64,
    /// `FORGE_POLICY_CONCURRENCY`.
    pub policy_concurrency: usize,
    /// `FORGE_POLICY_ISOLATION`.
    pub policy_isolation: forge_policy_host::Isolation,
    /// `FORGE_POLICY_VERIFY`: compare one in N reused-instance decisions (0: off).
    pub policy_verify_every: u32,
    /// `FORGE_POLICY_SYNC_MS`.
    pub policy_sync_ms: u64,
    /// `FORGE_PLUGIN_MAX_KIB`.
    pub plugin_max_kib: u64,
    /// `FORGE_TEAM_PLUGIN_MAX_COUNT`.
    pub team_plugin_max_count: u64,
    /// `FORGE_TEAM_PLUGIN_MAX_MIB`.
    pub team_plugin_max_mib: u64,
    /// `FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR` (0: unlimited).
    pub plugin_failed_uploads_per_hour: u32,
    /// `FORGE_PLUGIN_COMPILE_WORKERS`.
    pub plugin_compile_workers: usize,
    /// `FORGE_PLUGIN_COMPILE_TIMEOUT_S`.
    pub plugin_compile_timeout_s: u64,
    /// `FORGE_POLICY_MAX_CHAIN_LINKS`.
    pub policy_max_chain_links: usize,
    /// `FORGE_MAX_BODY_MIB`.
    pub max_body_mib: u64,
    /// `FORGE_MAX_DOCUMENT_KIB`.
    pub max_document_kib: u64,
    /// `FORGE_MAX_FIELD_ERRORS`.
    pub max_field_errors: usize,
    /// `FORGE_SUBMISSIONS_PER_MINUTE` (0: unlimited).
    pub submissions_per_minute: u32,
    /// `FORGE_MAX_QUEUED_PER_TEAM` (0: unlimited).
    pub max_queued_per_team: u64,
    /// `FORGE_BODY_IDLE_TIMEOUT_S`.
    pub body_idle_timeout_s: u64,
    /// `FORGE_LOG_ARCHIVE_MAX_BYTES_PER_POD`: the most bytes of one pod's log archived
    /// (its tail is kept) and held to answer a live `tail` read.
    pub log_archive_max_bytes_per_pod: u64,
    /// `FORGE_RETENTION_REJECTED_S` (0: forever).
    pub retention_rejected_s: u64,
    /// `FORGE_RETENTION_LOGS_S` (0: forever).
    pub retention_logs_s: u64,
    /// `FORGE_RETENTION_CAPSULES_S` (0: forever).
    pub retention_capsules_s: u64,
    /// `FORGE_RETENTION_SWEEP_S`.
    pub retention_sweep_s: u64,
    /// `FORGE_PREEMPTION_MAX_GRACE_S`.
    pub preemption_max_grace_s: u64,
    /// `FORGE_PREEMPTION_WINDOW_S`.
    pub preemption_window_s: u64,
    /// `FORGE_PREEMPTION_MAX_IN_WINDOW`.
    pub preemption_max_in_window: u32,
    /// `FORGE_FAIR_SHARE_HALF_LIFE_S`: how fast a team's past GPU use stops counting
    /// against it in the fair-share order.
    pub fair_share_half_life_s: u64,
    /// `FORGE_PLAYGROUND_MIN_TTL_S`: the shortest TTL and idle TTL a playground may ask.
    pub playground_min_ttl_s: u64,
    /// `FORGE_PLAYGROUND_STARTUP_S`: how long a playground's server may take to load
    /// its model before the kubelet restarts it (its startup probe).
    pub playground_startup_s: u64,
    /// `FORGE_UPLOAD_MAX_SESSIONS`.
    pub upload_max_sessions: u64,
    /// `FORGE_UPLOAD_TTL_S`.
    pub upload_ttl_s: u64,
    /// `FORGE_CAPSULE_INIT_IMAGE`.
    pub capsule_init_image: String,
    /// `FORGE_PUBLIC_URL`.
    pub public_url: Option<String>,
    /// `FORGE_POLICY_CHAIN_FILE`: the start-up policy chain of `serve` (its
    /// `--policy-chain` flag wins over it).
    pub policy_chain_file: Option<PathBuf>,
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

    /// `FORGE_MAX_DOCUMENT_KIB` in bytes.
    pub fn max_document_bytes(&self) -> usize {
        usize::try_from(self.max_document_kib.saturating_mul(1024)).unwrap_or(usize::MAX)
    }
}

/// The whole gateway configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `FORGE_DEFAULT_FLEET_KIND`.
    pub fleet_kind: FleetKind,
    /// `FORGE_FLEETS_FILE`'s fleets (`None`: the `FORGE_K8S_*` settings are the one
    /// fleet; [`Config::fleets`] resolves both).
    pub fleets: Option<Vec<FleetConfig>>,
    /// Framework name (`nemo-rl`) → image, from `FORGE_IMAGE_<FRAMEWORK>`.
    pub images: BTreeMap<String, String>,
    /// `FORGE_NEMO_RL_DIR`.
    pub nemo_rl_dir: Option<String>,
    /// Kubernetes.
    pub k8s: K8sConfig,
    /// Pod sizing and placement.
    pub pods: PodsConfig,
    /// Storage.
    pub storage: StorageConfig,
    /// KubeRay.
    pub kuberay: KubeRayConfig,
    /// Object storage, when configured.
    pub s3: Option<S3Config>,
    /// The database and identities.
    pub database: DatabaseConfig,
    /// Leader election.
    pub leader: LeaderConfig,
    /// Gateway.
    pub gateway: GatewayConfig,
}

impl Config {
    /// The image of a framework, if configured.
    pub fn image_for(&self, framework: &str) -> Option<&str> {
        self.images.get(framework).map(String::as_str)
    }
}

/// How the gateway reaches one fleet's API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetConnection {
    /// The `FORGE_K8S_*` settings: `FORGE_K8S_API_SERVER`, else in-cluster, else the
    /// default kubeconfig (`cluster/connect.rs`).
    Settings,
    /// A kubeconfig file, at its `context` or its current one.
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// The context to use (`None`: the file's `current-context`).
        context: Option<String>,
    },
    /// An API server URL with a bearer token read from a file.
    ApiServer {
        /// `https://…`.
        url: String,
        /// The bearer token's file (re-read when it changes); `None`: no token.
        token_file: Option<PathBuf>,
        /// The API server's CA (PEM); `None`: the system's roots.
        ca_file: Option<PathBuf>,
        /// Do not verify the server's certificate (test clusters only).
        insecure_skip_tls_verify: bool,
    },
}

/// One fleet: a cluster jobs may run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetConfig {
    /// Its name (a DNS-1123 label): shown on jobs, capacity and metrics.
    pub name: String,
    /// How it is reached.
    pub connection: FleetConnection,
    /// The namespace of Forge's objects there (`None`: `FORGE_K8S_NAMESPACE`).
    pub namespace: Option<String>,
    /// Free labels (e.g. `region: eu`), shown to policies.
    pub labels: BTreeMap<String, String>,
}
