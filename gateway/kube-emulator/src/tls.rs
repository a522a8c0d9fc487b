//! The serving certificate of a token-protected emulator. client-go (kubectl) never
//! sends credentials to a plain `http://` server, so an emulator that requires a
//! bearer token serves HTTPS, like a real API server: a throwaway CA generated at
//! start signs a certificate for `localhost`, `127.0.0.1` and the listen address; the
//! kubeconfig carries the CA (`certificate-authority-data`) and `Sim::client()` trusts it.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Errors creating the serving certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or certificate failed.
    #[error("generate certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The TLS configuration was refused.
    #[error("tls config: {0}")]
    Config(#[from] rustls::Error),
}

/// A CA and a server configuration with a certificate it signed.
#[derive(Clone)]
pub struct ServingCert {
    /// The CA certificate, PEM (what clients trust).
    pub ca_pem: String,
    /// The CA certificate, DER.
    pub ca_der: Vec<u8>,
    /// The rustls server configuration (HTTP/1.1; the leaf and its key).
    pub server: Arc<ServerConfig>,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

impl ServingCert {
    /// A fresh CA and a leaf for `localhost`, `127.0.0.1` and `ip`.
    pub fn generate(ip: IpAddr) -> Result<Self, TlsError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "forge-kubesim-ca");
        ca_params.distinguished_name = dn;
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;

        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        if !ip.is_unspecified() && !names.contains(&ip.to_string()) {
            names.push(ip.to_string());
        }
        let mut leaf_params = CertificateParams::new(names)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        leaf_params.distinguished_name = dn;
        let leaf_key = KeyPair::generate()?;
        let leaf = leaf_params.signed_by(&leaf_key, &ca)?;

        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut server = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())],
                key,
            )?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().to_vec(),
            server: Arc::new(server),
        })
    }
}
