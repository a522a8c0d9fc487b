//! `FORGE_FLEETS_FILE`: the clusters ("fleets") a gateway drives, as a YAML list.
//!
//! ```yaml
//! - name: eu-west
//!   kind: kuberay
//!   kubeconfig: /etc/forge/fleets/eu-west.kubeconfig
//!   context: forge            # optional: the kubeconfig's current context otherwise
//!   labels: {region: eu}
//! - name: us-east
//!   kind: kuberay
//!   apiServer: https://10.1.0.1:6443
//!   tokenFile: /var/run/secrets/forge/us-east/token   # re-read when rotated
//!   caFile: /var/run/secrets/forge/us-east/ca.crt
//!   namespace: forge-jobs     # optional: FORGE_K8S_NAMESPACE otherwise
//! ```
//!
//! Each fleet connects either by a kubeconfig file or by an API server URL with a
//! token file and a CA file; the token is named by file, never inline, so the fleets
//! file holds no secret. Without `FORGE_FLEETS_FILE`, the `FORGE_K8S_*` settings are
//! one fleet named `default` ([`Config::fleets`]).
//!
//! This module reads the file and checks each entry alone (the parser of the
//! variable); what involves several fleets or other variables — duplicates, the same
//! cluster twice, files that cannot be read, `FORGE_K8S_*` connection settings beside
//! the file — is `validate.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::model::{Config, FleetConfig, FleetConnection};
use super::reading::{parse_yaml_within, read_capped};
use super::values::{absolute_path, dns_label, label_key, label_value, url};

/// The name of the fleet the `FORGE_K8S_*` settings describe: the policy contract's
/// one fleet of a view that names none, so both sides say the same.
pub use forge_policy_host::model::DEFAULT_FLEET;

/// The most fleets one file may list.
pub const MAX_FLEETS: usize = 64;

/// The only fleet kind a file may name today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum EntryKind {
    Kuberay,
}

/// One entry of the file, as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    name: String,
    // Required, so that a file stays valid when other kinds are added.
    #[allow(dead_code)]
    kind: EntryKind,
    kubeconfig: Option<String>,
    context: Option<String>,
    api_server: Option<String>,
    token_file: Option<String>,
    ca_file: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    namespace: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// The fleets of the file at `v` (the variable's value), each entry checked alone;
/// every problem found, joined.
pub fn fleets_file(v: &str) -> Result<Vec<FleetConfig>, String> {
    let path = absolute_path(v)?;
    let text = read_capped(Path::new(&path)).map_err(|e| format!("{path}: {e}"))?;
    let entries: Vec<Entry> = parse(&text).map_err(|e| format!("{path}: {e}"))?;
    if entries.is_empty() {
        return Err(format!("{path}: lists no fleet"));
    }
    if entries.len() > MAX_FLEETS {
        return Err(format!(
            "{path}: lists {} fleets, at most {MAX_FLEETS}",
            entries.len()
        ));
    }
    let mut problems = Vec::new();
    let mut fleets = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let shown = if entry.name.is_empty() {
            format!("fleet #{}", i + 1)
        } else {
            format!("fleet `{}`", entry.name)
        };
        match entry.checked() {
            Ok(fleet) => fleets.push(fleet),
            Err(why) => problems.extend(why.into_iter().map(|w| format!("{shown}: {w}"))),
        }
    }
    if problems.is_empty() {
        Ok(fleets)
    } else {
        Err(problems.join("; "))
    }
}

/// YAML 1.2 under a budget sized for a few dozen fleets, without snippets in errors.
fn parse(text: &str) -> Result<Vec<Entry>, String> {
    parse_yaml_within(text, 20_000)
}

