//! How the gateway reaches the API server, in order:
//!
//! 1. **`FORGE_K8S_API_SERVER`** (+ `FORGE_K8S_TOKEN`, + `FORGE_K8S_CA_FILE` or
//!    `FORGE_K8S_INSECURE_SKIP_TLS_VERIFY`): exactly that server with that bearer
//!    token — nothing else is read;
//! 2. **in-cluster**: the pod's ServiceAccount (token and CA files, re-read when
//!    rotated) when `KUBERNETES_SERVICE_HOST` is set;
//! 3. **kubeconfig** (`KUBECONFIG` or `~/.kube/config`).
//!
//! Each ends with a client whose default namespace is `FORGE_K8S_NAMESPACE`.
//!
//! A fleet of `FORGE_FLEETS_FILE` ([`fleet_client`]) is reached exactly as its entry
//! says — its kubeconfig (at its context), or its API server with its token file
//! (re-read by the client when rotated) and CA file — and its client's default
//! namespace is the fleet's.

use std::path::Path;

use crate::config::{Config, FleetConfig, FleetConnection, K8sConfig};

/// Where the connection settings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `FORGE_K8S_API_SERVER` and friends.
    Environment,
    /// The pod's ServiceAccount.
    InCluster,
    /// A kubeconfig file.
    Kubeconfig,
    /// A fleet's entry in `FORGE_FLEETS_FILE`.
    FleetsFile,
}

impl Source {
    /// How logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Environment => "FORGE_K8S_API_SERVER",
            Source::InCluster => "in-cluster ServiceAccount",
            Source::Kubeconfig => "kubeconfig",
            Source::FleetsFile => "FORGE_FLEETS_FILE",
        }
    }
}

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `FORGE_K8S_API_SERVER` is not a URI the client accepts.
    #[error("FORGE_K8S_API_SERVER: {0}")]
    ApiServer(String),
    /// `FORGE_K8S_CA_FILE` cannot be read or holds no certificate.
    #[error("FORGE_K8S_CA_FILE {path}: {reason}")]
    CaFile { path: String, reason: String },
    /// Neither in-cluster settings nor a kubeconfig were found.
    #[error(
        "no Kubernetes connection: set FORGE_K8S_API_SERVER (+ FORGE_K8S_TOKEN), run in a \
         pod, or provide a kubeconfig ({0})"
    )]
    NoConfig(String),
    /// A fleet's kubeconfig cannot be used.
    #[error("fleet {fleet}: kubeconfig {path}: {reason}")]
    Kubeconfig {
        fleet: String,
        path: String,
        reason: String,
    },
    /// The client could not be built from the settings.
    #[error("building the Kubernetes client: {0}")]
    Client(kube::Error),
}

/// The DER certificates of a PEM file.
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, ConnectError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let bad = |reason: String| ConnectError::CaFile {
        path: path.display().to_string(),
        reason,
    };
    let certs: Vec<Vec<u8>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".to_string()));
    }
    Ok(certs)
}

