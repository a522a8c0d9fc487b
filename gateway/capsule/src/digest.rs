//! A capsule's address: the lowercase hex SHA-256 of its zip bytes, and the check
//! that a string is one. Digests end up in pod paths and shell environments (see
//! `init_container`), so anything else is refused before it is used.

/// A string that is not a capsule digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid capsule digest {digest:?}: expected 64 lowercase hex characters")]
pub struct InvalidDigest {
    /// The string that was refused.
    pub digest: String,
}

/// Check that `digest` is 64 lowercase hex characters.
pub fn validate_digest(digest: &str) -> Result<(), InvalidDigest> {
    if digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        Ok(())
    } else {
        Err(InvalidDigest {
            digest: digest.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_hex_sha256_is_a_digest() {
        assert!(validate_digest(&"a0".repeat(32)).is_ok());
        assert!(validate_digest(&"A0".repeat(32)).is_err());
        assert!(validate_digest(&"a".repeat(63)).is_err());
        assert!(validate_digest(&"a".repeat(65)).is_err());
        let e = validate_digest("../x").expect_err("not hex");
        assert_eq!(e.digest, "../x");
    }
}
