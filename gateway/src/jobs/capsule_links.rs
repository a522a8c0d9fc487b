//! Capsule links: the `working_dir` of a job is a link to the gateway that stays valid
//! for exactly as long as the job has not ended, instead of a presigned URL that
//! expires on a clock (S3 allows at most 7 days; a job without `activeSeconds` got
//! about 25 h, so a Ray pod recreated after that could not fetch its code).
//!
//! `GET <base>/v1/job-capsules/<job>/<sha256>.zip?sig=<hex>` answers `302` to a fresh
//! short-lived URL of the object store while the job has not ended, `410 job-ended`
//! after, `404` when the job or its capsule is not the link's, `403` for a signature
//! that does not verify. The signature is an HMAC-SHA256 over the job id and the
//! digest with a key every replica shares (generated once, kept in the database's
//! metadata), so a link cannot be made for another job or another capsule, and it
//! authorizes nothing once the job is over. Ray's `working_dir` download and the
//! init container's `wget` both follow the redirect.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use url::Url;

use crate::domain::Digest;

type HmacSha256 = Hmac<Sha256>;

/// The metadata key of the shared signing key.
pub const KEY_NAME: &str = "capsule-link-key";
/// The route, as the router mounts it.
pub const ROUTE: &str = "/v1/job-capsules/{job}/{file}";

/// Signs and checks capsule links for a gateway reachable at a base URL.
#[derive(Clone)]
pub struct CapsuleLinks {
    key: Vec<u8>,
    base: Url,
}

impl std::fmt::Debug for CapsuleLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is a secret: never printed.
        f.debug_struct("CapsuleLinks")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl CapsuleLinks {
    /// Links under `base` (the gateway as pods reach it) signed with `key`.
    pub fn new(key: &[u8], base: Url) -> Self {
        CapsuleLinks {
            key: key.to_vec(),
            base,
        }
    }

    fn mac(&self, job_id: &str, digest: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(b"forge-capsule-link\n");
        mac.update(job_id.as_bytes());
        mac.update(b"\n");
        mac.update(digest.as_bytes());
        mac
    }

    /// The link of `job_id`'s capsule `digest`.
    pub fn link(&self, job_id: &str, digest: &Digest) -> Url {
        let sig = hex::encode(self.mac(job_id, digest.as_str()).finalize().into_bytes());
        let mut url = self.base.clone();
        let path = format!(
            "{}/v1/job-capsules/{job_id}/{}.zip",
            url.path().trim_end_matches('/'),
            digest.as_str()
        );
        url.set_path(&path);
        url.set_query(Some(&format!("sig={sig}")));
        url
    }

    /// Whether `sig` (hex) is the signature of `job_id` and `digest` (constant time).
    pub fn verify(&self, job_id: &str, digest: &Digest, sig: &str) -> bool {
        let Ok(sig) = hex::decode(sig) else {
            return false;
        };
        self.mac(job_id, digest.as_str()).verify_slice(&sig).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links() -> CapsuleLinks {
        CapsuleLinks::new(
            b"0123456789abcdef0123456789abcdef",
            Url::parse("https://forge.example.com/base/").expect("url"),
        )
    }

    #[test]
    fn a_link_verifies_for_its_job_and_capsule_only() {
        let l = links();
        let d = Digest::parse(&"ab".repeat(32)).expect("digest");
        let other = Digest::parse(&"cd".repeat(32)).expect("digest");
        let url = l.link("job-1", &d);
        assert_eq!(
            url.path(),
            format!("/base/v1/job-capsules/job-1/{}.zip", d.as_str())
        );
        let sig = url
            .query_pairs()
            .find(|(k, _)| k == "sig")
            .map(|(_, v)| v.into_owned())
            .expect("sig");
        assert!(l.verify("job-1", &d, &sig));
        assert!(!l.verify("job-2", &d, &sig), "another job");
        assert!(!l.verify("job-1", &other, &sig), "another capsule");
        assert!(!l.verify("job-1", &d, "zz"), "not hex");
        let mut flipped = sig.clone().into_bytes();
        flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
        assert!(!l.verify("job-1", &d, &String::from_utf8(flipped).expect("utf8")));
        let other_key = CapsuleLinks::new(
            b"another key of thirty-two bytes!",
            Url::parse("https://x/").expect("url"),
        );
        assert!(
            !other_key.verify("job-1", &d, &sig),
            "another installation's key"
        );
        assert!(
            !format!("{l:?}").contains("0123456789abcdef"),
            "the key is not printed"
        );
    }
}
