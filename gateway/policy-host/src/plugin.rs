//! A loaded, checked, precompiled policy plugin.
//!
//! Loading refuses anything that is not a component of a supported contract version,
//! or that imports anything but the policy host interface (WASI included), before any
//! of its code can run. Compiled code is cached on disk by content digest and engine
//! compatibility. Instances are made from the `InstancePre`, each in its own store
//! ([`Instance`]); whether a call gets a fresh one or a warm one is the chain's choice
//! (`crate::warm`).

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::engine::PolicyEngine;
use crate::error::{LoadError, PluginError};
use crate::instance::{Bindings, Instance};
use crate::limits::PluginLimits;
use crate::model;
use crate::sandbox::HostState;
use crate::{wit_v0_1_0, wit_v0_2_0};

/// Contract versions this host can run, for error messages.
pub const SUPPORTED_WORLDS: &str = "forge:policy/policy@0.2.0, forge:policy/policy@0.1.0";

/// Every import a plugin of a supported version may have (host and types interfaces).
const ALLOWED_IMPORTS: [&str; 4] = [
    wit_v0_2_0::HOST_IMPORT,
    wit_v0_2_0::TYPES_IMPORT,
    wit_v0_1_0::HOST_IMPORT,
    wit_v0_1_0::TYPES_IMPORT,
];

/// The contract version a plugin was built against, with its pre-instantiated form.
enum Abi {
    V0_1_0(wit_v0_1_0::PolicyPre<HostState>),
    V0_2_0(wit_v0_2_0::PolicyPre<HostState>),
}

/// A policy plugin ready to be instantiated per call.
pub struct Plugin {
    name: String,
    /// The version label (the registry's version, else a short digest).
    version: String,
    digest: String,
    world: &'static str,
    limits: PluginLimits,
    abi: Abi,
    engine: PolicyEngine,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("digest", &self.digest)
            .field("world", &self.world)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Hex SHA-256 of the component bytes, prefixed like an OCI digest.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl Plugin {
    /// Check and compile a component. `name` is how logs and traces refer to it; its
    /// version label is a short form of its digest.
    pub fn load(engine: &PolicyEngine, name: &str, bytes: &[u8]) -> Result<Arc<Plugin>, LoadError> {
        let digest = digest_of(bytes);
        let short = digest.trim_start_matches("sha256:").get(..12).unwrap_or("");
        Self::load_as(engine, name, short, bytes)
    }

    /// Like [`Plugin::load`], with the version label metrics and traces carry (the
    /// plugin registry's version).
    pub fn load_as(
        engine: &PolicyEngine,
        name: &str,
        version: &str,
        bytes: &[u8],
    ) -> Result<Arc<Plugin>, LoadError> {
        let limits = engine.limits().plugin_defaults();
        Self::load_with_limits(engine, name, version, bytes, limits)
    }

    /// Like [`Plugin::load_as`], with the plugin's own deadline and memory cap
    /// (refused, [`LoadError::Limits`], when above the engine's maxima).
    pub fn load_with_limits(
        engine: &PolicyEngine,
        name: &str,
        version: &str,
        bytes: &[u8],
        limits: PluginLimits,
    ) -> Result<Arc<Plugin>, LoadError> {
        engine.limits().check(&limits)?;
        let max = engine.limits().max_component_bytes;
        if bytes.len() > max {
            return Err(LoadError::Compile(format!(
                "component is {} bytes, the limit is {max}",
                bytes.len()
            )));
        }
        if !wasmparser_is_component(bytes) {
            return Err(LoadError::NotAComponent(
                "expected the component-model binary header (version 0x0d, layer 1); \
                 build with `forge-plugin build` or `wasm-tools component new`"
                    .into(),
            ));
        }
        let digest = digest_of(bytes);
        let component = compile_cached(engine, &digest, bytes)?;
        check_imports(engine, &component)?;

        let instance_pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| LoadError::ForbiddenImport(format!("{e:#}")))?;
        // The newest contract first; a component's exports type-check against exactly
        // one version's bindings.
        let (world, abi) = match wit_v0_2_0::PolicyPre::new(instance_pre.clone()) {
            Ok(pre) => ("forge:policy/policy@0.2.0", Abi::V0_2_0(pre)),
            Err(v2) => match wit_v0_1_0::PolicyPre::new(instance_pre) {
                Ok(pre) => ("forge:policy/policy@0.1.0", Abi::V0_1_0(pre)),
                Err(v1) => {
                    return Err(LoadError::WrongWorld {
                        supported: SUPPORTED_WORLDS,
                        detail: format!("as 0.2.0: {v2:#}; as 0.1.0: {v1:#}"),
                    });
                }
            },
        };
        Ok(Arc::new(Plugin {
            name: name.to_string(),
            version: version.to_string(),
            digest,
            world,
            limits,
            abi,
            engine: engine.clone(),
        }))
    }

