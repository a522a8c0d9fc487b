//! [`PolicyAdminError`]: why a policy-management operation (upload, chain change,
//! rollback, shadow mode) failed, as variants callers branch on; nothing is stored or
//! activated when one of these is returned. [`EvalError`]: why an admission could not
//! be evaluated. Both declare what they answer ([`Answers`]).

use forge_policy_host::{ChainError, LoadError, PluginError, RunError};
use http::StatusCode;
use serde_json::{Value, json};

use crate::answer::{Answer, Answers, BoxError, Failed};
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

impl EvalError {
    /// What each plugin that ran did (the failing one last), when a plugin failed.
    pub fn chain_trace(&self) -> &[forge_policy_host::TraceEntry] {
        match self {
            EvalError::Run(forge_policy_host::RunError::Chain(e)) => &e.trace,
            _ => &[],
        }
    }
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
    /// A team's chain carried fair-share weights (they are the global policy's).
    #[error("fair-share weights are settings of the global policy (PUT /v1/policy without ?team=)")]
    FairShareNotGlobal,
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
    /// Object storage failed (or holds bytes that do not match their digest): which
    /// object, and why.
    #[error("object storage: {what}: {source}")]
    Storage {
        what: String,
        #[source]
        source: BoxError,
    },
    /// The store failed.
    #[error("policy store: {0}")]
    Store(#[source] StoreError),
    /// A blocking task or the evaluation pool failed.
    #[error(transparent)]
    Task(#[from] Failed),
    /// A broken invariant (a bug): what was found.
    #[error("{0}")]
    Invariant(String),
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
                PolicyAdminError::Invariant(format!("precompile cache {path}: {detail}"))
            }
            other => PolicyAdminError::Component(other),
        }
    }

    /// `what` failed in a blocking task or the evaluation pool.
    pub fn task(what: &'static str, e: impl Into<BoxError>) -> Self {
        PolicyAdminError::Task(Failed::new(what, e))
    }

    /// Object storage failed on `what`.
    pub fn storage(what: impl Into<String>, e: impl Into<BoxError>) -> Self {
        PolicyAdminError::Storage {
            what: what.into(),
            source: e.into(),
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

/// How long a client should wait when every plugin compile thread is busy.
const COMPILER_BUSY_RETRY_S: u64 = 10;

/// The stable code of a refused component.
fn component_code(e: &LoadError) -> &'static str {
    match e {
        LoadError::NotAComponent(_) => "plugin.not-a-component",
        LoadError::ForbiddenImport(_) => "plugin.forbidden-import",
        LoadError::WrongWorld { .. } | LoadError::MissingExports(_) => "plugin.wrong-world",
        LoadError::Limits(_) => "plugin.limits",
        LoadError::TooComplex(_) => "plugin.too-complex",
        LoadError::CompileTimeout { .. } => "plugin.compile-timeout",
        _ => "plugin.compile-failed",
    }
}

impl Answers for PolicyAdminError {
    fn answer(&self) -> Answer {
        use PolicyAdminError as P;
        let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
        let message = self.to_string();
        match self {
            P::Malformed { what, field, .. } => {
                let code = match what {
                    Malformed::Name => "invalid-name",
                    Malformed::Version => "invalid-version",
                    Malformed::Link => "invalid-policy",
                };
                Answer::new(StatusCode::BAD_REQUEST, code, message).field(field.as_str())
            }
            P::Component(LoadError::CompilerBusy { .. }) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "plugin.compiler-busy",
                message,
            )
            .retry_after(COMPILER_BUSY_RETRY_S)
            .field(None),
            P::Component(load) => {
                Answer::new(unprocessable, component_code(load), message).field("component")
            }
            P::FailedUploads { retry_after, .. } => {
                let seconds = retry_after.as_secs().max(1);
                Answer::new(StatusCode::TOO_MANY_REQUESTS, "rate-limited", message)
                    .retry_after(seconds)
                    .details(json!({ "field": null, "retryAfterSeconds": seconds }))
            }
            P::ChainTooLong { limit, .. } => {
                Answer::new(unprocessable, "policy.chain-too-long", message)
                    .details(json!({ "field": "plugins", "limit": limit }))
            }
            P::FairShareNotGlobal => {
                Answer::new(unprocessable, "policy.fair-share-global-only", message)
                    .field("fairShare")
            }
            P::Settings { plugin, field, .. } => {
                Answer::new(unprocessable, "plugin.invalid-settings", message)
                    .details(json!({ "field": field, "plugin": plugin }))
            }
            P::LimitTooHigh { field, .. } => {
                Answer::new(unprocessable, "plugin.limit-too-high", message).field(field.as_str())
            }
            P::TooLarge { .. } => {
                Answer::new(StatusCode::PAYLOAD_TOO_LARGE, "plugin.too-large", message)
                    .field("component")
            }
            P::TeamLimit { .. } => {
                Answer::new(unprocessable, "plugin.team-limit", message).field(None)
            }
            P::VersionExists {
                name,
                version,
                digest,
            } => StoreError::PluginVersionExists {
                name: name.clone(),
                version: version.clone(),
                digest: digest.clone(),
            }
            .answer(),
            P::UnknownPlugin { field, .. } => {
                Answer::new(unprocessable, "policy.unknown-plugin", message).field(field.as_str())
            }
            P::VersionConflict {
                scope,
                expected,
                current,
            } => StoreError::VersionConflict {
                scope: scope.clone(),
                expected: *expected,
                current: *current,
            }
            .answer(),
            P::NothingToRollBack { .. } => {
                Answer::new(StatusCode::CONFLICT, "policy.no-previous-version", message).field(None)
            }
            P::Forbidden(_) => Answer::new(StatusCode::FORBIDDEN, "forbidden", message).field(None),
            P::NotFound(_) => Answer::new(StatusCode::NOT_FOUND, "not-found", message).field(None),
            P::Storage { .. } => Answer::storage_unavailable("changed"),
            P::Store(e) => crate::answer::Answers::answer(e),
            P::Task(_) | P::Invariant(_) => Answer::internal(),
        }
    }
}

impl Answers for EvalError {
    fn answer(&self) -> Answer {
        match self {
            EvalError::Run(RunError::Chain(e)) => {
                // A widening is the team plugin's own fault and says which field; other
                // failures are reported by cause only.
                let what = match &e.source {
                    PluginError::Widened(w) => format!("widened: {w}"),
                    other => other.cause().to_string(),
                };
                Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "policy-failed",
                    format!(
                        "admission policy `{}` failed ({what}); the job was not admitted",
                        e.plugin
                    ),
                )
                .details(chain_failure_details(e))
            }
            EvalError::ScopeUnavailable { scope, version, .. } => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "policy-unavailable",
                format!(
                    "policy `{scope}` (version {version}) cannot be loaded, so this team's \
                     admissions fail closed; an admin must fix or replace it"
                ),
            )
            .details(json!({ "scope": scope, "version": version }))
            .logged(),
            EvalError::Run(RunError::Unavailable(_)) => Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "policy evaluation is unavailable",
            )
            .logged(),
        }
    }
}

/// Details of a chain that failed closed: the plugin and the cause, and for a team link
/// that widened the placement the host's own account of which field it widened (host
/// text, never the plugin's — a plugin's trap or output is logged, not echoed).
fn chain_failure_details(e: &ChainError) -> Value {
    let mut details = json!({ "plugin": e.plugin, "digest": e.digest, "cause": e.source.cause() });
    if let PluginError::Widened(w) = &e.source {
        details["field"] = json!(w.field);
        details["reason"] = json!(w.to_string());
    }
    details
}
