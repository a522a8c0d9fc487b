//! Composition shared by `serve`, `dev` and the tests: from a validated [`Config`],
//! tokens, a Kubernetes client, a policy chain and a capsule backend to a ready
//! [`AppState`] (the store opened and its installation identity read, the capacity
//! caches started, the policy restored, leadership prepared); the background
//! controllers are in [`crate::controllers`]. One constructor, so the binary's modes
//! and the tests cannot drift.
//!
//! An edge of the crate: errors are `anyhow` with context.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use forge_policy_host::model::FleetView;
use forge_policy_host::{EngineLimits, PolicyEngine, PolicyRunner};
use url::Url;

use crate::admission::Admission;
use crate::admission::usage::UsageBoard;
use crate::cluster::lease::LeaseMirror;
use crate::cluster::{Capacity, Cluster, Fleets, NodeConventions};
use crate::config::Config;
use crate::jobs::capsule_links::{self as links, CapsuleLinks};
use crate::jobs::job_access::{self, JobAccess};
use crate::jobs::pod_links::PodLinks;
use crate::jobs::{JobParts, Jobs, QueueBoard};
use crate::leader::{Leadership, Timings};
use crate::live_tokens::LiveTokens;
use crate::metrics::Metrics;
use crate::objects::{LocalStore, ObjectStore};
use crate::playground::Playgrounds;
use crate::policy::{BootLink, PolicyManager, Registry, RegistryLimits};
use crate::state::{AppState, Shared};
use crate::store::Database;
use crate::store::coord::generate_instance;
use crate::uploads::{UploadLimits, Uploads};

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
            max_deadline: Duration::from_millis(cfg.gateway.policy_max_deadline_ms),
            max_memory_cap_bytes: usize::try_from(cfg.gateway.policy_max_memory_mib << 20)
                .unwrap_or(usize::MAX),
            max_component_bytes: usize::try_from(cfg.gateway.plugin_max_kib << 10)
                .unwrap_or(usize::MAX),
            compile: forge_policy_host::CompileLimits {
                workers: cfg.gateway.plugin_compile_workers,
                timeout: Duration::from_secs(cfg.gateway.plugin_compile_timeout_s),
                ..forge_policy_host::CompileLimits::default()
            },
            isolation: cfg.gateway.policy_isolation,
            verify: forge_policy_host::Verify {
                every: cfg.gateway.policy_verify_every,
            },
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

/// A client of each fleet the gateway drives, in [`Config::fleets`]' order:
/// `FORGE_FLEETS_FILE`'s fleets, or the `FORGE_K8S_*` settings' one. The first fleet's
/// namespace becomes the gateway's own (its leader Lease, its playgrounds).
pub async fn connect_fleets(cfg: &mut Config) -> anyhow::Result<Vec<kube::Client>> {
    let fleets = cfg.fleets();
    let first = fleets.first().context("no fleet is configured")?;
    cfg.k8s.namespace = first.namespace_in(cfg).to_string();
    let mut clients = Vec::with_capacity(fleets.len());
    for fleet in &fleets {
        let (client, source) = crate::cluster::connect::fleet_client(fleet, cfg)
            .await
            .with_context(|| format!("connecting to fleet `{}`", fleet.name))?;
        tracing::info!(fleet = %fleet.name, namespace = %fleet.namespace_in(cfg), "Kubernetes API: {}", source.as_str());
        clients.push(client);
    }
    Ok(clients)
}

/// Each fleet's cluster adapter, with its capacity caches started: `clients` are the
/// fleets' of [`Config::fleets`], in its order.
fn start_fleets(
    config: &Config,
    clients: Vec<kube::Client>,
    instance: &str,
) -> anyhow::Result<Fleets> {
    let fleets = config.fleets();
    anyhow::ensure!(
        fleets.len() == clients.len(),
        "{} fleets are configured and {} clients given",
        fleets.len(),
        clients.len()
    );
    let clusters = fleets
        .into_iter()
        .zip(clients)
        .map(|(fleet, client)| {
            let capacity = Capacity::start(
                client.clone(),
                NodeConventions {
                    gpu_label: config.k8s.gpu_node_label.clone(),
                    pods: config.pods.clone(),
                },
                FleetView {
                    name: fleet.name.clone(),
                    labels: fleet.labels.clone(),
                    available: true,
                    ..FleetView::default()
                },
            );
            Cluster::new(
                &fleet.name,
                client,
                fleet.namespace_in(config),
                capacity,
                instance,
            )
        })
        .collect();
    Ok(Fleets::new(clusters)?)
}