    /// Name given at load.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Version label given at load.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `sha256:<hex>` of the component bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The contract version this plugin targets.
    pub fn world(&self) -> &'static str {
        self.world
    }

    /// The deadline and memory cap its calls run under.
    pub fn limits(&self) -> PluginLimits {
        self.limits
    }

    /// Run `validate-settings` in a fresh instance. `Ok(Err(msg))` is the plugin's
    /// own refusal; `Err` is a sandbox failure.
    pub fn validate_settings(&self, settings: &str) -> Result<Result<(), String>, PluginError> {
        let mut inst = self.instantiate(None)?;
        let deadline_ms = self.limits.deadline_ms();
        let Instance {
            store, bindings, ..
        } = &mut inst;
        match bindings {
            Bindings::V0_1_0(b) => b.call_validate_settings(&mut *store, settings),
            Bindings::V0_2_0(b) => b.call_validate_settings(&mut *store, settings),
        }
        .map_err(|e| store.data().classify(&e, deadline_ms))
    }

    /// Evaluate one request alone, in a fresh instance, as the first link of a chain
    /// would (initial placement; the decision checked against the contract). For
    /// tools and tests; admission runs a [`Chain`](crate::Chain).
    pub fn evaluate(
        &self,
        settings: &str,
        request: &model::PolicyRequest,
    ) -> Result<model::Decision, PluginError> {
        let placement = model::Placement::initial(&request.job);
        let mut inst = self.instantiate(None)?;
        self.call(&mut inst, settings, request, &placement)
            .and_then(|d| crate::contract_check::check_decision(request, d))
    }

    /// A new instance in a store of its own, under this plugin's memory cap; the
    /// deadline of its first call starts now (instantiation included). `owner` is
    /// the team it will serve (`None`: global links).
    pub(crate) fn instantiate(&self, owner: Option<&str>) -> Result<Instance, PluginError> {
        let mut store = self.engine.new_store();
        store
            .data_mut()
            .enter(&self.name, &self.digest, self.limits.memory_cap_bytes);
        store.set_epoch_deadline(PolicyEngine::deadline_ticks(self.limits.deadline));
        let deadline_ms = self.limits.deadline_ms();
        let bindings = match &self.abi {
            Abi::V0_1_0(pre) => pre.instantiate(&mut store).map(Bindings::V0_1_0),
            Abi::V0_2_0(pre) => pre.instantiate(&mut store).map(Bindings::V0_2_0),
        }
        .map_err(|e| classify_instantiate(&store, &e, deadline_ms))?;
        Ok(Instance::new(store, bindings, owner))
    }

    /// Evaluate one request in `inst` (an instance of this plugin) under this
    /// plugin's limits. A failed call leaves the instance unusable: drop it.
    pub(crate) fn call(
        &self,
        inst: &mut Instance,
        settings: &str,
        request: &model::PolicyRequest,
        placement: &model::Placement,
    ) -> Result<model::Decision, PluginError> {
        let deadline_ms = self.limits.deadline_ms();
        let reused = inst.calls() > 0;
        let Instance {
            store, bindings, ..
        } = inst;
        store.data_mut().begin_call();
        if reused {
            // A fresh instance's first call keeps the deadline set at instantiation.
            store.set_epoch_deadline(PolicyEngine::deadline_ticks(self.limits.deadline));
        }
        match bindings {
            Bindings::V0_1_0(b) => {
                let req = wit_v0_1_0::request_to_wit(request, placement);
                let out = b
                    .call_evaluate(&mut *store, settings, &req)
                    .map_err(|e| store.data().classify(&e, deadline_ms))?;
                wit_v0_1_0::decision_from_wit(out, placement)
            }
            Bindings::V0_2_0(b) => {
                let req = wit_v0_2_0::request_to_wit(request, placement);
                let out = b
                    .call_evaluate(&mut *store, settings, &req)
                    .map_err(|e| store.data().classify(&e, deadline_ms))?;
                wit_v0_2_0::decision_from_wit(out)
            }
        }
    }
}

