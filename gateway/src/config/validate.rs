//! [`Config::validate`]: the checks across variables — combinations that are each
//! valid alone but not together, by area. A single value's format is checked by its
//! parser in the table (`vars.rs`).

use super::error::ConfigError;
use std::collections::BTreeMap;

use super::model::{Config, FleetConfig, FleetConnection, FleetKind};

/// The variable naming the fleets file.
const FLEETS_FILE: &str = "FORGE_FLEETS_FILE";

/// A problem with the fleets file.
fn fleets_invalid(reason: String) -> ConfigError {
    ConfigError::Invalid {
        var: FLEETS_FILE.to_string(),
        reason,
    }
}

/// `var` needs `requires` to be consistent with it, because of `reason`.
fn requires(var: &str, requires: &str, reason: String) -> ConfigError {
    ConfigError::Requires {
        var: var.to_string(),
        requires: requires.to_string(),
        reason,
    }
}

impl Config {
    /// Every inconsistent combination in a built config.
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        self.validate_policy_limits(&mut errors);
        self.validate_k8s_connection(&mut errors);
        self.validate_retention(&mut errors);
        self.validate_leader(&mut errors);
        self.validate_storage(&mut errors);
        self.validate_upload_parts(&mut errors);
        self.validate_fleet(&mut errors);
        self.validate_fleets(&mut errors);
        errors
    }

    /// Plugin sizes, memory caps and deadlines: a default within its maximum.
    fn validate_policy_limits(&self, errors: &mut Vec<ConfigError>) {
        let gw = &self.gateway;
        if gw.plugin_max_kib > gw.team_plugin_max_mib.saturating_mul(1024) {
            errors.push(requires(
                "FORGE_TEAM_PLUGIN_MAX_MIB",
                "FORGE_PLUGIN_MAX_KIB",
                format!(
                    "a team's plugin budget ({} MiB) is smaller than one plugin may be ({} KiB)",
                    gw.team_plugin_max_mib, gw.plugin_max_kib
                ),
            ));
        }
        if gw.policy_memory_mib > gw.policy_max_memory_mib {
            errors.push(requires(
                "FORGE_POLICY_MAX_MEMORY_MIB",
                "FORGE_POLICY_MEMORY_MIB",
                format!(
                    "the largest memory cap ({} MiB) is below the default one ({} MiB)",
                    gw.policy_max_memory_mib, gw.policy_memory_mib
                ),
            ));
        }
        if gw.policy_deadline_ms > gw.policy_max_deadline_ms {
            errors.push(requires(
                "FORGE_POLICY_MAX_DEADLINE_MS",
                "FORGE_POLICY_DEADLINE_MS",
                format!(
                    "the largest deadline ({} ms) is below the default one ({} ms)",
                    gw.policy_max_deadline_ms, gw.policy_deadline_ms
                ),
            ));
        }
    }

    /// What only an explicit API server connection uses.
    fn validate_k8s_connection(&self, errors: &mut Vec<ConfigError>) {
        if self.k8s.token.is_some() && self.k8s.api_server.is_none() {
            errors.push(requires(
                "FORGE_K8S_TOKEN",
                "FORGE_K8S_API_SERVER",
                "a token is only used against an explicit API server".to_string(),
            ));
        }
        for (set, var) in [
            (self.k8s.ca_file.is_some(), "FORGE_K8S_CA_FILE"),
            (
                self.k8s.insecure_skip_tls_verify,
                "FORGE_K8S_INSECURE_SKIP_TLS_VERIFY",
            ),
        ] {
            if set && self.k8s.api_server.is_none() {
                errors.push(requires(
                    var,
                    "FORGE_K8S_API_SERVER",
                    "it applies to the explicit API server connection".to_string(),
                ));
            }
        }
    }

    /// A retention the sweep can keep.
    fn validate_retention(&self, errors: &mut Vec<ConfigError>) {
        let gw = &self.gateway;
        for (var, keep) in [
            ("FORGE_RETENTION_REJECTED_S", gw.retention_rejected_s),
            ("FORGE_RETENTION_LOGS_S", gw.retention_logs_s),
            ("FORGE_RETENTION_CAPSULES_S", gw.retention_capsules_s),
        ] {
            if keep > 0 && gw.retention_sweep_s > keep {
                errors.push(requires(
                    "FORGE_RETENTION_SWEEP_S",
                    var,
                    format!(
                        "a sweep every {} s cannot keep a retention of {keep} s",
                        gw.retention_sweep_s
                    ),
                ));
            }
        }
    }

    /// A lease a leader can keep, and stops acting before it is lost.
    fn validate_leader(&self, errors: &mut Vec<ConfigError>) {
        let l = &self.leader;
        if l.renew_deadline_ms >= l.lease_ms {
            errors.push(requires(
                "FORGE_LEADER_RENEW_DEADLINE_MS",
                "FORGE_LEADER_LEASE_MS",
                format!(
                    "the renew deadline ({} ms) must be shorter than the lease ({} ms): a \
                     leader must stop acting before another can take over",
                    l.renew_deadline_ms, l.lease_ms
                ),
            ));
        }
        if l.retry_ms >= l.renew_deadline_ms {
            errors.push(requires(
                "FORGE_LEADER_RETRY_MS",
                "FORGE_LEADER_RENEW_DEADLINE_MS",
                format!(
                    "renewals every {} ms cannot keep a {} ms renew deadline",
                    l.retry_ms, l.renew_deadline_ms
                ),
            ));
        }
    }

    /// The storage claim's mount and common directory.
    fn validate_storage(&self, errors: &mut Vec<ConfigError>) {
        if self.storage.mount.is_some() && self.storage.pvc.is_none() {
            errors.push(requires(
                "FORGE_K8S_STORAGE_MOUNT",
                "FORGE_K8S_STORAGE_PVC",
                "the mount path is where the storage claim is mounted".to_string(),
            ));
        }
        if self.storage.common_subpath.is_some() && self.storage.pvc.is_none() {
            errors.push(requires(
                "FORGE_K8S_STORAGE_COMMON_SUBPATH",
                "FORGE_K8S_STORAGE_PVC",
                "the common directory is a directory of the storage claim".to_string(),
            ));
        }
        if let Some(common) = &self.storage.common_subpath
            && (common == "teams" || common.starts_with("teams/"))
        {
            errors.push(ConfigError::Invalid {
                var: "FORGE_K8S_STORAGE_COMMON_SUBPATH".to_string(),
                reason: format!(
                    "`{common}` is inside `teams/`, where each team's private directory lives"
                ),
            });
        }
    }

    /// Room in one request for an S3 upload part: S3 wants every part but the last
    /// to be at least 5 MiB, and a resumable upload sends one part per request.
    fn validate_upload_parts(&self, errors: &mut Vec<ConfigError>) {
        const S3_MIN_PART_MIB: u64 = 5;
        // One MiB more: the request's own framing.
        if self.s3.is_some() && self.gateway.max_body_mib <= S3_MIN_PART_MIB {
            errors.push(ConfigError::Invalid {
                var: "FORGE_MAX_BODY_MIB".to_string(),
                reason: format!(
                    "with object storage on S3 (FORGE_S3_*), a body limit of {} MiB cannot \
                     carry an upload part of S3's smallest size ({S3_MIN_PART_MIB} MiB): set \
                     at least {}",
                    self.gateway.max_body_mib,
                    S3_MIN_PART_MIB + 1
                ),
            });
        }
    }

    /// What the fleet kind needs.
    fn validate_fleet(&self, errors: &mut Vec<ConfigError>) {
        if self.fleet_kind == FleetKind::Kuberay && self.kuberay.ray_version.is_none() {
            errors.push(ConfigError::Missing {
                var: "FORGE_KUBERAY_RAY_VERSION".to_string(),
                reason: "when FORGE_DEFAULT_FLEET_KIND is kuberay".to_string(),
            });
        }
    }

    /// The fleets file: no connection setting of the single cluster beside it, no
    /// fleet named or reached twice, every file it names readable, every kubeconfig
    /// context present; and, until dispatch chooses among fleets (issue 42), one fleet.
    fn validate_fleets(&self, errors: &mut Vec<ConfigError>) {
        let Some(fleets) = &self.fleets else {
            return;
        };
        if self.fleet_kind == FleetKind::Local {
            errors.push(requires(
                FLEETS_FILE,
                "FORGE_DEFAULT_FLEET_KIND",
                "fleets are clusters: FORGE_DEFAULT_FLEET_KIND=local runs jobs on none".to_string(),
            ));
        }
        for (set, var) in [
            (self.k8s.api_server.is_some(), "FORGE_K8S_API_SERVER"),
            (self.k8s.token.is_some(), "FORGE_K8S_TOKEN"),
            (self.k8s.ca_file.is_some(), "FORGE_K8S_CA_FILE"),
            (
                self.k8s.insecure_skip_tls_verify,
                "FORGE_K8S_INSECURE_SKIP_TLS_VERIFY",
            ),
        ] {
            if set {
                errors.push(ConfigError::Invalid {
                    var: var.to_string(),
                    reason: format!(
                        "{FLEETS_FILE} names how each cluster is reached: set it on the fleet"
                    ),
                });
            }
        }
        let mut names = BTreeMap::new();
        let mut clusters = BTreeMap::new();
        for fleet in fleets {
            if let Some(first) = names.insert(fleet.name.as_str(), fleet) {
                errors.push(fleets_invalid(format!(
                    "two fleets are named `{}`",
                    first.name
                )));
            }
            let key = (cluster_of(fleet), fleet.namespace_in(self).to_string());
            if let Some(first) = clusters.insert(key, fleet.name.as_str()) {
                errors.push(fleets_invalid(format!(
                    "fleets `{first}` and `{}` are the same cluster and namespace: one job \
                     could be launched twice there",
                    fleet.name
                )));
            }
            check_fleet_files(fleet, errors);
        }
    }
}

