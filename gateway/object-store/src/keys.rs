//! The key scheme of everything Forge stores, one function each so every component
//! agrees, and the checks that keep keys inside the store:
//! - capsules: `capsules/<sha256 hex>.zip` ([`capsule_key`])
//! - job logs: `logs/<job-id>/<name>.log` ([`log_key`])
//! - policy plugins: `plugins/<sha256 hex>.wasm` ([`plugin_key`])

use crate::error::StoreError;

/// `capsules/<sha256>.zip`; errors unless `digest` is 64 lowercase hex chars.
pub fn capsule_key(digest: &str) -> Result<String, StoreError> {
    validate_digest(digest)?;
    Ok(format!("capsules/{digest}.zip"))
}

/// `logs/<job-id>/<name>.log`; both parts must be `[A-Za-z0-9._-]+` and not
/// start with a dot.
pub fn log_key(job_id: &str, name: &str) -> Result<String, StoreError> {
    for part in [job_id, name] {
        let ok = !part.is_empty()
            && part.len() <= 128
            && !part.starts_with('.')
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
        if !ok {
            return Err(StoreError::InvalidKey(part.to_owned()));
        }
    }
    Ok(format!("logs/{job_id}/{name}.log"))
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
        assert!(validate_key("logs/../x").is_err());
        assert!(validate_key("logs/j/x.log").is_ok());
    }
}