fn classify_instantiate(
    store: &wasmtime::Store<HostState>,
    err: &wasmtime::Error,
    deadline_ms: u64,
) -> PluginError {
    match store.data().classify(err, deadline_ms) {
        // A non-trap failure to instantiate (pool exhausted, …) is the host's problem.
        PluginError::Trap(msg) if err.downcast_ref::<wasmtime::Trap>().is_none() => {
            PluginError::Instantiate(msg)
        }
        other => other,
    }
}

/// True if the bytes start with the component-model preamble (as opposed to a core
/// module, whose layer field is 0).
fn wasmparser_is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[0..4] == *b"\0asm" && bytes[6..8] == [0x01, 0x00]
}

/// Refuse any import other than the policy host interface, naming it.
fn check_imports(engine: &PolicyEngine, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    for (name, item) in ty.imports(engine.engine()) {
        let allowed = matches!(item.ty, ComponentItem::ComponentInstance(_))
            && ALLOWED_IMPORTS.contains(&name);
        if !allowed {
            return Err(LoadError::ForbiddenImport(name.to_string()));
        }
    }
    Ok(())
}

/// Compile, or load the precompiled artifact for this digest and engine.
fn compile_cached(
    engine: &PolicyEngine,
    digest: &str,
    bytes: &[u8],
) -> Result<Component, LoadError> {
    let compile = || {
        engine.count_compilation();
        Component::new(engine.engine(), bytes).map_err(|e| LoadError::Compile(format!("{e:#}")))
    };
    let Some(dir) = engine.cache_dir() else {
        return compile();
    };
    let file = cache_path(dir, digest, &engine.compatibility_key());
    if file.exists() {
        // SAFETY: the cache directory belongs to the gateway (not user-writable) and
        // files are only ever written by `precompile_component` of an engine with the
        // same compatibility key (it is part of the file name). wasmtime additionally
        // checks the artifact header against this engine.
        match unsafe { Component::deserialize_file(engine.engine(), &file) } {
            Ok(c) => return Ok(c),
            Err(e) => tracing::warn!(
                path = %file.display(),
                "ignoring unreadable precompiled plugin: {e:#}"
            ),
        }
    }
    let cache_err = |e: std::io::Error| LoadError::Cache {
        path: file.display().to_string(),
        detail: e.to_string(),
    };
    engine.count_compilation();
    let compiled = engine
        .engine()
        .precompile_component(bytes)
        .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = file.with_extension(format!("tmp.{}.{seq}", std::process::id()));
    std::fs::write(&tmp, &compiled).map_err(cache_err)?;
    std::fs::rename(&tmp, &file).map_err(cache_err)?;
    // SAFETY: as above; the bytes were just produced by this engine.
    unsafe { Component::deserialize(engine.engine(), &compiled) }
        .map_err(|e| LoadError::Compile(format!("{e:#}")))
}

/// Where the precompiled form of `digest` lives for an engine.
pub fn cache_path(dir: &std::path::Path, digest: &str, engine_key: &str) -> PathBuf {
    let hexd = digest.trim_start_matches("sha256:");
    dir.join(format!("{hexd}-{engine_key}.cwasm"))
}
