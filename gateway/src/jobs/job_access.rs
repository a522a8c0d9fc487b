//! The job's own access to the gateway (issue 38, the job's side of preemption): every
//! Ray process of a job gets `FORGE_JOB_URL` (the job's API base, under the URL pods
//! reach the gateway at) and `FORGE_JOB_TOKEN`, a bearer token good for that job only
//! and only while it has not ended — with it the job acknowledges its checkpoints
//! (`POST $FORGE_JOB_URL/checkpoints`).
//!
//! The token is `fjt.<job id>.<hex HMAC-SHA256>` over the job id with a key every
//! replica shares (generated once, kept in the database's metadata, like the capsule
//! links' key but its own), so any replica checks it without a lookup, it cannot be
//! made for another job, and it authorizes nothing once the job is over (the handler
//! checks the job's state). It is in the RayJob's runtime environment, which only
//! those who may read RayJobs in the jobs' namespace see; it grants nothing but
//! acknowledging that job's checkpoints.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::Url;

type HmacSha256 = Hmac<Sha256>;

/// The metadata key of the shared signing key.
pub const KEY_NAME: &str = "job-token-key";
/// What every job token starts with.
pub const TOKEN_PREFIX: &str = "fjt.";

/// Makes and checks job URLs and tokens.
#[derive(Clone)]
pub struct JobAccess {
    key: Vec<u8>,
    base: Url,
}

impl std::fmt::Debug for JobAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        f.debug_struct("JobAccess")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl JobAccess {
    /// Access under `base` (the gateway as pods reach it), tokens signed with `key`.
    pub fn new(key: &[u8], base: Url) -> Self {
        JobAccess {
            key: key.to_vec(),
            base,
        }
    }

    fn mac(&self, job_id: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"forge-job-token\n");
        mac.update(job_id.as_bytes());
        mac
    }

    /// `FORGE_JOB_URL` of `job_id`: its resource in the API.
    pub fn url(&self, job_id: &str) -> Url {
        let mut url = self.base.clone();
        let path = format!("{}/v1/jobs/{job_id}", url.path().trim_end_matches('/'));
        url.set_path(&path);
        url.set_query(None);
        url
    }

    /// `FORGE_JOB_TOKEN` of `job_id`.
    pub fn token(&self, job_id: &str) -> String {
        let sig = hex::encode(self.mac(job_id).finalize().into_bytes());
        format!("{TOKEN_PREFIX}{job_id}.{sig}")
    }

    /// The job a token was made for, if it is one of this installation's (checked in
    /// constant time). Whether the job may still use it is the caller's check.
    pub fn job_of<'t>(&self, token: &'t str) -> Option<&'t str> {
        let (job_id, sig) = token.strip_prefix(TOKEN_PREFIX)?.rsplit_once('.')?;
        let sig = hex::decode(sig).ok()?;
        self.mac(job_id).verify_slice(&sig).ok()?;
        Some(job_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(key: &[u8]) -> JobAccess {
        JobAccess::new(key, Url::parse("https://forge.example/base/").expect("url"))
    }

    #[test]
    fn a_token_names_its_job_and_nothing_else() {
        let a = access(b"k1");
        let token = a.token("j-1");
        assert!(token.starts_with("fjt.j-1."));
        assert_eq!(a.job_of(&token), Some("j-1"));
        // Another job's id with this signature, another key, garbage: nothing.
        assert_eq!(a.job_of(&token.replace("j-1", "j-2")), None);
        assert_eq!(access(b"k2").job_of(&token), None);
        assert_eq!(a.job_of("fjt.j-1.zz"), None);
        assert_eq!(a.job_of("team-token"), None);
        assert_eq!(
            a.url("j-1").as_str(),
            "https://forge.example/base/v1/jobs/j-1"
        );
    }

    #[test]
    fn the_key_is_never_printed() {
        let shown = format!("{:?}", access(b"very-secret"));
        assert!(
            !shown.contains("very-secret") && !shown.contains("key"),
            "{shown}"
        );
    }
}