/// The database: PostgreSQL when `FORGE_DATABASE_URL` is set (retried for a while: a
/// database that is still starting is not a reason to crash), else SQLite in the data
/// directory.
pub async fn open_database(config: &Config) -> anyhow::Result<Database> {
    let Some(url) = &config.database.url else {
        let path = config.gateway.store_path();
        return Database::open_sqlite(&path).with_context(|| format!("opening {}", path.display()));
    };
    let mut delay = Duration::from_millis(250);
    let deadline = std::time::Instant::now() + DATABASE_WAIT;
    loop {
        match Database::open_postgres(url.expose()).await {
            Ok(db) => return Ok(db),
            Err(e) if std::time::Instant::now() < deadline => {
                tracing::warn!("connecting to PostgreSQL (FORGE_DATABASE_URL): {e}; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                return Err(e).context(format!(
                    "connecting to PostgreSQL (FORGE_DATABASE_URL) for {DATABASE_WAIT:?}"
                ));
            }
        }
    }
}

/// How long start-up keeps trying an unreachable PostgreSQL.
const DATABASE_WAIT: Duration = Duration::from_secs(60);

/// Build the application state: store, capacity caches, policy, capsules. `boot` is
/// the global chain to start with when the store has none yet (a fresh data dir);
/// otherwise the stored active policy is restored. The steps: the data directory and
/// the store, object storage, the policy, then the domains over them.
pub async fn build_state(
    config: Config,
    tokens: Arc<LiveTokens>,
    clients: Vec<kube::Client>,
    boot: Vec<BootLink>,
    capsules: CapsuleBackend,
) -> anyhow::Result<AppState> {
    std::fs::create_dir_all(&config.gateway.data_dir)
        .with_context(|| format!("creating {}", config.gateway.data_dir.display()))?;
    crate::spool::sweep(&config.gateway.data_dir).context("sweeping the spool")?;
    forget_local_upload_sessions(&config.gateway.data_dir);
    let db = open_database(&config).await?;
    let instance = db
        .coord
        .instance(config.database.instance.clone(), generate_instance())
        .await
        .context("the installation identity (FORGE_INSTANCE)")?;
    tracing::info!(%instance, backend = db.backend.as_str(), "store opened");
    let storage = open_storage(&config, capsules)?;
    let metrics = Arc::new(Metrics::new());
    let policies =
        start_policies(&config, &db, storage.objects.clone(), metrics.clone(), boot).await?;
    let config = Arc::new(config);
    let fleets = start_fleets(&config, clients, &instance)?;
    let leadership = Leadership::new(
        replica_identity(&config),
        Timings::from_config(&config.leader),
        db.coord.clone(),
        Some(LeaseMirror::new(
            fleets.first().client.clone(),
            &config.k8s.namespace,
        )),
        metrics.clone(),
    );
    let admission = Admission::new(
        config.clone(),
        fleets.capacity().clone(),
        UsageBoard::new(),
        policies.clone(),
    );
    let uploads = open_uploads(&config, &db, storage.objects.clone(), metrics.clone());
    let playgrounds = Playgrounds::new(
        config.clone(),
        db.playgrounds.clone(),
        admission.clone(),
        fleets.first().playgrounds.clone(),
        &instance,
        metrics.clone(),
    );
    let links = match storage.link_base {
        Some(base) => Some(pod_links(&db, base).await?),
        None => None,
    };
    let job_store = crate::store::metered::Metered::wrap(db.jobs.clone(), metrics.clone());
    // On PostgreSQL this starts the task that tails the stored feed (it ends with the
    // feed); on SQLite the feed is this process's own.
    let feed = crate::jobs::feed_tail::feed_for(&job_store)
        .await
        .context("reading the stored job feed's head")?;
    let jobs = Jobs::new(JobParts {
        config: config.clone(),
        store: job_store,
        feed,
        capsules: db.capsules.clone(),
        metrics: metrics.clone(),
        queue: QueueBoard::new(),
        admission,
        fleets,
        objects: storage.objects,
        links,
    });
    Ok(AppState::new(Shared {
        config,
        tokens,
        jobs,
        playgrounds,
        policies,
        metrics,
        uploads,
        local_objects: storage.local,
        database: db,
        leadership,
        shutdown: crate::shutdown::Shutdown::default(),
    }))
}

/// Object storage as the configuration chose it.
struct Storage {
    objects: Arc<dyn ObjectStore>,
    /// The local store, whose signed URLs the gateway serves itself.
    local: Option<Arc<LocalStore>>,
    /// The URL pods reach the gateway at: capsule links go under it.
    link_base: Option<Url>,
}

