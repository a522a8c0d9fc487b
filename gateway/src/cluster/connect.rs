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

use std::path::Path;

use crate::config::K8sConfig;

/// Where the connection settings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `FORGE_K8S_API_SERVER` and friends.
    Environment,
    /// The pod's ServiceAccount.
    InCluster,
    /// A kubeconfig file.
    Kubeconfig,
}

impl Source {
    /// How logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Environment => "FORGE_K8S_API_SERVER",
            Source::InCluster => "in-cluster ServiceAccount",
            Source::Kubeconfig => "kubeconfig",
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
