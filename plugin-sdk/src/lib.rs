//! # Forge plugin SDK
//!
//! Write a Forge admission policy in about twenty lines: implement [`Policy`] for a
//! type, name its settings type, and call [`export_policy!`]. The crate builds to a
//! WebAssembly component targeting `forge:policy/policy@0.3.0` (see `wit/` at the
//! repository root, the same files the gateway's host is generated from). Plugins built
//! with older SDKs against `0.1.0` or `0.2.0` keep running in the same chains.
//!
//! The [`Request`] is read from the host part by part, on first use: a policy pays
//! only for what it looks at. [`Decision::admit`] lets the job through with the
//! placement it was given (nothing is copied back); [`Decision::place`] hands on a
//! changed placement.
//!
//! ```
//! use forge_plugin_sdk::prelude::*;
//!
//! #[derive(serde::Deserialize, Default)]
//! #[serde(deny_unknown_fields)]
//! pub struct Settings {
//!     max_nodes: u32,
//! }
//!
//! pub struct MaxNodes;
//!
//! impl Policy for MaxNodes {
//!     type Settings = Settings;
//!
//!     fn validate(s: &Settings) -> Result<(), String> {
//!         if s.max_nodes == 0 { return Err("max_nodes must be at least 1".into()) }
//!         Ok(())
//!     }
//!
//!     fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
//!         let nodes = req.job().total_nodes();
//!         if nodes > u64::from(s.max_nodes) {
//!             return Decision::reject("nodes.too-many", format!("{nodes} nodes > {}", s.max_nodes), Some("pools"));
//!         }
//!         Decision::admit()
//!     }
//! }
//!
//! export_policy!(MaxNodes);
//! # fn main() {
//! # let h = forge_plugin_sdk::harness::Harness::<MaxNodes>::new(r#"{"max_nodes": 1}"#).unwrap();
//! # let d = h.evaluate(&forge_plugin_sdk::harness::RequestBuilder::new().pool("a", 2, 8, None).build());
//! # assert!(matches!(d, Decision::Reject(_)));
//! # }
//! ```
//!
//! Test the logic natively with [`harness`]; the compiled component runs in the real
//! gateway host in the repository's integration tests (see the README).

mod configured;
#[cfg(not(target_arch = "wasm32"))]
pub mod harness;
pub mod log;
mod request;
mod types_ext;

/// Generated bindings for `forge:policy/policy@0.3.0` (the guest side).
#[allow(missing_docs, clippy::all, rust_2018_idioms, unsafe_op_in_unsafe_fn)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/policy@0.3.0",
        world: "forge:policy/policy@0.3.0",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "forge_plugin_sdk::bindings",
        additional_derives: [PartialEq],
    });
}

pub use bindings::forge::policy::types::{
    Admission, Cluster, Decision, Fleet, Hold, Job, NodeAffinity, NodeSelectorRequirement,
    NodeSelectorTerm, Placement, PlanVerdict, Pool, PoolPlacement, PreemptionPlan, PreferredTerm,
    Rejection, SelectorOperator, SeriesCapacity, SeriesTaint, SeriesUsage, StorageMode, Taint,
    TaintEffect, TeamShare, Toleration, TolerationOperator, Victim, WorkloadKind,
};
pub use request::{Request, RequestParts};
pub use types_ext::BORROWED_GPUS_ANNOTATION;

/// Everything a plugin usually needs.
pub mod prelude {
    pub use crate::BORROWED_GPUS_ANNOTATION;
    pub use crate::export_policy;
    pub use crate::log;
    pub use crate::{
        Admission, Cluster, Decision, Fleet, Hold, Job, NodeAffinity, NodeSelectorRequirement,
        NodeSelectorTerm, Placement, PlanVerdict, Policy, Pool, PoolPlacement, PreemptionPlan,
        PreferredTerm, Rejection, Request, SelectorOperator, SeriesCapacity, SeriesTaint,
        SeriesUsage, StorageMode, Taint, TaintEffect, TeamShare, Toleration, TolerationOperator,
        Victim, WorkloadKind,
    };
}

/// A policy: settings plus a pure decision function.
pub trait Policy {
    /// The plugin's settings, parsed from the JSON settings document. Use
    /// `#[serde(deny_unknown_fields)]` so typos are caught by `validate-settings`.
    type Settings: serde::de::DeserializeOwned + 'static;

