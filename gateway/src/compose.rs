//! Composition shared by `serve`, `dev` and the tests: from a validated [`Config`],
//! tokens, a Kubernetes client, a policy chain and a capsule backend to a ready
//! [`AppState`], and the background controllers (dispatcher, lifecycle) that run beside
//! the HTTP server. One constructor, so the binary's modes and the tests cannot drift.
//!
//! An edge of the crate: errors are `anyhow` with context.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use forge_policy_host::{EngineLimits, PolicyEngine, PolicyRunner};
use url::Url;

use crate::admission::Admission;
use crate::auth::Tokens;
use crate::cluster::{Capacity, Cluster, NodeConventions};
use crate::config::Config;
use crate::jobs::{self, Jobs, QueueBoard};
use crate::metrics::Metrics;
use crate::objects::{LocalStore, ObjectStore};
use crate::policy::{BootLink, PolicyManager, Registry, RegistryLimits};
use crate::state::AppState;
use crate::store::Database;

/// Where capsules and archived logs go.
pub enum CapsuleBackend {
    /// An S3-compatible store (`FORGE_S3_*`), checked at start-up.
    S3(crate::objects::S3Store),
    /// A directory in the data dir whose signed URLs the gateway itself serves at
    /// `base_url` (dev mode, or a cluster without object storage).
    Local { base_url: Url },
}

/// The policy engine with the configured limits and a precompile cache in the data dir.
pub fn policy_engine(cfg: &Config) -> anyhow::Result<PolicyEngine> {
    let engine = PolicyEngine::new(
        EngineLimits {
            deadline: Duration::from_millis(cfg.gateway.policy_deadline_ms),
            memory_cap_bytes: usize::try_from(cfg.gateway.policy_memory_mib << 20)
                .unwrap_or(usize::MAX),
            ..EngineLimits::default()
        },
        Some(cfg.gateway.data_dir.join("plugin-cache")),
    )?;
    Ok(engine)
}

/// The S3 store from `FORGE_S3_*`, with credentials and bucket checked now so a
/// misconfiguration is reported at start-up, not at the first job.
pub async fn s3_backend(cfg: &Config) -> anyhow::Result<Option<CapsuleBackend>> {
    let Some(s3) = &cfg.s3 else {
        return Ok(None);
    };
    let store = crate::objects::S3Store::connect(crate::objects::S3Config::new(
        &s3.endpoint,
        &s3.bucket,
        s3.access_key.expose(),
        s3.secret_key.expose(),
    ))
    .await
    .context("configuring the S3 capsule store (FORGE_S3_*)")?;
    store
        .check()
        .await
        .context("checking the S3 capsule store (FORGE_S3_*)")?;
    Ok(Some(CapsuleBackend::S3(store)))
}

/// The HMAC key of the local store's URLs: kept in the data dir (mode 0600) so URLs
/// handed to pods stay valid across a gateway restart.
fn local_url_key(data_dir: &Path) -> anyhow::Result<Vec<u8>> {
    let path = data_dir.join("capsule-url.key");
    if let Ok(bytes) = std::fs::read(&path)
        && bytes.len() >= 32
    {
        return Ok(bytes);
    }
    let key = rand::random::<[u8; 32]>().to_vec();
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(&path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut f, &key)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(key)
}

/// Build the application state: store, capacity caches, policy, capsules. `boot` is
/// the global chain to start with when the store has none yet (a fresh data dir);
/// otherwise the stored active policy is restored.
pub async fn build_state(
    config: Config,
    tokens: Tokens,
    client: kube::Client,
    boot: Vec<BootLink>,
    capsules: CapsuleBackend,
) -> anyhow::Result<AppState> {
    std::fs::create_dir_all(&config.gateway.data_dir)
        .with_context(|| format!("creating {}", config.gateway.data_dir.display()))?;
    let db = Database::open_sqlite(&config.gateway.store_path())
        .with_context(|| format!("opening {}", config.gateway.store_path().display()))?;
    let conventions = NodeConventions {
        gpu_label: config.k8s.gpu_node_label.clone(),
        pods: config.pods.clone(),
    };
    let capacity = Capacity::start(client.clone(), conventions, Duration::from_secs(30)).await?;
    let (objects, local_objects): (Arc<dyn ObjectStore>, _) = match capsules {
        CapsuleBackend::S3(s3) => (Arc::new(s3), None),
        CapsuleBackend::Local { base_url } => {
            let key = local_url_key(&config.gateway.data_dir)?;
            let local = Arc::new(
                LocalStore::new(config.gateway.data_dir.join("objects"), key, base_url)
                    .context("opening the local capsule store")?,
            );
            (local.clone() as Arc<dyn ObjectStore>, Some(local))
        }
    };
    let metrics = Arc::new(Metrics::new());
    let gw = &config.gateway;
    let registry = Registry::new(
        policy_engine(&config)?,
        objects.clone(),
        db.policies.clone(),
        RegistryLimits {
            max_plugin_bytes: gw.plugin_max_kib << 10,
            team_max_count: gw.team_plugin_max_count,
            team_max_bytes: gw.team_plugin_max_mib << 20,
        },
    );
    let policies = PolicyManager::start(
        registry,
        db.policies.clone(),
        PolicyRunner::new(gw.policy_concurrency),
        metrics.clone(),
        boot,
    )
    .await
    .context("activating the policy (stored, or the start-up chain)")?;
    let config = Arc::new(config);
    let queue = QueueBoard::new();
    let cluster = Cluster::new(client, &config.k8s.namespace, capacity.clone());
    let admission = Admission::new(config.clone(), capacity, queue.clone(), policies.clone());
    let jobs = Jobs::new(
        config.clone(),
        db.jobs.clone(),
        metrics.clone(),
        queue,
        admission,
        cluster,
        objects,
    );
    Ok(AppState {
        config,
        tokens: Arc::new(tokens),
        jobs,
        policies,
        metrics,
        local_objects,
    })
}

/// The background controllers; aborted when dropped.
pub struct Controllers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Controllers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Start the dispatcher, the lifecycle controller and the policy sync (other
/// replicas' policy changes).
pub fn spawn_controllers(state: &AppState) -> Controllers {
    Controllers {
        tasks: vec![
            jobs::dispatch::spawn(state.jobs.clone()),
            jobs::lifecycle::spawn(state.jobs.clone()),
            state
                .policies
                .spawn_sync(Duration::from_millis(state.config.gateway.policy_sync_ms)),
        ],
    }
}
