//! What pods reach the gateway by, when the gateway knows the URL they reach it at
//! (`FORGE_PUBLIC_URL`, or the dev gateway's own): capsule links for the code
//! ([`CapsuleLinks`]) and the job's own API access ([`JobAccess`]). Both exist or
//! neither does.

use super::capsule_links::CapsuleLinks;
use super::job_access::JobAccess;

/// The links handed to a job's pods.
#[derive(Debug, Clone)]
pub struct PodLinks {
    pub capsules: CapsuleLinks,
    pub jobs: JobAccess,
}
