//! The emulator as a library: [`SimConfig`] describes the cluster, [`Sim::start`]
//! binds the HTTP listener, seeds namespaces and nodes, runs the garbage collector and
//! starts the simulated controllers (`controllers::run`) against the server through a
//! real `kube::Client`. A kubelet scratch root the simulator had to create is removed
//! again when the [`Sim`] is shut down or dropped, so runs leave nothing in `/tmp`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controllers::{self, ControllerConfig};
use crate::endpoints::PodEndpoints;
use crate::faults::Faults;
use crate::logs::LogStore;
use crate::nodes::{LayoutError, NodeSpec};
use crate::resources::{NAMESPACES, NODES};
use crate::server::{AppState, Shared, router, serve};
use crate::store::Store;
use crate::tls::{ServingCert, TlsError};

/// Errors starting or driving the emulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Could not bind the listener.
    #[error("bind {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// Seeding a namespace or node failed.
    #[error("seed {what}: {message}")]
    Seed {
        /// Object being seeded.
        what: String,
        /// Why.
        message: String,
    },
    /// Building the kube client failed.
    #[error("kube client: {0}")]
    Client(#[from] kube::Error),
    /// Writing the kubeconfig failed.
    #[error("write kubeconfig {path}: {source}")]
    Write {
        /// Target path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Creating the kubelet's scratch root failed.
    #[error("create scratch root {path}: {source}")]
    Scratch {
        /// The scratch root.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Creating the serving certificate (token-protected emulators serve HTTPS).
    #[error("serving certificate: {0}")]
    Tls(#[from] TlsError),
    /// Bad `--nodes` layout string.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// Emulator configuration.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Listen address (`127.0.0.1:0` for an ephemeral port).
    pub listen: SocketAddr,
    /// Namespaces created at start (default `["starforge"]`). The first one is the
    /// kubeconfig's and client's default namespace.
    pub namespaces: Vec<String>,
    /// Nodes created at start.
    pub nodes: Vec<NodeSpec>,
    /// Node label key holding the GPU series (default `starforge/gpu-series`).
    pub gpu_node_label: String,
    /// Configuration of the simulated operator, scheduler and kubelet (run mode...).
    pub controllers: ControllerConfig,
    /// Whether to start the simulated controllers (off: a bare API server).
    pub run_controllers: bool,
    /// Watch events retained; watches from older resourceVersions get 410 Gone.
    pub event_window: usize,
    /// BOOKMARK interval for watches that allow bookmarks.
    pub bookmark_interval: Duration,
    /// Bearer token every request must carry (401 `Unauthorized` otherwise), like a
    /// real API server with token authentication. The server then speaks HTTPS with a
    /// CA generated at start ([`Sim::ca_pem`]; client-go sends no credentials over
    /// plain http); the kubeconfig and [`Sim::client`] carry the token and the CA.
    /// `None` (the default): plain HTTP, any request is accepted, and the kubeconfig
    /// carries the placeholder [`TOKEN`].
    pub token: Option<String>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            namespaces: vec!["starforge".into()],
            nodes: Vec::new(),
            gpu_node_label: "starforge/gpu-series".into(),
            controllers: ControllerConfig::default(),
            run_controllers: true,
            event_window: 20_000,
            bookmark_interval: Duration::from_secs(1),
            token: None,
        }
    }
}

/// A running emulator.
#[derive(Debug)]
pub struct Sim {
    addr: SocketAddr,
    namespace: String,
    /// The token the kubeconfig and client carry (the required one, if configured).
    token: String,
    /// The serving certificate when the server speaks HTTPS.
    tls: Option<ServingCert>,
    store: Arc<Store>,
    faults: Arc<Faults>,
    logs: Arc<LogStore>,
    endpoints: Arc<PodEndpoints>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// Where the kubelet keeps pods' volumes, `bin`s and working directories.
    scratch_root: PathBuf,
    /// The kubelet's scratch root when the simulator created it (removed on drop).
    /// Declared last so it is removed after everything else has been dropped.
    scratch: Option<ScratchDir>,
}

/// A directory the simulator created; removed (recursively, best effort) on drop.
#[derive(Debug)]
struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `path` if it does not exist yet and returns the guard that removes it;
    /// `None` if it already existed (then it is the caller's).
    fn claim(path: &Path) -> Result<Option<Self>, SimError> {
        if path.exists() {
            return Ok(None);
        }
        std::fs::create_dir_all(path).map_err(|source| SimError::Scratch {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Some(Self(path.to_path_buf())))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), error = %e, "removing kubesim scratch root");
            }
        }
    }
}

/// Bearer token written to the kubeconfig when no token is configured (the server
/// then accepts any token).
pub const TOKEN: &str = "kubesim";

