//! [`Config::validate`]: the checks across variables — combinations that are each
//! valid alone but not together, by area. A single value's format is checked by its
//! parser in the table (`vars.rs`).

use super::error::ConfigError;
use super::model::{Config, FleetKind};

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
}
