//! [`Draft`]: the configuration while the variable table is applied to it. It is a
//! [`Config`] whose every non-optional field is overwritten by its variable's default
//! or value, plus the parts of all-or-nothing groups (`FORGE_S3_*`) that only become
//! a [`S3Config`] once every member parsed.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::model::{
    Config, DatabaseConfig, FleetKind, GatewayConfig, K8sConfig, KubeRayConfig, LeaderConfig,
    PodsConfig, S3Config, StorageConfig,
};
use super::per_series::PerSeries;
use super::secret::Secret;

/// The members of `FORGE_S3_*` read so far.
#[derive(Debug, Default)]
pub struct S3Parts {
    /// `FORGE_S3_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `FORGE_S3_BUCKET`.
    pub bucket: Option<String>,
    /// `FORGE_S3_ACCESS_KEY`.
    pub access_key: Option<Secret>,
    /// `FORGE_S3_SECRET_KEY`.
    pub secret_key: Option<Secret>,
}

/// The configuration being built from the table.
#[derive(Debug)]
pub struct Draft {
    /// Every table entry writes its field here.
    pub cfg: Config,
    /// Object storage, assembled by [`Draft::finish`].
    pub s3: S3Parts,
}

/// Stores a parsed value in its field, or hands back why it is invalid (the field
/// keeps its previous value).
pub fn put<T>(field: &mut T, parsed: Result<T, String>) -> Result<(), String> {
    *field = parsed?;
    Ok(())
}

impl Draft {
    /// Neutral values, each replaced by its variable's default when the table is
    /// applied (a test checks the defaults of every field).
    pub fn blank() -> Self {
        let cfg = Config {
            fleet_kind: FleetKind::Kuberay,
            fleets: None,
            images: BTreeMap::new(),
            nemo_rl_dir: None,
            k8s: K8sConfig {
                api_server: None,
                token: None,
                ca_file: None,
                insecure_skip_tls_verify: false,
                namespace: String::new(),
                gpu_node_label: String::new(),
                shm_size: String::new(),
                gpu_passthrough: false,
                operator_namespace: String::new(),
                run_as_user: None,
            },
            pods: PodsConfig {
                cpus_per_node: PerSeries::default(),
                memory_per_node: PerSeries::default(),
                object_store_memory: PerSeries::default(),
                tolerations: Vec::new(),
                gpu_count_label: String::new(),
                gpus_per_node: PerSeries::default(),
            },
            storage: StorageConfig {
                root: String::new(),
                pvc: None,
                shared: false,
                corpus_pvc: None,
                mount: None,
                common_subpath: None,
            },
            kuberay: KubeRayConfig {
                ray_version: None,
                ttl_seconds: 0,
                prerunning_deadline_s: 0,
            },
            s3: None,
            database: DatabaseConfig {
                url: None,
                instance: None,
                replica: None,
            },
            leader: LeaderConfig {
                lease_ms: 0,
                renew_deadline_ms: 0,
                retry_ms: 0,
            },
            gateway: GatewayConfig {
                listen: SocketAddr::from(([0, 0, 0, 0], 0)),
                data_dir: PathBuf::new(),
                tokens_file: None,
                metrics_token: None,
                policy_deadline_ms: 0,
                policy_memory_mib: 0,
                policy_max_memory_mib: 0,
                policy_max_deadline_ms: 0,
                policy_concurrency: 0,
                policy_isolation: forge_policy_host::Isolation::Warm,
                policy_verify_every: 0,
                policy_sync_ms: 0,
                plugin_max_kib: 0,
                team_plugin_max_count: 0,
                team_plugin_max_mib: 0,
                plugin_failed_uploads_per_hour: 0,
                plugin_compile_workers: 0,
                plugin_compile_timeout_s: 0,
                policy_max_chain_links: 0,
                max_body_mib: 0,
                max_document_kib: 0,
                max_field_errors: 0,
                submissions_per_minute: 0,
                max_queued_per_team: 0,
                body_idle_timeout_s: 0,
                log_archive_max_bytes_per_pod: 0,
                retention_rejected_s: 0,
                retention_logs_s: 0,
                retention_capsules_s: 0,
                retention_sweep_s: 0,
                preemption_max_grace_s: 0,
                preemption_window_s: 0,
                preemption_max_in_window: 0,
                fair_share_half_life_s: 0,
                playground_min_ttl_s: 0,
                playground_startup_s: 0,
                upload_max_sessions: 0,
                upload_ttl_s: 0,
                capsule_init_image: String::new(),
                public_url: None,
                policy_chain_file: None,
            },
        };
        Self {
            cfg,
            s3: S3Parts::default(),
        }
    }

    /// The finished config: object storage only when all its parts are there.
    pub fn finish(self) -> Config {
        let Self { mut cfg, s3 } = self;
        cfg.s3 = match s3 {
            S3Parts {
                endpoint: Some(endpoint),
                bucket: Some(bucket),
                access_key: Some(access_key),
                secret_key: Some(secret_key),
            } => Some(S3Config {
                endpoint,
                bucket,
                access_key,
                secret_key,
            }),
            _ => None,
        };
        cfg
    }
}
