//! The key scheme of everything Forge stores, one function each so every component
//! agrees, and the checks that keep keys inside the store:
//! - capsules: `capsules/<sha256 hex>.zip` ([`capsule_key`])
//! - job logs: `logs/<job-id>/<name>.log` ([`log_key`]), each pod's log
//!   `logs/<job-id>/pods/<pod>/<container>.log` ([`pod_log_key`]) and their list
//!   `logs/<job-id>/pods.json` ([`log_index_key`]); a preempted attempt's list
//!   `logs/<job-id>/attempts/<n>/pods.json` ([`attempt_log_index_key`])
//! - policy plugins: `plugins/<sha256 hex>.wasm` ([`plugin_key`])
//! - resumable uploads, assembled before they are verified: `uploads/<session>.zip`
//!   ([`upload_key`])

use crate::error::StoreError;

/// The folder of every capsule.
pub const CAPSULES: &str = "capsules/";
/// The folder of every archived job log.
pub const LOGS: &str = "logs/";
/// The folder of every policy plugin component.
pub const PLUGINS: &str = "plugins/";
/// The folder of resumable uploads being assembled.
pub const UPLOADS: &str = "uploads/";

/// `uploads/<session>.zip`: where a resumable upload's parts are assembled.
pub fn upload_key(session: &str) -> Result<String, StoreError> {
    check_parts(&[session], 128)?;
    Ok(format!("{UPLOADS}{session}.zip"))
}

/// `logs/<job-id>/`: the folder of everything archived for one job.
pub fn job_logs_prefix(job_id: &str) -> Result<String, StoreError> {
    check_parts(&[job_id], 128)?;
    Ok(format!("{LOGS}{job_id}/"))
}

/// The digest of a capsule's key (`capsules/<sha256>.zip`), `None` for any other key.
pub fn digest_of_capsule_key(key: &str) -> Option<&str> {
    let digest = key.strip_prefix(CAPSULES)?.strip_suffix(".zip")?;
    validate_digest(digest).ok().map(|()| digest)
}

/// `capsules/<sha256>.zip`; errors unless `digest` is 64 lowercase hex chars.
pub fn capsule_key(digest: &str) -> Result<String, StoreError> {
    validate_digest(digest)?;
    Ok(format!("capsules/{digest}.zip"))
}

/// `logs/<job-id>/<name>.log`; both parts must be `[A-Za-z0-9._-]+` and not
/// start with a dot.
pub fn log_key(job_id: &str, name: &str) -> Result<String, StoreError> {
    check_parts(&[job_id, name], 128)?;
    Ok(format!("logs/{job_id}/{name}.log"))
}

/// `logs/<job-id>/pods/<pod>/<container>.log`: the archived log of one container of
/// one of the job's pods (names of up to 253 characters, as Kubernetes allows).
pub fn pod_log_key(job_id: &str, pod: &str, container: &str) -> Result<String, StoreError> {
    check_parts(&[job_id, pod, container], 253)?;
    Ok(format!("logs/{job_id}/pods/{pod}/{container}.log"))
}

/// `logs/<job-id>/pods.json`: the list of a job's archived pod logs.
pub fn log_index_key(job_id: &str) -> Result<String, StoreError> {
    check_parts(&[job_id], 128)?;
    Ok(format!("logs/{job_id}/pods.json"))
}

/// `logs/<job-id>/attempts/<n>/pods.json`: the list of the pod logs archived when
/// attempt `n` of a job was preempted (the pods' own logs sit beside the others':
/// each attempt's RayJob, and so each pod, has a name of its own).
pub fn attempt_log_index_key(job_id: &str, attempt: u32) -> Result<String, StoreError> {
    check_parts(&[job_id], 128)?;
    Ok(format!("logs/{job_id}/attempts/{attempt}/pods.json"))
}

/// Each part non-empty, at most `max` bytes, `[A-Za-z0-9._-]+`, not starting with a dot.
fn check_parts(parts: &[&str], max: usize) -> Result<(), StoreError> {
    for part in parts {
        let ok = !part.is_empty()
            && part.len() <= max
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !ok {
            return Err(StoreError::InvalidKey((*part).to_owned()));
        }
    }
    Ok(())
}

/// Check a capsule digest: 64 lowercase hex characters.
pub fn validate_digest(digest: &str) -> Result<(), StoreError> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        Ok(())
    } else {
        Err(StoreError::InvalidKey(digest.to_owned()))
    }
}

/// Key of a policy plugin component by its `sha256:<hex>` (or bare hex) digest.
pub fn plugin_key(digest: &str) -> Result<String, StoreError> {
    let hexd = digest.trim_start_matches("sha256:");
    validate_digest(hexd)?;
    Ok(format!("plugins/{hexd}.wasm"))
}

/// Check a generic object key: relative, `/`-separated, no empty, `.` or
/// `..` components, limited charset.
pub fn validate_key(key: &str) -> Result<(), StoreError> {
    let ok = !key.is_empty()
        && key.len() <= 1024
        && key
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(StoreError::InvalidKey(key.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let d = "a".repeat(64);
        assert_eq!(capsule_key(&d).expect("valid"), format!("capsules/{d}.zip"));
        assert!(capsule_key("../x").is_err());
        assert!(capsule_key(&"A".repeat(64)).is_err());
        assert_eq!(
            log_key("job-1", "head").expect("valid"),
            "logs/job-1/head.log"
        );
        assert!(log_key("../x", "head").is_err());
        assert!(log_key("j", "a/b").is_err());
        assert_eq!(
            pod_log_key("job-1", "rj-head-x", "ray-head").expect("valid"),
            "logs/job-1/pods/rj-head-x/ray-head.log"
        );
        assert!(pod_log_key("job-1", "..", "ray-head").is_err());
        assert!(pod_log_key("job-1", "p", "a/b").is_err());
        assert_eq!(
            log_index_key("job-1").expect("valid"),
            "logs/job-1/pods.json"
        );
        assert_eq!(
            digest_of_capsule_key(&format!("capsules/{d}.zip")),
            Some(d.as_str())
        );
        assert_eq!(digest_of_capsule_key("capsules/abc.zip"), None);
        assert_eq!(digest_of_capsule_key(&format!("logs/{d}.zip")), None);
        assert_eq!(job_logs_prefix("job-1").expect("valid"), "logs/job-1/");
        assert!(job_logs_prefix("..").is_err());
        assert!(validate_key("logs/../x").is_err());
        assert!(validate_key("logs/j/x.log").is_ok());
    }
}
