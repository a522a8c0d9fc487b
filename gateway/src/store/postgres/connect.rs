//! From `FORGE_DATABASE_URL` to a connection configuration and a TLS connector.
//!
//! The URL is libpq's (`postgres://user:password@host:port/db?sslmode=…`), parsed by
//! `tokio-postgres`, with libpq's TLS words mapped onto what it supports:
//! `disable` → no TLS; `allow`/`prefer` (the default) → TLS when the server offers it;
//! `require`/`verify-ca`/`verify-full` → TLS required. Whenever TLS is used the
//! server's certificate **is verified** (rustls), against `sslrootcert=<PEM file>` when
//! given, else the system's roots — a private CA needs `sslrootcert`.
//!
//! Several hosts (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`)
//! name a primary and its standbys: each connection goes to the first that accepts
//! writes, so after a failover new connections find the promoted one.
//!
//! Every session gets `idle_in_transaction_session_timeout` (a frozen or partitioned
//! replica cannot hold row locks — on the lease, say — past a few seconds), the
//! application name `forge-gateway`, a connect timeout and TCP keepalives.

use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::store::StoreError;

/// Longest a transaction may sit idle (its client frozen or gone) before the server
/// ends the session and releases its locks.
pub const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// How a URL asks for TLS.
fn ssl_mode(word: &str) -> Result<SslMode, StoreError> {
    match word {
        "disable" => Ok(SslMode::Disable),
        "allow" | "prefer" => Ok(SslMode::Prefer),
        "require" | "verify-ca" | "verify-full" => Ok(SslMode::Require),
        other => Err(StoreError::Config(format!(
            "unknown sslmode `{other}` (disable, prefer, require, verify-ca, verify-full)"
        ))),
    }
}

/// The rustls client configuration: `sslrootcert`'s certificates, or the system's.
fn tls(root_cert: Option<&str>) -> Result<MakeRustlsConnect, StoreError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| StoreError::Config(format!("sslrootcert {path}: {e}")))?;
            roots.add_parsable_certificates(certs);
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Config(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// The connection configuration and TLS connector of a `postgres://` URL.
pub fn config(url: &str) -> Result<(tokio_postgres::Config, MakeRustlsConnect), StoreError> {
    let bad = StoreError::Config;
    // Not `url::Url`: libpq's URLs may list several hosts (`h1:5432,h2:5432`), which
    // is no URL authority; tokio-postgres parses them, the query is ours to rewrite.
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    match base.split_once("://") {
        Some(("postgres" | "postgresql", _)) => {}
        Some((scheme, _)) => {
            return Err(bad(format!("scheme `{scheme}`; expected postgres://")));
        }
        None => return Err(bad("not a postgres:// URL".into())),
    }
    let mut mode = SslMode::Prefer;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "sslmode" => mode = ssl_mode(&v)?,
            "sslrootcert" => root_cert = Some(v.into_owned()),
            "sslcert" | "sslkey" => {
                return Err(bad(format!(
                    "`{k}` (client certificates) is not supported; use a password"
                )));
            }
            _ => kept.push((k.into_owned(), v.into_owned())),
        }
    }
    let rebuilt = if kept.is_empty() {
        base.to_string()
    } else {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(kept)
            .finish();
        format!("{base}?{query}")
    };
    let mut cfg: tokio_postgres::Config = rebuilt
        .parse()
        .map_err(|e: tokio_postgres::Error| bad(e.to_string()))?;
    cfg.ssl_mode(mode);
    let timeout = format!(
        "-c idle_in_transaction_session_timeout={}",
        IDLE_IN_TRANSACTION.as_millis()
    );
    let options = match cfg.get_options() {
        Some(o) if !o.is_empty() => format!("{o} {timeout}"),
        _ => timeout,
    };
    cfg.options(options);
    if cfg.get_application_name().is_none() {
        cfg.application_name("forge-gateway");
    }
    if cfg.get_connect_timeout().is_none() {
        cfg.connect_timeout(Duration::from_secs(5));
    }
    cfg.keepalives_idle(Duration::from_secs(30));
    Ok((cfg, tls(root_cert.as_deref())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_libpq_tls_words_and_keeps_the_rest() {
        let (cfg, _) = config("postgres://forge:pw@db.internal:6543/forge?sslmode=verify-full")
            .expect("config");
        assert_eq!(cfg.get_ssl_mode(), SslMode::Require);
        assert_eq!(cfg.get_dbname(), Some("forge"));
        assert_eq!(cfg.get_ports(), &[6543]);
        assert!(
            cfg.get_options()
                .is_some_and(|o| o.contains("idle_in_transaction_session_timeout=5000"))
        );
        assert_eq!(cfg.get_application_name(), Some("forge-gateway"));
        let (cfg, _) =
            config("postgresql://u@h/d?sslmode=disable&application_name=x").expect("config");
        assert_eq!(cfg.get_ssl_mode(), SslMode::Disable);
        assert_eq!(cfg.get_application_name(), Some("x"));
    }

    #[test]
    fn lists_several_hosts_for_a_failover() {
        let (cfg, _) = config(
            "postgres://forge@10.0.0.1:5432,10.0.0.2:5433/forge?target_session_attrs=read-write&sslmode=disable",
        )
        .expect("config");
        assert_eq!(cfg.get_ports(), &[5432, 5433]);
        assert_eq!(cfg.get_hosts().len(), 2);
        assert_eq!(
            cfg.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(cfg.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for url in [
            "mysql://u@h/d",
            "postgres://u@h/d?sslmode=sometimes",
            "postgres://u@h/d?sslcert=/c.pem",
            "postgres://u@h/d?sslrootcert=/nonexistent.pem",
            "not a url",
        ] {
            assert!(config(url).is_err(), "{url} was accepted");
        }
    }
}
