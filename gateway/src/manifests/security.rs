//! The restricted security settings of every Ray pod Forge describes (head, workers,
//! the capsule fetcher): what a team's code runs with.
//!
//! - No Kubernetes credentials: `automountServiceAccountToken: false` (a job has no
//!   business with the API server, and the namespace's default ServiceAccount token
//!   would let its code act as that account).
//! - No service links: `enableServiceLinks: false`, so a pod's environment does not
//!   list every Service of the namespace (other jobs' Ray head Services among them).
//! - Every container: no privilege escalation, every capability dropped, not
//!   privileged, the runtime's default seccomp profile; and non-root —
//!   `runAsNonRoot` with `runAsUser` from `FORGE_K8S_RUN_AS_USER` (default 1000, the
//!   `ray` user of the rayproject images) unless that is `image`, for images that must
//!   keep their own user.
//!
//! The root filesystem stays writable (Ray writes its session under `/tmp/ray`).

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
};

use crate::config::Config;

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        ..SeccompProfile::default()
    }
}

/// The security context of every container of a Ray pod.
pub fn container(cfg: &Config) -> SecurityContext {
    let user = cfg.k8s.run_as_user;
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        run_as_non_root: user.map(|_| true),
        run_as_user: user,
        seccomp_profile: Some(runtime_default()),
        ..SecurityContext::default()
    }
}

/// `spec` with the pod-level settings: no service-account token, no service links,
/// the default seccomp profile and (unless the image's user is kept) non-root.
pub fn pod(cfg: &Config, spec: PodSpec) -> PodSpec {
    PodSpec {
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: cfg.k8s.run_as_user.map(|_| true),
            seccomp_profile: Some(runtime_default()),
            ..PodSecurityContext::default()
        }),
        ..spec
    }
}