fn open_storage(config: &Config, capsules: CapsuleBackend) -> anyhow::Result<Storage> {
    let link_base = match (&config.gateway.public_url, &capsules) {
        (Some(url), _) => Some(Url::parse(url).context("FORGE_PUBLIC_URL")?),
        (None, CapsuleBackend::Local { base_url }) => Some(base_url.clone()),
        (None, CapsuleBackend::S3(_)) => None,
    };
    let (objects, local): (Arc<dyn ObjectStore>, _) = match capsules {
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
    Ok(Storage {
        objects,
        local,
        link_base,
    })
}

/// The plugin registry and the active policy (stored, or the start-up chain).
async fn start_policies(
    config: &Config,
    db: &Database,
    objects: Arc<dyn ObjectStore>,
    metrics: Arc<Metrics>,
    boot: Vec<BootLink>,
) -> anyhow::Result<Arc<PolicyManager>> {
    let gw = &config.gateway;
    let registry = Registry::new(
        policy_engine(config)?,
        objects,
        db.policies.clone(),
        RegistryLimits {
            max_plugin_bytes: gw.plugin_max_kib << 10,
            team_max_count: gw.team_plugin_max_count,
            team_max_bytes: gw.team_plugin_max_mib << 20,
            failed_uploads_per_hour: gw.plugin_failed_uploads_per_hour,
            max_chain_links: gw.policy_max_chain_links,
        },
    );
    PolicyManager::start(
        registry,
        db.policies.clone(),
        PolicyRunner::new(gw.policy_concurrency),
        metrics,
        boot,
    )
    .await
    .context("activating the policy (stored, or the start-up chain)")
}

/// Removes `<data dir>/uploads`, where gateways before upload sessions moved to the
/// store kept them: nothing reads them any more (a client resumes by starting again).
fn forget_local_upload_sessions(data_dir: &std::path::Path) {
    let old = data_dir.join("uploads");
    if old.is_dir() {
        tracing::info!(dir = %old.display(), "removing upload sessions of an earlier version (sessions are in the store now)");
        if let Err(e) = std::fs::remove_dir_all(&old) {
            tracing::warn!(dir = %old.display(), "removing them failed: {e}");
        }
    }
}

/// The resumable upload sessions (in the store, their bytes in object storage).
fn open_uploads(
    config: &Config,
    db: &Database,
    objects: Arc<dyn ObjectStore>,
    metrics: Arc<Metrics>,
) -> Uploads {
    Uploads::new(
        crate::spool::dir(&config.gateway.data_dir),
        objects,
        db.uploads.clone(),
        db.capsules.clone(),
        metrics,
        UploadLimits {
            max_sessions_per_team: config.gateway.upload_max_sessions,
            ttl: Duration::from_secs(config.gateway.upload_ttl_s),
            max_size: crate::uploads::max_upload_size(),
            // Room for the request's own framing within the body limit.
            max_chunk: (config.gateway.max_body_bytes() as u64)
                .saturating_sub(64 << 10)
                .min(crate::uploads::MAX_CHUNK_BYTES),
        },
    )
}

/// Capsule links and job access under `base`, each signed with its own key shared by
/// the installation's replicas.
async fn pod_links(db: &Database, base: Url) -> anyhow::Result<PodLinks> {
    let capsule_key = shared_key(db, links::KEY_NAME).await?;
    let job_key = shared_key(db, job_access::KEY_NAME).await?;
    Ok(PodLinks {
        capsules: CapsuleLinks::new(&capsule_key, base.clone()),
        jobs: JobAccess::new(&job_key, base),
    })
}

/// The signing key `name` every replica shares: a random 32-byte key the first replica
/// records in the database's metadata, hex.
async fn shared_key(db: &Database, name: &str) -> anyhow::Result<Vec<u8>> {
    let generated = hex::encode(rand::random::<[u8; 32]>());
    let key = db
        .coord
        .shared_value(name, generated)
        .await
        .with_context(|| format!("the shared key `{name}`"))?;
    hex::decode(key).with_context(|| format!("the stored key `{name}` is not hex"))
}

/// This replica's identity in the leader lease: `FORGE_REPLICA`, else the host name.
fn replica_identity(config: &Config) -> String {
    config.database.replica.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| format!("forge-gateway-{}", std::process::id()))
    })
}

pub use crate::controllers::{Controllers, spawn_controllers};

/// Serves until SIGTERM (what Kubernetes sends) or SIGINT, then ends the open event
/// streams and drains in-flight requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    shutdown: crate::shutdown::Shutdown,
) -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            }
            shutdown.begin();
        })
        .await
        .context("serving HTTP")
}