impl Entry {
    /// The fleet, or every problem of this entry alone.
    fn checked(self) -> Result<FleetConfig, Vec<String>> {
        let mut why = Vec::new();
        let mut note = |r: Result<String, String>, field: &str| match r {
            Ok(v) => Some(v),
            Err(e) => {
                why.push(format!("{field}: {e}"));
                None
            }
        };
        let name = note(dns_label(&self.name), "name").unwrap_or_default();
        let namespace = self
            .namespace
            .as_deref()
            .and_then(|n| note(dns_label(n), "namespace"));
        for (key, value) in &self.labels {
            note(label_key(key), "labels");
            note(label_value(value), &format!("labels.{key}"));
        }
        let path = |v: &Option<String>, field: &str, why: &mut Vec<String>| {
            v.as_deref().and_then(|p| match absolute_path(p) {
                Ok(p) => Some(PathBuf::from(p)),
                Err(e) => {
                    why.push(format!("{field}: {e}"));
                    None
                }
            })
        };
        let connection = match (&self.kubeconfig, &self.api_server) {
            (Some(_), Some(_)) => {
                why.push("set kubeconfig or apiServer, not both".to_string());
                None
            }
            (None, None) => {
                why.push("set kubeconfig, or apiServer (+ tokenFile, caFile)".to_string());
                None
            }
            (Some(_), None) => {
                for (set, field) in [
                    (self.token_file.is_some(), "tokenFile"),
                    (self.ca_file.is_some(), "caFile"),
                    (self.insecure_skip_tls_verify, "insecureSkipTlsVerify"),
                ] {
                    if set {
                        why.push(format!(
                            "{field} applies to apiServer; a kubeconfig names its own"
                        ));
                    }
                }
                path(&self.kubeconfig, "kubeconfig", &mut why).map(|path| {
                    FleetConnection::Kubeconfig {
                        path,
                        context: self.context.clone(),
                    }
                })
            }
            (None, Some(server)) => {
                if self.context.is_some() {
                    why.push("context applies to a kubeconfig".to_string());
                }
                if self.ca_file.is_some() && self.insecure_skip_tls_verify {
                    why.push("set caFile or insecureSkipTlsVerify, not both".to_string());
                }
                let url = match url(server) {
                    Ok(u) => Some(u),
                    Err(e) => {
                        why.push(format!("apiServer: {e}"));
                        None
                    }
                };
                let token_file = path(&self.token_file, "tokenFile", &mut why);
                let ca_file = path(&self.ca_file, "caFile", &mut why);
                url.map(|url| FleetConnection::ApiServer {
                    url,
                    token_file,
                    ca_file,
                    insecure_skip_tls_verify: self.insecure_skip_tls_verify,
                })
            }
        };
        match connection {
            Some(connection) if why.is_empty() => Ok(FleetConfig {
                name,
                connection,
                namespace,
                labels: self.labels,
            }),
            _ => Err(why),
        }
    }
}

impl FleetConfig {
    /// The namespace of Forge's objects in this fleet.
    pub fn namespace_in<'a>(&'a self, config: &'a Config) -> &'a str {
        self.namespace.as_deref().unwrap_or(&config.k8s.namespace)
    }

    /// The files this fleet's connection reads (kubeconfig, token, CA), each with
    /// the field naming it.
    pub fn files(&self) -> Vec<(&'static str, &Path)> {
        match &self.connection {
            FleetConnection::Settings => Vec::new(),
            FleetConnection::Kubeconfig { path, .. } => vec![("kubeconfig", path.as_path())],
            FleetConnection::ApiServer {
                token_file,
                ca_file,
                ..
            } => [("tokenFile", token_file), ("caFile", ca_file)]
                .into_iter()
                .filter_map(|(field, p)| p.as_deref().map(|p| (field, p)))
                .collect(),
        }
    }
}

impl Config {
    /// The fleets jobs may run in: `FORGE_FLEETS_FILE`'s, or the one the
    /// `FORGE_K8S_*` settings describe, named [`DEFAULT_FLEET`].
    pub fn fleets(&self) -> Vec<FleetConfig> {
        self.fleets.clone().unwrap_or_else(|| {
            vec![FleetConfig {
                name: DEFAULT_FLEET.to_string(),
                connection: FleetConnection::Settings,
                namespace: None,
                labels: BTreeMap::new(),
            }]
        })
    }
}
