//! Bearer-token authentication and tenancy: a tokens file maps SHA-256 hashes of
//! tokens to a team and a role; [`Tokens::authenticate`] turns an `Authorization`
//! header into the [`Caller`] (the HTTP extractor is in `http::auth`).
//!
//! # Tokens file (`FORGE_TOKENS_FILE`, YAML or TOML by extension)
//!
//! ```yaml
//! tokens:
//!   - name: alice-laptop          # optional, for humans and logs
//!     team: team-a                # DNS-1123 label
//!     role: member                # member | admin
//!     token_sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! ```
//!
//! Only hashes are stored, never tokens: compute one with [`hash_token`] (or
//! `printf %s "$TOKEN" | sha256sum`). A presented token is hashed and compared with
//! every entry in constant time. Members see and cancel only their team's jobs; admins
//! see all. Some names cannot be team names ([`RESERVED_TEAMS`]): `global` is the
//! admin-only plugin namespace and policy scope, the others belong to the platform or
//! to Kubernetes. The file is reloaded when it changes ([`crate::live_tokens`]).

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::jobspec::names;

/// Names no team may have: `global` is the admin-managed plugin owner and policy scope
/// (a team of that name would upload into it); `forge` and `system` are the
/// platform's, `default` and `all` read as something else in APIs and selectors.
/// Names starting with [`RESERVED_TEAM_PREFIXES`] are reserved too.
pub const RESERVED_TEAMS: &[&str] = &["global", "forge", "system", "default", "all", "admin"];
/// Prefixes no team name may start with: Kubernetes' (`kube-`) and Forge's own.
pub const RESERVED_TEAM_PREFIXES: &[&str] = &["kube-", "forge-"];

/// Why `team` cannot be a team name, if it cannot.
pub fn team_name_problem(team: &str) -> Option<String> {
    if !names::is_dns1123_label(team) {
        return Some(format!("team `{team}` is not a DNS-1123 label"));
    }
    if RESERVED_TEAMS.contains(&team) {
        return Some(format!(
            "team name `{team}` is reserved (reserved: {}; and names starting with {})",
            RESERVED_TEAMS.join(", "),
            RESERVED_TEAM_PREFIXES.join(", ")
        ));
    }
    if let Some(p) = RESERVED_TEAM_PREFIXES.iter().find(|p| team.starts_with(*p)) {
        return Some(format!(
            "team name `{team}` is reserved (names starting with `{p}` belong to the platform)"
        ));
    }
    None
}

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Sees and cancels its own team's jobs.
    Member,
    /// Sees and cancels every team's jobs.
    Admin,
}

/// One entry of the tokens file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    /// Hex SHA-256 of the token.
    pub token_sha256: String,
    /// The team the token acts for.
    pub team: String,
    /// The role.
    pub role: Role,
    /// Optional human name.
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensDoc {
    tokens: Vec<TokenEntry>,
}

/// Problems loading the tokens file.
#[derive(Debug, thiserror::Error)]
pub enum TokensFileError {
    /// Cannot read the file.
    #[error("tokens file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid YAML/TOML of the documented shape.
    #[error("tokens file {path}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// One entry is invalid.
    #[error("tokens file entry {index}: {reason}")]
    Entry {
        /// 0-based entry index.
        index: usize,
        /// Why.
        reason: String,
    },
}

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// The caller's team.
    pub team: String,
    /// The caller's role.
    pub role: Role,
    /// The token's name, if the file gives one.
    pub name: Option<String>,
}

impl Caller {
    /// Whether the caller may see / cancel a job of `team`.
    pub fn can_access(&self, team: &str) -> bool {
        self.role == Role::Admin || self.team == team
    }

    /// `Ok` for admins, [`AuthError::Forbidden`] otherwise.
    pub fn require_admin(&self) -> Result<(), AuthError> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Member => Err(AuthError::Forbidden("admin role required".into())),
        }
    }
}

/// Authentication / authorization failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer …` header.
    #[error("missing bearer token")]
    Missing,
    /// The header is malformed or the token is unknown.
    #[error("invalid bearer token")]
    Invalid,
    /// Authenticated but not allowed.
    #[error("forbidden: {0}")]
    Forbidden(String),
}

/// 401 with a `WWW-Authenticate` challenge, or 403.
impl crate::answer::Answers for AuthError {
    fn answer(&self) -> crate::answer::Answer {
        use crate::answer::Answer;
        use http::StatusCode;
        let message = self.to_string();
        match self {
            AuthError::Missing => Answer::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
                .challenge("Bearer"),
            AuthError::Invalid => Answer::new(StatusCode::UNAUTHORIZED, "unauthenticated", message)
                .challenge("Bearer error=\"invalid_token\""),
            AuthError::Forbidden(_) => Answer::new(StatusCode::FORBIDDEN, "forbidden", message),
        }
    }
}