impl Sim {
    /// Binds, seeds namespaces and nodes, and starts the server, garbage collector and
    /// (if enabled) the simulated controllers.
    pub async fn start(cfg: SimConfig) -> Result<Self, SimError> {
        let logs = Arc::new(LogStore::new());
        let store = Arc::new(Store::new(cfg.event_window, logs.clone()));
        let faults = Arc::new(Faults::new(store.clone()));
        for ns in &cfg.namespaces {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            store
                .create(NAMESPACES, "", obj)
                .map_err(|e| SimError::Seed {
                    what: format!("namespace {ns}"),
                    message: e.to_string(),
                })?;
        }
        for node in &cfg.nodes {
            store
                .create(NODES, "", node.to_node(&cfg.gpu_node_label))
                .map_err(|e| SimError::Seed {
                    what: format!("node {}", node.name),
                    message: e.to_string(),
                })?;
        }
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|source| SimError::Bind {
                addr: cfg.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SimError::Bind {
            addr: cfg.listen,
            source,
        })?;
        let tls = match cfg.token {
            Some(_) => Some(ServingCert::generate(addr.ip())?),
            None => None,
        };
        let shutdown = CancellationToken::new();
        let endpoints = Arc::new(PodEndpoints::default());
        let proxy_client =
            reqwest::Client::builder()
                .no_proxy()
                .build()
                .map_err(|e| SimError::Seed {
                    what: "pod proxy client".into(),
                    message: e.to_string(),
                })?;
        let dashboard = Arc::new(controllers::Dashboard::for_config(&cfg.controllers));
        let state = AppState::new(Shared {
            store: store.clone(),
            faults: faults.clone(),
            logs: logs.clone(),
            shutdown: shutdown.clone(),
            bookmark_interval: cfg.bookmark_interval,
            address: addr.to_string(),
            token: cfg.token.as_deref().map(Arc::from),
            endpoints: endpoints.clone(),
            dashboard: dashboard.clone(),
            proxy_client,
        });
        let app = router(state);
        let mut tasks = Vec::new();
        let stop = shutdown.clone();
        let server_tls = tls.as_ref().map(|t| t.server.clone());
        let server_faults = faults.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = serve(listener, app, server_tls, stop, server_faults).await {
                tracing::error!(error = %e, "kubesim server stopped");
            }
        }));
        let gc_store = store.clone();
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = gc_store.gc_wanted() => {}
                }
                let changes = gc_store.gc_pass();
                tracing::debug!(changes, "garbage collector pass");
            }
        }));
        let namespace = cfg
            .namespaces
            .first()
            .cloned()
            .unwrap_or_else(|| "default".into());
        let sim = Self {
            addr,
            namespace,
            token: cfg.token.clone().unwrap_or_else(|| TOKEN.to_owned()),
            tls,
            store,
            faults,
            logs,
            endpoints,
            shutdown,
            tasks,
            scratch_root: cfg.controllers.scratch_root.clone(),
            scratch: None,
        };
        if cfg.run_controllers {
            let mut sim = sim;
            // Only the controllers (the kubelet) write to the scratch root.
            sim.scratch = ScratchDir::claim(&cfg.controllers.scratch_root)?;
            let client = sim.client()?;
            let logs = sim.logs.clone();
            let endpoints = sim.endpoints.clone();
            let stop = sim.shutdown.clone();
            let ccfg = cfg.controllers.clone();
            let handle = tokio::spawn(async move {
                let run = controllers::run(client, ccfg, logs, endpoints, dashboard, stop);
                if let Err(e) = run.await {
                    tracing::error!(error = %e, "kubesim controllers stopped");
                }
            });
            sim.tasks.push(handle);
            return Ok(sim);
        }
        Ok(sim)
    }

    /// Server URL (`http://127.0.0.1:PORT`, or `https://` with a token).
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The kubelet's scratch root (pods' volumes and working directories; a Ray node's
    /// processes have their pod's `ray-bin` under it first on `PATH`).
    pub fn scratch_root(&self) -> &Path {
        &self.scratch_root
    }

    /// The PEM of the CA that signed the serving certificate (HTTPS, i.e. with a
    /// token), what a client given only [`Sim::url`] and [`Sim::token`] must trust.
    pub fn ca_pem(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.ca_pem.as_str())
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Default namespace (the first configured one).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The bearer token clients of this server use: the configured
    /// [`SimConfig::token`], else the placeholder [`TOKEN`].
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A kubeconfig for this server (context `kubesim`, user `kubesim` with
    /// [`Sim::token`], the CA as `certificate-authority-data` over HTTPS).
    pub fn kubeconfig_yaml(&self) -> String {
        let mut cluster = json!({"server": self.url()});
        if let Some(ca) = self.ca_pem() {
            use base64::Engine as _;
            cluster["certificate-authority-data"] =
                json!(base64::engine::general_purpose::STANDARD.encode(ca));
        }
        let kubeconfig = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubesim", "cluster": cluster}],
            "contexts": [{"name": "kubesim", "context": {
                "cluster": "kubesim", "user": "kubesim", "namespace": self.namespace}}],
            "current-context": "kubesim",
            "users": [{"name": "kubesim", "user": {"token": self.token}}],
            "preferences": {},
        });
        serde_yaml::to_string(&kubeconfig).expect("a JSON value serializes to YAML")
    }

    /// Writes [`Sim::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), SimError> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| SimError::Write {
            path: path.display().to_string(),
            source,
        })
    }

    /// A `kube::Client` for this server, defaulting to [`Sim::namespace`].
    pub fn client(&self) -> Result<kube::Client, SimError> {
        Ok(kube::Client::try_from(self.config()?)?)
    }

    /// The `kube::Config` of [`Sim::client`] (for a client that adds to it: headers, say).
    pub fn config(&self) -> Result<kube::Config, SimError> {
        let uri: axum::http::Uri =
            self.url()
                .parse()
                .map_err(|e: axum::http::uri::InvalidUri| SimError::Seed {
                    what: "url".into(),
                    message: e.to_string(),
                })?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = self.namespace.clone();
        config.root_cert = self.tls.as_ref().map(|t| vec![t.ca_der.clone()]);
        config.auth_info =
            serde_json::from_value(json!({ "token": self.token })).map_err(|e| SimError::Seed {
                what: "client credentials".into(),
                message: e.to_string(),
            })?;
        Ok(config)
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Every object of `resource` (a plural) the API server ever created, oldest
    /// first — its audit trail, which no dropped watch can hide.
    pub fn created(&self, resource: &str) -> Vec<crate::store::Created> {
        self.store.created(resource)
    }

    /// Pod log store (what the simulated kubelet writes).
    pub fn logs(&self) -> &Arc<LogStore> {
        &self.logs
    }

    /// Current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store.current_rv()
    }

    /// Stops the server, watches, garbage collector and controllers, then removes the
    /// scratch root if the simulator created it.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        for t in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout(Duration::from_secs(5), t)
                .await
                .is_err()
            {
                tracing::warn!("kubesim task did not stop within 5s");
            }
        }
    }
}

