//! [`Digest`]: the SHA-256 that names a capsule (64 lowercase hex digits), checked once
//! where it enters the gateway (an API request, a stored row) so that everything after
//! can rely on it — a label value, an object-store key, a URL path segment.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A hex SHA-256 digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(String);

/// A string that is not 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a digest is 64 lowercase hex digits (a SHA-256)")]
pub struct InvalidDigest;

impl Digest {
    /// Checks `s`.
    pub fn parse(s: &str) -> Result<Self, InvalidDigest> {
        let ok = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(Digest(s.to_string()))
        } else {
            Err(InvalidDigest)
        }
    }

    /// The 64 hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Digest {
    type Err = InvalidDigest;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Digest::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_lowercase_hex_sha256() {
        let ok = "a".repeat(64);
        assert_eq!(Digest::parse(&ok).map(|d| d.to_string()), Ok(ok.clone()));
        for bad in ["", "abc", &"A".repeat(64), &"g".repeat(64), &"a".repeat(65)] {
            assert_eq!(Digest::parse(bad), Err(InvalidDigest), "{bad}");
        }
        let json = serde_json::to_string(&Digest::parse(&ok).expect("digest")).expect("json");
        assert_eq!(json, format!("\"{ok}\""));
        assert!(serde_json::from_str::<Digest>("\"xyz\"").is_err());
    }
}
