//! Typed failures of the policy host.
//!
//! `LoadError` is what an upload or activation gets (the component is refused before it
//! can ever run); `PluginError` is what one call gets. Every call failure fails the
//! admission closed; callers branch on the variant for metrics and messages.

use thiserror::Error;

/// Why a component cannot be loaded as a policy plugin.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The bytes are not a WebAssembly component (a core module, garbage, …).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// The component imports something other than the policy contract's interfaces.
    #[error(
        "component imports `{0}`, but policies may only import `forge:policy/host` and \
         `forge:policy/request-view`"
    )]
    ForbiddenImport(String),
    /// The component does not export the `forge:policy/policy` world of a supported version.
    #[error("component does not implement a supported policy world ({supported}): {detail}")]
    WrongWorld {
        supported: &'static str,
        detail: String,
    },
    /// The component does not export a function every supported world exports.
    #[error(
        "component does not export {0}: build it against forge:policy/policy@0.3.0 \
         (or @0.2.0, @0.1.0)"
    )]
    MissingExports(String),
    /// The component's shape is beyond the engine's limits (`crate::ShapeLimits`),
    /// found before compiling.
    #[error("component is too complex: {0}")]
    TooComplex(String),
    /// Compilation failed or exceeded the engine's limits.
    #[error("component failed to compile: {0}")]
    Compile(String),
    /// The compile did not finish within the engine's time limit (it is abandoned).
    #[error("component did not compile within {seconds} s")]
    CompileTimeout { seconds: u64 },
    /// Every compile thread is busy and the queue is full; try again later.
    #[error(
        "the plugin compiler is busy ({running} compiling, {waiting} waiting); try again later"
    )]
    CompilerBusy { running: usize, waiting: usize },
    /// The plugin's limits are above the engine's maxima (or zero).
    #[error("plugin limits refused: {0}")]
    Limits(String),
    /// The precompiled cache could not be read or written.
    #[error("precompile cache error at {path}: {detail}")]
    Cache { path: String, detail: String },
    /// The plugin refused its settings in `validate-settings`.
    #[error("plugin `{plugin}` rejected its settings: {message}")]
    InvalidSettings { plugin: String, message: String },
    /// `validate-settings` itself failed (trap, deadline, memory).
    #[error("plugin `{plugin}` failed while validating settings: {source}")]
    SettingsCheckFailed {
        plugin: String,
        #[source]
        source: PluginError,
    },
}

/// Why one plugin call failed. The host and the next call are unaffected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PluginError {
    /// The call ran past its deadline and was interrupted.
    #[error("deadline of {deadline_ms} ms exceeded")]
    Deadline { deadline_ms: u64 },
    /// The plugin tried to grow its memory beyond the cap.
    #[error("memory cap of {cap_bytes} bytes exceeded")]
    Memory { cap_bytes: usize },
    /// The plugin trapped (panic, unreachable, out-of-bounds access, …).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The plugin returned something the contract forbids.
    #[error("plugin returned a malformed decision: {0}")]
    BadOutput(String),
    /// A team plugin widened the placement ([`crate::narrowing`] for selectors,
    /// resources, labels and annotations; `narrowing_scheduling` for tolerations and
    /// node affinity).
    #[error("team plugin widened the placement: {0}")]
    Widened(Box<crate::narrowing::Widening>),
    /// The host could not instantiate the plugin (e.g. the instance pool is exhausted).
    #[error("plugin could not be instantiated: {0}")]
    Instantiate(String),
    /// `FORGE_POLICY_VERIFY`: a reused (warm) instance decided differently than a
    /// fresh instance on the same input; the plugin keeps state between calls.
    #[error("{0}")]
    Nondeterministic(Box<Mismatch>),
}

/// The two decisions of a `FORGE_POLICY_VERIFY` comparison that differed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error(
    "plugin decided `{warm}` in a reused instance but `{fresh}` in a fresh one: \
     its decisions depend on earlier calls"
)]
pub struct Mismatch {
    /// The reused instance's decision (`admit`, `queue:<code>`, `reject:<code>`).
    pub warm: String,
    /// The fresh instance's decision, or `error:<cause>`.
    pub fresh: String,
}

impl PluginError {
    /// The field a failure is about (a widening names one).
    pub fn field(&self) -> Option<&str> {
        match self {
            PluginError::Widened(w) => Some(&w.field),
            _ => None,
        }
    }

    /// Stable name of the cause, for metrics labels and API error codes.
    pub fn cause(&self) -> &'static str {
        match self {
            PluginError::Deadline { .. } => "deadline",
            PluginError::Memory { .. } => "memory",
            PluginError::Trap(_) => "trap",
            PluginError::BadOutput(_) => "bad-output",
            PluginError::Widened(_) => "widened",
            PluginError::Instantiate(_) => "instantiate",
            PluginError::Nondeterministic(_) => "nondeterministic",
        }
    }
}

/// A chain evaluation that failed closed.
#[derive(Debug, Error, Clone, PartialEq)]
#[error("policy `{plugin}` ({digest}) failed: {source}")]
pub struct ChainError {
    /// What each plugin that ran did, the failing one last (boxed: errors stay small).
    pub trace: Box<Vec<crate::trace_entry::TraceEntry>>,
    /// Name of the failing plugin in the chain.
    pub plugin: String,
    /// Version label of the failing plugin.
    pub version: String,
    /// Content digest of the failing plugin.
    pub digest: String,
    /// What went wrong.
    #[source]
    pub source: PluginError,
}