/// Hex SHA-256 of a token, as stored in the tokens file.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The loaded tokens.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Vec<([u8; 32], Caller)>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({} entries)", self.entries.len())
    }
}

impl Tokens {
    /// Builds from entries, checking each (hash format, team name, uniqueness).
    pub fn from_entries(entries: Vec<TokenEntry>) -> Result<Self, TokensFileError> {
        let mut out: Vec<([u8; 32], Caller)> = Vec::with_capacity(entries.len());
        for (index, e) in entries.into_iter().enumerate() {
            let err = |reason: String| TokensFileError::Entry { index, reason };
            let mut hash = [0u8; 32];
            if e.token_sha256.len() != 64
                || hex::decode_to_slice(&e.token_sha256, &mut hash).is_err()
            {
                return Err(err(
                    "token_sha256 must be 64 hex digits (a SHA-256, never the token)".into(),
                ));
            }
            if let Some(problem) = team_name_problem(&e.team) {
                return Err(err(problem));
            }
            if out.iter().any(|(h, _)| *h == hash) {
                return Err(err("duplicate token_sha256".into()));
            }
            out.push((
                hash,
                Caller {
                    team: e.team,
                    role: e.role,
                    name: e.name,
                },
            ));
        }
        Ok(Self { entries: out })
    }

    /// Loads a YAML (`.yaml`/`.yml`) or TOML (`.toml`) tokens file.
    pub fn load(path: &Path) -> Result<Self, TokensFileError> {
        Self::from_entries(Self::read_entries(path)?)
    }

    /// The entries of a tokens file, unchecked (see [`Tokens::from_entries`]).
    pub fn read_entries(path: &Path) -> Result<Vec<TokenEntry>, TokensFileError> {
        Ok(Self::read_entries_and_text(path)?.0)
    }