/// The client configuration from the settings (see the module header for the order).
pub async fn config(k8s: &K8sConfig) -> Result<(kube::Config, Source), ConnectError> {
    let (mut cfg, source) = match &k8s.api_server {
        Some(url) => {
            let uri: http::Uri = url
                .parse()
                .map_err(|e: http::uri::InvalidUri| ConnectError::ApiServer(e.to_string()))?;
            let mut cfg = kube::Config::new(uri);
            if let Some(token) = &k8s.token {
                cfg.auth_info.token = Some(token.expose().to_string().into());
            }
            if let Some(ca) = &k8s.ca_file {
                cfg.root_cert = Some(read_ca(ca)?);
                cfg.root_cert_file = Some(ca.clone());
            }
            cfg.accept_invalid_certs = k8s.insecure_skip_tls_verify;
            (cfg, Source::Environment)
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => (
            kube::Config::incluster().map_err(|e| ConnectError::NoConfig(e.to_string()))?,
            Source::InCluster,
        ),
        None => (
            kube::Config::from_kubeconfig(&kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| ConnectError::NoConfig(e.to_string()))?,
            Source::Kubeconfig,
        ),
    };
    cfg.default_namespace.clone_from(&k8s.namespace);
    identify(&mut cfg);
    Ok((cfg, source))
}

/// The client configuration of `fleet` (see the module header).
pub async fn fleet_config(
    fleet: &FleetConfig,
    config: &Config,
) -> Result<(kube::Config, Source), ConnectError> {
    let mut cfg = match &fleet.connection {
        FleetConnection::Settings => return self::config(&config.k8s).await,
        FleetConnection::Kubeconfig { path, context } => {
            let bad = |reason: String| ConnectError::Kubeconfig {
                fleet: fleet.name.clone(),
                path: path.display().to_string(),
                reason,
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(e.to_string()))?;
            let options = kube::config::KubeConfigOptions {
                context: context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| bad(e.to_string()))?
        }
        FleetConnection::ApiServer {
            url,
            token_file,
            ca_file,
            insecure_skip_tls_verify,
        } => {
            let uri: http::Uri = url
                .parse()
                .map_err(|e: http::uri::InvalidUri| ConnectError::ApiServer(e.to_string()))?;
            let mut cfg = kube::Config::new(uri);
            cfg.auth_info.token_file = token_file.as_ref().map(|p| p.display().to_string());
            if let Some(ca) = ca_file {
                cfg.root_cert = Some(read_ca(ca)?);
                cfg.root_cert_file = Some(ca.clone());
            }
            cfg.accept_invalid_certs = *insecure_skip_tls_verify;
            cfg
        }
    };
    cfg.default_namespace = fleet.namespace_in(config).to_string();
    identify(&mut cfg);
    Ok((cfg, Source::FleetsFile))
}

/// A client of `fleet`.
pub async fn fleet_client(
    fleet: &FleetConfig,
    config: &Config,
) -> Result<(kube::Client, Source), ConnectError> {
    let (cfg, source) = fleet_config(fleet, config).await?;
    let client = kube::Client::try_from(cfg).map_err(ConnectError::Client)?;
    Ok((client, source))
}

/// The `User-Agent` of every call to the API server.
pub const USER_AGENT: &str = concat!("forge-gateway/", env!("CARGO_PKG_VERSION"));

/// Names the gateway in every call of `cfg`'s clients: the API server's audit log and
/// request metrics show it (kube-rs sends no `User-Agent` of its own).
pub fn identify(cfg: &mut kube::Config) {
    cfg.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
}

/// A client from the settings.
pub async fn client(k8s: &K8sConfig) -> Result<(kube::Client, Source), ConnectError> {
    let (cfg, source) = config(k8s).await?;
    let client = kube::Client::try_from(cfg).map_err(ConnectError::Client)?;
    Ok((client, source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn k8s(api_server: Option<&str>) -> K8sConfig {
        K8sConfig {
            api_server: api_server.map(str::to_string),
            token: Some(Secret::new("t0ken")),
            ca_file: None,
            insecure_skip_tls_verify: false,
            namespace: "forge-ns".into(),
            gpu_node_label: "starforge/gpu-series".into(),
            shm_size: "64Gi".into(),
            gpu_passthrough: true,
            operator_namespace: "ray-system".into(),
            run_as_user: None,
        }
    }

    #[tokio::test]
    async fn the_environment_wins_and_carries_the_token() {
        let (cfg, source) = config(&k8s(Some("https://10.0.0.1:6443")))
            .await
            .expect("config");
        assert_eq!(source, Source::Environment);
        assert_eq!(cfg.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(cfg.default_namespace, "forge-ns");
        assert!(cfg.auth_info.token.is_some());
        assert!(!cfg.accept_invalid_certs);
        assert!(cfg.root_cert.is_none());
    }

    /// A config of the defaults with `FORGE_K8S_NAMESPACE=forge-ns`.
    fn gateway_config() -> Config {
        let mut env = std::collections::HashMap::from([(
            "FORGE_KUBERAY_RAY_VERSION".to_string(),
            "2.55.1".to_string(),
        )]);
        env.insert("FORGE_K8S_NAMESPACE".into(), "forge-ns".into());
        Config::from_env_map(env).expect("config")
    }

    fn fleet(connection: FleetConnection, namespace: Option<&str>) -> FleetConfig {
        FleetConfig {
            name: "eu".into(),
            connection,
            namespace: namespace.map(str::to_string),
            labels: Default::default(),
        }
    }

    const KUBECONFIG: &str = "apiVersion: v1
kind: Config
current-context: one
clusters:
- name: c1
  cluster: {server: 'https://10.0.0.1:6443'}
- name: c2
  cluster: {server: 'https://10.0.0.2:6443'}
users:
- name: u
  user: {token: kubeconfig-token}
contexts:
- name: one
  context: {cluster: c1, user: u}
- name: two
  context: {cluster: c2, user: u}
";

    #[tokio::test]
    async fn a_fleet_kubeconfig_is_used_at_its_context_in_its_namespace() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("eu.kubeconfig");
        std::fs::write(&path, KUBECONFIG).expect("write");
        let config = gateway_config();
        let at = |context: Option<&str>, namespace| {
            fleet(
                FleetConnection::Kubeconfig {
                    path: path.clone(),
                    context: context.map(str::to_string),
                },
                namespace,
            )
        };
        let (cfg, source) = fleet_config(&at(None, None), &config)
            .await
            .expect("current context");
        assert_eq!(source, Source::FleetsFile);
        assert_eq!(cfg.cluster_url.to_string(), "https://10.0.0.1:6443/");
        assert_eq!(cfg.default_namespace, "forge-ns", "FORGE_K8S_NAMESPACE");
        let (cfg, _) = fleet_config(&at(Some("two"), Some("eu-jobs")), &config)
            .await
            .expect("named context");
        assert_eq!(cfg.cluster_url.to_string(), "https://10.0.0.2:6443/");
        assert_eq!(cfg.default_namespace, "eu-jobs", "the fleet's namespace");
        assert!(
            matches!(
                fleet_config(&at(Some("three"), None), &config).await,
                Err(ConnectError::Kubeconfig { ref fleet, .. }) if fleet == "eu"
            ),
            "a missing context"
        );
    }

    #[tokio::test]
    async fn a_fleet_api_server_reads_its_token_from_its_file() {
        let dir = tempfile::tempdir().expect("dir");
        let token = dir.path().join("token");
        std::fs::write(&token, "rotated-token\n").expect("write");
        let eu = fleet(
            FleetConnection::ApiServer {
                url: "https://10.0.0.3:6443".into(),
                token_file: Some(token.clone()),
                ca_file: None,
                insecure_skip_tls_verify: true,
            },
            None,
        );
        let (cfg, _) = fleet_config(&eu, &gateway_config()).await.expect("config");
        assert_eq!(cfg.cluster_url.to_string(), "https://10.0.0.3:6443/");
        assert_eq!(
            cfg.auth_info.token_file.as_deref(),
            token.to_str(),
            "named by file, so the client re-reads it when rotated"
        );
        assert!(
            cfg.auth_info.token.is_none(),
            "never copied into the config"
        );
        assert!(cfg.accept_invalid_certs);
        assert!(fleet_client(&eu, &gateway_config()).await.is_ok());
    }

    #[tokio::test]
    async fn a_ca_file_must_hold_certificates() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").expect("write");
        let mut settings = k8s(Some("https://10.0.0.1:6443"));
        settings.ca_file = Some(path);
        assert!(matches!(
            config(&settings).await,
            Err(ConnectError::CaFile { .. })
        ));
        settings.ca_file = Some(dir.path().join("missing.pem"));
        assert!(matches!(
            config(&settings).await,
            Err(ConnectError::CaFile { .. })
        ));
    }
}
