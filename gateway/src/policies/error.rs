//! Failures of policy management (uploads, chain changes, rollback, shadow mode),
//! each with the stable API code it is answered with.

use crate::policy::LoadError;

/// Why a policy-management operation failed. Nothing is stored or activated when one
/// of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum PolicyAdminError {
    /// The upload or chain document is malformed (missing field, bad name, …).
    #[error("{message}")]
    BadRequest {
        code: &'static str,
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
    /// The component is larger than the per-plugin limit.
    #[error("the component is {size} bytes; the limit is {limit} (FORGE_PLUGIN_MAX_KIB)")]
    TooLarge { size: u64, limit: u64 },
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
    /// Object storage failed.
    #[error("object storage: {0}")]
    Storage(String),
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] rusqlite::Error),
    /// A bug or a broken invariant.
    #[error("{0}")]
    Internal(String),
}

impl From<crate::store::StoreError> for PolicyAdminError {
    fn from(e: crate::store::StoreError) -> Self {
        match e {
            crate::store::StoreError::Database(d) => PolicyAdminError::Database(d),
            other => PolicyAdminError::Internal(other.to_string()),
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

    /// HTTP status, stable code and the field the problem is about.
    pub fn status_code_field(&self) -> (u16, &'static str, Option<String>) {
        match self {
            PolicyAdminError::BadRequest { code, field, .. } => (400, code, Some(field.clone())),
            PolicyAdminError::Component(e) => (
                422,
                match e {
                    LoadError::NotAComponent(_) => "plugin.not-a-component",
                    LoadError::ForbiddenImport(_) => "plugin.forbidden-import",
                    LoadError::WrongWorld { .. } => "plugin.wrong-world",
                    _ => "plugin.compile-failed",
                },
                Some("component".into()),
            ),
            PolicyAdminError::Settings { field, .. } => {
                (422, "plugin.invalid-settings", Some(field.clone()))
            }
            PolicyAdminError::TooLarge { .. } => {
                (413, "plugin.too-large", Some("component".into()))
            }
            PolicyAdminError::TeamLimit { .. } => (422, "plugin.team-limit", None),
            PolicyAdminError::VersionExists { .. } => {
                (409, "plugin.version-exists", Some("version".into()))
            }
            PolicyAdminError::UnknownPlugin { field, .. } => {
                (422, "policy.unknown-plugin", Some(field.clone()))
            }
            PolicyAdminError::VersionConflict { .. } => (
                409,
                "policy.version-conflict",
                Some("expectedVersion".into()),
            ),
            PolicyAdminError::NothingToRollBack { .. } => (409, "policy.no-previous-version", None),
            PolicyAdminError::Forbidden(_) => (403, "forbidden", None),
            PolicyAdminError::NotFound(_) => (404, "not-found", None),
            PolicyAdminError::Storage(_) => (503, "storage-unavailable", None),
            PolicyAdminError::Database(_) | PolicyAdminError::Internal(_) => {
                (500, "internal", None)
            }
        }
    }
}