/// What identifies a fleet's cluster: its API server URL, or its kubeconfig and
/// context.
fn cluster_of(fleet: &FleetConfig) -> String {
    match &fleet.connection {
        FleetConnection::Settings => "FORGE_K8S_*".to_string(),
        FleetConnection::ApiServer { url, .. } => url.trim_end_matches('/').to_string(),
        FleetConnection::Kubeconfig { path, context } => {
            format!("{}#{}", path.display(), context.as_deref().unwrap_or(""))
        }
    }
}

/// Every file of `fleet` can be read, and a kubeconfig has the context it is used at.
fn check_fleet_files(fleet: &FleetConfig, errors: &mut Vec<ConfigError>) {
    for (field, path) in fleet.files() {
        let readable = std::fs::File::open(path)
            .and_then(|f| f.metadata())
            .map_err(|e| e.to_string())
            .and_then(|m| m.is_file().then_some(()).ok_or("not a file".to_string()));
        if let Err(e) = readable {
            errors.push(fleets_invalid(format!(
                "fleet `{}`: {field} {}: {e}",
                fleet.name,
                path.display()
            )));
            return;
        }
    }
    let FleetConnection::Kubeconfig { path, context } = &fleet.connection else {
        return;
    };
    let kubeconfig = match kube::config::Kubeconfig::read_from(path) {
        Ok(k) => k,
        Err(e) => {
            errors.push(fleets_invalid(format!(
                "fleet `{}`: kubeconfig {}: {e}",
                fleet.name,
                path.display()
            )));
            return;
        }
    };
    let wanted = context.as_ref().or(kubeconfig.current_context.as_ref());
    let Some(wanted) = wanted else {
        errors.push(fleets_invalid(format!(
            "fleet `{}`: kubeconfig {} has no current-context: name one with `context`",
            fleet.name,
            path.display()
        )));
        return;
    };
    if !kubeconfig.contexts.iter().any(|c| &c.name == wanted) {
        errors.push(fleets_invalid(format!(
            "fleet `{}`: kubeconfig {} has no context `{wanted}`",
            fleet.name,
            path.display()
        )));
    }
}