    /// Semantic checks beyond parsing; the message names the offending setting.
    fn validate(settings: &Self::Settings) -> Result<(), String> {
        let _ = settings;
        Ok(())
    }

    /// Decide about one job. Return [`Decision::admit`] to let it through as placed
    /// so far, [`Decision::place`] with a changed `request.placement()`,
    /// [`Decision::queue`] to make the job wait, or [`Decision::reject`] to refuse it.
    /// An admit may cap the job's priority ([`Decision::with_priority_cap`]) or make
    /// it non-preemptible ([`Decision::not_preemptible`]; global policies only).
    ///
    /// The decision must depend only on `settings` and `request`, never on an earlier
    /// call: the host reuses an instance for later calls of the same plugin, settings
    /// and team (`FORGE_POLICY_ISOLATION=warm`), and replay and shadow evaluation
    /// assume the same input decides the same way. `FORGE_POLICY_VERIFY` catches a
    /// plugin that keeps state by comparing with a fresh instance.
    fn evaluate(settings: &Self::Settings, request: &Request<'_>) -> Decision;

    /// Accept, reorder or veto a preemption the host plans for a higher-priority job
    /// (`plan.candidates` in the host's order, least lost work first). The default
    /// accepts. A team's policy is asked only about its own team's jobs and may only
    /// accept or veto.
    fn plan_preemption(settings: &Self::Settings, plan: &PreemptionPlan) -> PlanVerdict {
        let _ = (settings, plan);
        PlanVerdict::Accept
    }
}

/// Parse a settings document; an empty document means `{}`. Errors name the setting,
/// like the Python and TypeScript SDKs': `invalid settings: max_gpus: invalid type: …`.
pub fn parse_settings<P: Policy>(settings: &str) -> Result<P::Settings, String> {
    let text = if settings.trim().is_empty() {
        "{}"
    } else {
        settings
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            format!("invalid settings: {inner}")
        } else {
            format!("invalid settings: {path}: {inner}")
        }
    })?;
    de.end().map_err(|e| format!("invalid settings: {e}"))?;
    Ok(parsed)
}

/// Implementation of the exported `validate-settings`.
#[doc(hidden)]
pub fn __validate<P: Policy>(settings: &str) -> Result<(), String> {
    P::validate(&parse_settings::<P>(settings)?)
}

/// Implementation of the exported `configure`.
#[doc(hidden)]
pub fn __configure<P: Policy>(settings: &str) -> Result<(), String> {
    configured::configure::<P>(settings)
}

/// The configured settings; without them the plugin fails closed (traps).
fn configured_settings<P: Policy>() -> std::rc::Rc<P::Settings> {
    match configured::settings::<P>() {
        Ok(s) => s,
        Err(e) => {
            log::error(&e);
            panic!("{e}");
        }
    }
}

/// Implementation of the exported `evaluate`.
#[doc(hidden)]
pub fn __evaluate<P: Policy>(request: &Request<'_>) -> Decision {
    P::evaluate(&configured_settings::<P>(), request)
}

/// Implementation of the exported `plan-preemption`.
#[doc(hidden)]
pub fn __plan_preemption<P: Policy>(plan: &PreemptionPlan) -> PlanVerdict {
    P::plan_preemption(&configured_settings::<P>(), plan)
}

/// Export a [`Policy`] implementation as the component's `forge:policy/policy` world.
///
/// Expands to nothing on non-WebAssembly targets, so the same crate can be unit
/// tested natively (and several plugins linked into one native binary).
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __ForgePolicyExport;

            impl $crate::bindings::Guest for __ForgePolicyExport {
                fn validate_settings(
                    settings: ::std::string::String,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::__validate::<$policy>(&settings)
                }

                fn configure(
                    settings: ::std::string::String,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::__configure::<$policy>(&settings)
                }

                fn evaluate(
                    request: &$crate::bindings::forge::policy::request_view::Request,
                ) -> $crate::Decision {
                    $crate::__evaluate::<$policy>(&$crate::Request::from_host(request))
                }

                fn plan_preemption(plan: $crate::PreemptionPlan) -> $crate::PlanVerdict {
                    $crate::__plan_preemption::<$policy>(&plan)
                }
            }

            $crate::bindings::export!(__ForgePolicyExport);
        };
    };
}
