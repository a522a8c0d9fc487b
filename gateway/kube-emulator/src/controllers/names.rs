//! Names, label keys and random suffixes used by the simulated KubeRay operator and
//! the job controller (`SEMANTICS.md` §3, §4; `const` in KubeRay v1.7.0).

use rand::Rng;

/// apimachinery `rand.String` alphabet (no vowels, no confusable digits).
pub const RAND_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Finalizer the RayJob controller adds in state New.
pub const RAYJOB_FINALIZER: &str = "ray.io/rayjob-finalizer";

/// Label keys.
pub const IS_RAY_NODE: &str = "ray.io/is-ray-node";
/// Cluster name label.
pub const RAY_CLUSTER: &str = "ray.io/cluster";
/// head | worker.
pub const NODE_TYPE: &str = "ray.io/node-type";
/// headgroup | group name.
pub const GROUP: &str = "ray.io/group";
/// `<cluster>-head` | `<cluster>-worker`.
pub const IDENTIFIER: &str = "ray.io/identifier";
/// Index of a worker replica within its group (RayMultiHostIndexing).
pub const REPLICA_INDEX: &str = "ray.io/worker-group-replica-index";
/// `kuberay`.
pub const APP_NAME: &str = "app.kubernetes.io/name";
/// `kuberay-operator`.
pub const CREATED_BY: &str = "app.kubernetes.io/created-by";
/// Name of the originating CR.
pub const ORIGINATED_FROM_CR_NAME: &str = "ray.io/originated-from-cr-name";
/// Kind of the originating CR.
pub const ORIGINATED_FROM_CRD: &str = "ray.io/originated-from-crd";
/// Submission mode of the originating RayJob.
pub const JOB_SUBMISSION_MODE: &str = "ray.io/job-submission-mode";
/// Job controller pod labels.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// Legacy job-name label (still set by the real job controller).
pub const JOB_NAME_LEGACY: &str = "job-name";
/// Controller uid label.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// Legacy controller-uid label.
pub const CONTROLLER_UID_LEGACY: &str = "controller-uid";

/// Name of the submitter container.
pub const SUBMITTER_CONTAINER: &str = "ray-job-submitter";

/// Annotation with the capsule's SHA-256 (Forge convention).
pub const CAPSULE_SHA_ANNOTATION: &str = "forge.dev/capsule-sha256";

/// `n` random characters from [`RAND_ALPHABET`] (apimachinery `rand.String`).
pub fn rand_string(n: usize) -> String {
    let mut rng = rand::rng();
    (0..n)
        .map(|_| RAND_ALPHABET[rng.random_range(0..RAND_ALPHABET.len())] as char)
        .collect()
}

/// `<base>-<5 rand>`: default `jobId` and RayCluster name of a RayJob.
pub fn with_suffix(base: &str) -> String {
    format!("{base}-{}", rand_string(5))
}

/// The head Service of a cluster: `<cluster>-head-svc`.
pub fn head_service(cluster: &str) -> String {
    format!("{cluster}-head-svc")
}

/// The dashboard address the operator records: no scheme (`util` FetchHeadServiceURL).
pub fn dashboard_url(cluster: &str, namespace: &str) -> String {
    format!(
        "{}.{namespace}.svc.cluster.local:8265",
        head_service(cluster)
    )
}

/// Inverse of [`dashboard_url`] (the submitter finds its cluster from its env).
pub fn cluster_from_dashboard(addr: &str) -> Option<&str> {
    let addr = addr.strip_prefix("http://").unwrap_or(addr);
    addr.split('.').next()?.strip_suffix("-head-svc")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_uses_the_apimachinery_alphabet() {
        let s = with_suffix("rayjob-sample");
        let (base, suffix) = s.rsplit_once('-').expect("has a dash");
        assert_eq!(base, "rayjob-sample");
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix.bytes().all(|b| RAND_ALPHABET.contains(&b)),
            "{suffix}"
        );
    }

    #[test]
    fn dashboard_url_round_trips() {
        let url = dashboard_url("job-abcde", "starforge");
        assert_eq!(url, "job-abcde-head-svc.starforge.svc.cluster.local:8265");
        assert_eq!(cluster_from_dashboard(&url), Some("job-abcde"));
        assert_eq!(
            cluster_from_dashboard(&format!("http://{url}")),
            Some("job-abcde")
        );
        assert_eq!(cluster_from_dashboard("nothing"), None);
    }
}