impl Drop for Sim {
    /// Cancels everything; the scratch root (if the simulator created it) is removed
    /// right after, when the `scratch` field is dropped. Without [`Sim::shutdown`] the
    /// cancelled tasks are not awaited first, so removal is best effort there.
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_controllers(scratch_root: PathBuf) -> SimConfig {
        SimConfig {
            controllers: ControllerConfig {
                scratch_root,
                ..ControllerConfig::default()
            },
            ..SimConfig::default()
        }
    }

    #[test]
    fn default_scratch_roots_are_distinct() {
        let a = ControllerConfig::default().scratch_root;
        let b = ControllerConfig::default().scratch_root;
        assert_ne!(a, b);
        let prefix = format!("forge-kubesim-{}-", std::process::id());
        for p in [&a, &b] {
            let name = p.file_name().and_then(|n| n.to_str()).expect("name");
            assert!(name.starts_with(&prefix), "{name}");
        }
    }

    #[tokio::test]
    async fn created_scratch_root_is_removed_on_shutdown() {
        let cfg = SimConfig::default();
        let root = cfg.controllers.scratch_root.clone();
        assert!(!root.exists());
        let sim = Sim::start(cfg).await.expect("start");
        assert!(root.is_dir(), "scratch root created at start");
        std::fs::create_dir_all(root.join("jobs/ns/id")).expect("write into scratch");
        sim.shutdown().await;
        assert!(!root.exists(), "{} left behind", root.display());
    }

    #[tokio::test]
    async fn created_scratch_root_is_removed_on_drop() {
        let cfg = SimConfig::default();
        let root = cfg.controllers.scratch_root.clone();
        let sim = Sim::start(cfg).await.expect("start");
        std::fs::write(root.join("marker"), b"x").expect("write into scratch");
        drop(sim);
        assert!(!root.exists(), "{} left behind", root.display());
    }

    #[tokio::test]
    async fn existing_scratch_root_is_left_in_place() {
        let root = std::env::temp_dir().join(format!(
            "forge-kubesim-test-existing-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&root).expect("create");
        let sim = Sim::start(with_controllers(root.clone()))
            .await
            .expect("start");
        sim.shutdown().await;
        let kept = root.is_dir();
        std::fs::remove_dir_all(&root).expect("clean up");
        assert!(kept, "caller's scratch root was removed");
    }

    #[tokio::test]
    async fn bare_server_creates_no_scratch_root() {
        let cfg = SimConfig {
            run_controllers: false,
            ..SimConfig::default()
        };
        let root = cfg.controllers.scratch_root.clone();
        let sim = Sim::start(cfg).await.expect("start");
        assert!(!root.exists());
        sim.shutdown().await;
    }
}
