//! Configuration problems: [`ConfigError`] names the variable and why (never a secret
//! value); [`ConfigErrors`] carries every problem found, so that one start-up reports
//! them all at once.

use std::fmt;

/// One configuration problem, naming the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The value cannot be used.
    #[error("{var}: {reason}")]
    Invalid {
        /// The variable.
        var: String,
        /// Why (never contains a secret value).
        reason: String,
    },
    /// A required variable is missing.
    #[error("{var}: required {reason}")]
    Missing {
        /// The variable.
        var: String,
        /// When it is required.
        reason: String,
    },
    /// The variable only makes sense together with another one.
    #[error("{var}: set without {requires} ({reason})")]
    Requires {
        /// The variable that is set.
        var: String,
        /// The variable that is missing.
        requires: String,
        /// Why they go together.
        reason: String,
    },
    /// Only part of a group of variables is set.
    #[error("{group}: partial configuration, missing {}", missing.join(", "))]
    Partial {
        /// The group, e.g. `FORGE_S3_*`.
        group: String,
        /// The missing members.
        missing: Vec<String>,
    },
    /// The config file cannot be read or parsed.
    #[error("FORGE_CONFIG_FILE ({path}): {reason}")]
    File {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The config file has a key that is not a Forge variable.
    #[error("FORGE_CONFIG_FILE ({path}): unknown key {key}")]
    UnknownKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
    },
}

impl ConfigError {
    /// The variable (or group) the problem is about.
    pub fn var(&self) -> &str {
        match self {
            Self::Invalid { var, .. } | Self::Missing { var, .. } | Self::Requires { var, .. } => {
                var
            }
            Self::Partial { group, .. } => group,
            Self::File { .. } | Self::UnknownKey { .. } => "FORGE_CONFIG_FILE",
        }
    }

    /// Every variable the problem is about (a `Requires` names two).
    pub fn vars(&self) -> Vec<&str> {
        match self {
            Self::Requires { var, requires, .. } => vec![var, requires],
            _ => vec![self.var()],
        }
    }
}

/// Every problem found while loading the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

/// One problem on one line (`invalid configuration: …`); several, one a line after a
/// count.
impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [one] = self.0.as_slice() {
            return write!(f, "invalid configuration: {one}");
        }
        write!(f, "invalid configuration ({} problem(s)):", self.0.len())?;
        for e in &self.0 {
            write!(f, "\n  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}
