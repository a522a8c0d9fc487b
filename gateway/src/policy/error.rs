//! [`PolicyAdminError`]: why a policy-management operation (upload, chain change,
//! rollback, shadow mode) failed, as variants callers branch on. Nothing is stored or
//! activated when one of these is returned. The HTTP edge maps them to statuses and
//! stable codes (`http::error`).

use forge_policy_host::{LoadError, RunError};

use crate::store::StoreError;

/// Why an admission could not be evaluated (it fails closed).
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// A plugin failed, or the runner is unavailable.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The team's stored chain could not be built (its admissions fail closed until
    /// it is fixed or replaced).
    #[error("policy `{scope}` version {version} is unavailable: {reason}")]
    ScopeUnavailable {
        scope: String,
        version: u64,
        /// Why (logged; not shown to API callers).
        reason: String,
    },
}

/// Which name in an upload or chain is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A plugin name (`[a-z0-9-]`, 1-63).
    Name,
    /// A plugin version (`[A-Za-z0-9._+-]`, 1-64).
    Version,
    /// A chain link or chain document.
    Link,
}

/// Why a policy-management operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PolicyAdminError {
    /// A name, version or link is malformed.
    #[error("{message}")]
    Malformed {
        what: Malformed,
        field: String,
        message: String,
    },
    /// The component is refused by the host (not a component, wrong world, forbidden
    /// import, does not compile).
    #[error("{0}")]
    Component(LoadError),
    /// A plugin refused its settings (or failed while checking them).
    #[error("plugin `{plugin}` settings: {message}")]
    Settings {
        plugin: String,
        field: String,
        message: String,
    },
    /// A requested per-plugin limit (`memoryMib`, `deadlineMs`) is zero or above the
    /// operator's maximum.
    #[error("{message}")]
    LimitTooHigh { field: String, message: String },
    /// The component is larger than the per-plugin limit.
    #[error("the component is {size} bytes; the limit is {limit} (FORGE_PLUGIN_MAX_KIB)")]
    TooLarge { size: u64, limit: u64 },
    /// The team's uploads failed too often lately
    /// (`FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR`); it may upload again after `retry_after`.
    #[error(
        "team `{team}` had too many failed plugin uploads (at most {per_hour} per hour); \
         retry in {}s",
        retry_after.as_secs().max(1)
    )]
    FailedUploads {
        team: String,
        per_hour: u32,
        retry_after: std::time::Duration,
    },
    /// A chain has more links than `FORGE_POLICY_MAX_CHAIN_LINKS`.
    #[error("a chain may have at most {limit} plugins; this one has {count}")]
    ChainTooLong { count: usize, limit: usize },
    /// The team already has as many plugins, or bytes, as it may.
    #[error("team `{team}` {message}")]
    TeamLimit { team: String, message: String },
    /// The (owner, name, version) is taken by other bytes; versions are immutable.
    #[error("plugin `{name}` version `{version}` already exists with digest {digest}")]
    VersionExists {
        name: String,
        version: String,
        digest: String,
    },
    /// A chain names a plugin that is not registered (or not usable in this scope).
    #[error("no plugin `{reference}` usable in scope `{scope}`")]
    UnknownPlugin {
        reference: String,
        scope: String,
        field: String,
    },
    /// Optimistic concurrency: the scope is not at the version the writer expected.
    #[error("policy `{scope}` is at version {current}, not {expected}")]
    VersionConflict {
        scope: String,
        expected: u64,
        current: u64,
    },
    /// Rollback of a scope that has no earlier version.
    #[error("policy `{scope}` has no version to roll back to")]
    NothingToRollBack { scope: String },
    /// The caller may not do this (member changing global policy, another team's …).
    #[error("{0}")]
    Forbidden(String),
    /// No such scope / version / shadow candidate.
    #[error("{0}")]
    NotFound(String),
    /// Object storage failed (or holds bytes that do not match their digest).
    #[error("object storage: {0}")]
    Storage(String),
    /// The store failed.
    #[error("policy store: {0}")]
    Store(StoreError),
    /// A bug or a broken invariant.
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for PolicyAdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::VersionConflict {
                scope,
                expected,
                current,
            } => PolicyAdminError::VersionConflict {
                scope,
                expected,
                current,
            },
            StoreError::PluginVersionExists {
                name,
                version,
                digest,
            } => PolicyAdminError::VersionExists {
                name,
                version,
                digest,
            },
            other => PolicyAdminError::Store(other),
        }
    }
}

impl PolicyAdminError {
    /// The refusal of a component or its settings, as this module reports it.
    pub fn from_load(e: LoadError, field: &str) -> Self {
        match e {
            LoadError::InvalidSettings { plugin, message } => PolicyAdminError::Settings {
                plugin,
                field: field.to_string(),
                message,
            },
            LoadError::SettingsCheckFailed { plugin, source } => PolicyAdminError::Settings {
                plugin,
                field: field.to_string(),
                message: format!("validate-settings failed: {source}"),
            },
            LoadError::Cache { path, detail } => {
                PolicyAdminError::Internal(format!("precompile cache {path}: {detail}"))
            }
            other => PolicyAdminError::Component(other),
        }
    }

    /// A malformed name, version or link.
    pub fn malformed(
        what: Malformed,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        PolicyAdminError::Malformed {
            what,
            field: field.into(),
            message: message.into(),
        }
    }
}