    /// The entries of a tokens file, unchecked, and the text they were read from.
    pub fn read_entries_and_text(
        path: &Path,
    ) -> Result<(Vec<TokenEntry>, String), TokensFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokensFileError::Io {
            path: shown.clone(),
            source,
        })?;
        let parse = |reason: String| TokensFileError::Parse {
            path: shown.clone(),
            reason,
        };
        let doc: TokensDoc = match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => toml::from_str(&text).map_err(|e| parse(e.to_string()))?,
            Some("yaml" | "yml") => {
                serde_saphyr::from_str(&text).map_err(|e| parse(e.to_string()))?
            }
            _ => return Err(parse("the name must end in .yaml, .yml or .toml".into())),
        };
        Ok((doc.tokens, text))
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no tokens.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The caller a token belongs to. Compares against every entry in constant time.
    pub fn lookup(&self, token: &str) -> Result<Caller, AuthError> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.lookup_digest(&presented).ok_or(AuthError::Invalid)
    }

    /// The caller whose token has SHA-256 `digest` (what a console session keeps, so a
    /// revoked token ends its sessions too). Constant time over every entry.
    pub fn lookup_digest(&self, digest: &[u8; 32]) -> Option<Caller> {
        let mut found = None;
        for (hash, caller) in &self.entries {
            if bool::from(hash.ct_eq(digest)) {
                found = Some(caller);
            }
        }
        found.cloned()
    }

    /// Authenticates an `Authorization` header value (`None`: no header; a value that
    /// is not visible ASCII is passed as `Some("")`).
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        self.lookup(bearer_token(authorization)?)
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), or
/// why there is none: every route reads its bearer token through this.
pub fn bearer_token(authorization: Option<&str>) -> Result<&str, AuthError> {
    let value = authorization.ok_or(AuthError::Missing)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthError::Invalid)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Invalid);
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Invalid);
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tokens {
        Tokens::from_entries(vec![
            TokenEntry {
                token_sha256: hash_token("alice-secret"),
                team: "team-a".into(),
                role: Role::Member,
                name: Some("alice".into()),
            },
            TokenEntry {
                token_sha256: hash_token("root-secret"),
                team: "ops".into(),
                role: Role::Admin,
                name: None,
            },
        ])
        .expect("valid")
    }

    #[test]
    fn hash_matches_sha256sum() {
        // printf %s test | sha256sum
        assert_eq!(
            hash_token("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn lookup_and_roles() {
        let t = tokens();
        let alice = t.lookup("alice-secret").expect("alice");
        assert_eq!(alice.team, "team-a");
        assert!(alice.can_access("team-a"));
        assert!(!alice.can_access("team-b"));
        assert_eq!(
            alice.require_admin(),
            Err(AuthError::Forbidden("admin role required".into()))
        );
        let root = t.lookup("root-secret").expect("root");
        assert!(root.can_access("team-b"));
        assert!(root.require_admin().is_ok());
        assert_eq!(t.lookup("alice-secre"), Err(AuthError::Invalid));
        assert_eq!(t.lookup(""), Err(AuthError::Invalid));
        assert!(!format!("{t:?}").contains("alice"));
    }

    #[test]
    fn header_parsing() {
        let t = tokens();
        assert_eq!(t.authenticate(None), Err(AuthError::Missing));
        let h = |s: &'static str| s;
        assert!(t.authenticate(Some(h("Bearer alice-secret"))).is_ok());
        assert!(t.authenticate(Some(h("bearer  alice-secret "))).is_ok());
        assert_eq!(
            t.authenticate(Some(h("Basic YWxpY2U="))),
            Err(AuthError::Invalid)
        );
        assert_eq!(t.authenticate(Some(h("Bearer"))), Err(AuthError::Invalid));
        assert_eq!(
            t.authenticate(Some(h("Bearer   "))),
            Err(AuthError::Invalid)
        );
        assert_eq!(
            t.authenticate(Some(h("Bearer wrong"))),
            Err(AuthError::Invalid)
        );
    }

    #[test]
    fn bad_entries_are_rejected() {
        let entry = |hash: &str, team: &str| TokenEntry {
            token_sha256: hash.into(),
            team: team.into(),
            role: Role::Member,
            name: None,
        };
        let plain = Tokens::from_entries(vec![entry("alice-secret", "team-a")]);
        assert!(matches!(
            plain,
            Err(TokensFileError::Entry { index: 0, .. })
        ));
        let bad_team = Tokens::from_entries(vec![entry(&hash_token("x"), "Team A")]);
        assert!(matches!(
            bad_team,
            Err(TokensFileError::Entry { index: 0, .. })
        ));
        for reserved in ["global", "forge", "kube-system", "forge-ops", "all"] {
            let r = Tokens::from_entries(vec![entry(&hash_token("x"), reserved)]);
            match r {
                Err(TokensFileError::Entry { index: 0, reason }) => {
                    assert!(reason.contains("reserved"), "{reserved}: {reason}");
                }
                other => panic!("{reserved} must be refused: {other:?}"),
            }
        }
        assert!(Tokens::from_entries(vec![entry(&hash_token("x"), "globals")]).is_ok());
        let dup = Tokens::from_entries(vec![
            entry(&hash_token("x"), "a"),
            entry(&hash_token("x"), "b"),
        ]);
        assert!(matches!(dup, Err(TokensFileError::Entry { index: 1, .. })));
    }

    #[test]
    fn loads_yaml_and_toml_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = dir.path().join("tokens.yaml");
        std::fs::write(
            &yaml,
            format!(
                "tokens:\n  - name: alice\n    team: team-a\n    role: member\n    token_sha256: {}\n",
                hash_token("alice-secret")
            ),
        )
        .expect("write");
        let t = Tokens::load(&yaml).expect("yaml");
        assert_eq!(t.len(), 1);
        assert_eq!(t.lookup("alice-secret").expect("alice").team, "team-a");

        let toml_path = dir.path().join("tokens.toml");
        std::fs::write(
            &toml_path,
            format!(
                "[[tokens]]\nteam = \"ops\"\nrole = \"admin\"\ntoken_sha256 = \"{}\"\n",
                hash_token("root")
            ),
        )
        .expect("write");
        assert_eq!(
            Tokens::load(&toml_path)
                .expect("toml")
                .lookup("root")
                .expect("root")
                .role,
            Role::Admin
        );

        let bad_role = dir.path().join("bad.yaml");
        std::fs::write(
            &bad_role,
            "tokens:\n  - team: a\n    role: owner\n    token_sha256: x\n",
        )
        .expect("write");
        assert!(matches!(
            Tokens::load(&bad_role),
            Err(TokensFileError::Parse { .. })
        ));
        let plaintext = dir.path().join("plain.yaml");
        std::fs::write(
            &plaintext,
            "tokens:\n  - team: a\n    role: member\n    token: hunter2\n",
        )
        .expect("write");
        assert!(matches!(
            Tokens::load(&plaintext),
            Err(TokensFileError::Parse { .. })
        ));
        assert!(matches!(
            Tokens::load(&dir.path().join("missing.yaml")),
            Err(TokensFileError::Io { .. })
        ));
        assert!(matches!(
            Tokens::load(&dir.path().join("tokens.json")),
            Err(TokensFileError::Io { .. } | TokensFileError::Parse { .. })
        ));
    }

    #[test]
    fn a_bearer_token_is_read_in_any_case_of_the_scheme() {
        assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Ok("abc"));
        assert_eq!(bearer_token(None), Err(AuthError::Missing));
        for bad in ["Basic abc", "Bearer", "Bearer  ", "abc"] {
            assert_eq!(bearer_token(Some(bad)), Err(AuthError::Invalid), "{bad}");
        }
    }
}
