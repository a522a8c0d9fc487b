//! # Forge plugin SDK
//!
//! Write a Forge admission policy in about twenty lines: implement [`Policy`] for a
//! type, name its settings type, and call [`export_policy!`]. The crate builds to a
//! WebAssembly component targeting `forge:policy/policy@0.2.0` (see `wit/` at the
//! repository root, the same files the gateway's host is generated from). Plugins built
//! with older SDKs against `0.1.0` keep running in the same chains.
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
//!     fn evaluate(s: &Settings, req: &Request) -> Decision {
//!         let nodes = req.job.total_nodes();
//!         if nodes > u64::from(s.max_nodes) {
//!             return Decision::reject("nodes.too-many", format!("{nodes} nodes > {}", s.max_nodes), Some("pools"));
//!         }
//!         Decision::Admit(req.placement.clone())
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

#[cfg(not(target_arch = "wasm32"))]
pub mod harness;
pub mod log;
mod settings_cache;
mod types_ext;

/// Generated bindings for `forge:policy/policy@0.2.0` (the guest side).
#[allow(missing_docs, clippy::all, rust_2018_idioms, unsafe_op_in_unsafe_fn)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/policy@0.2.0",
        world: "forge:policy/policy@0.2.0",
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "forge_plugin_sdk::bindings",
        additional_derives: [PartialEq],
    });
}

pub use bindings::forge::policy::types::{
    Cluster, Decision, Hold, Job, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm,
    Placement, Pool, PoolPlacement, PreferredTerm, Rejection, Request, SelectorOperator,
    SeriesCapacity, SeriesTaint, SeriesUsage, StorageMode, Taint, TaintEffect, Toleration,
    TolerationOperator, WorkloadKind,
};

/// Everything a plugin usually needs.
pub mod prelude {
    pub use crate::export_policy;
    pub use crate::log;
    pub use crate::{
        Cluster, Decision, Hold, Job, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm,
        Placement, Policy, Pool, PoolPlacement, PreferredTerm, Rejection, Request,
        SelectorOperator, SeriesCapacity, SeriesTaint, SeriesUsage, StorageMode, Taint,
        TaintEffect, Toleration, TolerationOperator, WorkloadKind,
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

    /// Decide about one job. Return `Decision::Admit` with the (possibly extended)
    /// `request.placement`, `Decision::Queue` to make the job wait, or
    /// `Decision::Reject` to refuse it.
    ///
    /// The decision must depend only on `settings` and `request`, never on an earlier
    /// call: the host reuses an instance for later calls of the same plugin, settings
    /// and team (`FORGE_POLICY_ISOLATION=warm`), and replay and shadow evaluation
    /// assume the same input decides the same way. `FORGE_POLICY_VERIFY` catches a
    /// plugin that keeps state by comparing with a fresh instance.
    fn evaluate(settings: &Self::Settings, request: &Request) -> Decision;
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

/// Implementation of the exported `evaluate`. Settings were validated before the
/// plugin was activated; if they no longer parse, the plugin fails closed (traps).
/// The parsed settings are kept for the instance's next call with the same settings
/// document (the host reuses an instance only for the same settings).
#[doc(hidden)]
pub fn __evaluate<P: Policy>(settings: &str, request: &Request) -> Decision {
    match settings_cache::parsed::<P>(settings) {
        Ok(s) => P::evaluate(&s, request),
        Err(e) => {
            log::error(&e);
            panic!("{e}");
        }
    }
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

                fn evaluate(
                    settings: ::std::string::String,
                    request: $crate::Request,
                ) -> $crate::Decision {
                    $crate::__evaluate::<$policy>(&settings, &request)
                }
            }

            $crate::bindings::export!(__ForgePolicyExport);
        };
    };
}
