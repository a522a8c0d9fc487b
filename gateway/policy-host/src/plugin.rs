//! A loaded, checked, precompiled policy plugin.
//!
//! Loading refuses anything that is not a component of a supported contract version,
//! or that imports anything but the policy host interface (WASI included), before any
//! of its code can run. Compiled code is cached on disk by content digest and engine
//! compatibility. Instances are made from the `InstancePre`, each in its own store
//! ([`Instance`]); whether a call gets a fresh one or a warm one is the chain's choice
//! (`crate::warm`).

use std::cell::OnceCell;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use crate::cache::Lookup;
use crate::engine::PolicyEngine;
use crate::error::{LoadError, PluginError};
use crate::instance::{Bindings, Instance};
use crate::limits::PluginLimits;
use crate::link_input::LinkInput;
use crate::model;
use crate::precheck::precheck;
use crate::preemption::{PlanVerdict, PreemptionPlan};
use crate::sandbox::HostState;
use crate::{wit_v0_1_0, wit_v0_2_0, wit_v0_3_0};

/// Contract versions this host can run, for error messages.
pub const SUPPORTED_WORLDS: &str =
    "forge:policy/policy@0.3.0, forge:policy/policy@0.2.0, forge:policy/policy@0.1.0";

/// Every import a plugin of a supported version may have (host, types and, from
/// 0.3.0, the request resource's interface).
const ALLOWED_IMPORTS: [&str; 7] = [
    wit_v0_3_0::HOST_IMPORT,
    wit_v0_3_0::TYPES_IMPORT,
    wit_v0_3_0::REQUEST_IMPORT,
    wit_v0_2_0::HOST_IMPORT,
    wit_v0_2_0::TYPES_IMPORT,
    wit_v0_1_0::HOST_IMPORT,
    wit_v0_1_0::TYPES_IMPORT,
];

/// Functions every supported world exports.
const REQUIRED_EXPORTS: [&str; 2] = ["evaluate", "validate-settings"];

/// The contract version a plugin was built against, with its pre-instantiated form.
enum Abi {
    V0_1_0(wit_v0_1_0::PolicyPre<HostState>),
    V0_2_0(wit_v0_2_0::PolicyPre<HostState>),
    V0_3_0(wit_v0_3_0::PolicyPre<HostState>),
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
    /// (refused, [`LoadError::Limits`], when above the engine's maxima). A freshly
    /// compiled component is written to the precompile cache once every check passed.
    pub fn load_with_limits(
        engine: &PolicyEngine,
        name: &str,
        version: &str,
        bytes: &[u8],
        limits: PluginLimits,
    ) -> Result<Arc<Plugin>, LoadError> {
        let (plugin, unsaved) = Self::load_unsaved(engine, name, version, bytes, limits)?;
        unsaved.save()?;
        Ok(plugin)
    }

    /// Like [`Plugin::load_with_limits`], but a freshly compiled artifact is handed
    /// back instead of cached, so that a caller with checks of its own (an upload's
    /// settings, storage) caches only what it accepts: a refused upload leaves nothing
    /// on disk.
    pub fn load_unsaved(
        engine: &PolicyEngine,
        name: &str,
        version: &str,
        bytes: &[u8],
        limits: PluginLimits,
    ) -> Result<(Arc<Plugin>, Unsaved), LoadError> {
        engine.limits().check(&limits)?;
        let max = engine.limits().max_component_bytes;
        if bytes.len() > max {
            return Err(LoadError::Compile(format!(
                "component is {} bytes, the limit is {max}",
                bytes.len()
            )));
        }
        // Everything that can be refused without compiling is refused first.
        precheck(
            bytes,
            &engine.limits().shape,
            &ALLOWED_IMPORTS,
            &REQUIRED_EXPORTS,
        )?;
        let digest = digest_of(bytes);
        let (component, unsaved) = compile_cached(engine, &digest, bytes)?;
        check_imports(engine, &component)?;

        let instance_pre = engine
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| LoadError::ForbiddenImport(format!("{e:#}")))?;
        // The newest contract first; a component's exports type-check against exactly
        // one version's bindings.
        let (world, abi) = abi_of(instance_pre)?;
        let plugin = Arc::new(Plugin {
            name: name.to_string(),
            version: version.to_string(),
            digest: digest.clone(),
            world,
            limits,
            abi,
            engine: engine.clone(),
        });
        let unsaved = Unsaved {
            engine: engine.clone(),
            digest,
            artifact: unsaved,
        };
        Ok((plugin, unsaved))
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
            Bindings::V0_3_0(b) => b.call_validate_settings(&mut *store, settings),
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
        let placement = Arc::new(model::Placement::initial(&request.job));
        let shared = OnceCell::new();
        let input = LinkInput::new(request, &placement, &shared, false);
        let mut inst = self.instantiate(None)?;
        self.call(&mut inst, settings, &input)
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
            Abi::V0_3_0(pre) => pre.instantiate(&mut store).map(Bindings::V0_3_0),
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
        input: &LinkInput<'_>,
    ) -> Result<model::Decision, PluginError> {
        let deadline_ms = self.limits.deadline_ms();
        if inst.calls() > 0 {
            // A fresh instance's first call keeps the deadline set at instantiation.
            inst.store
                .set_epoch_deadline(PolicyEngine::deadline_ticks(self.limits.deadline));
        }
        inst.store.data_mut().begin_call();
        if matches!(inst.bindings, Bindings::V0_3_0(_)) && !inst.configured() {
            self.configure(inst, settings)?;
        }
        let Instance {
            store, bindings, ..
        } = inst;
        let (request, placement) = (input.request, &**input.placement);
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
                wit_v0_2_0::decision_from_wit(out, placement)
            }
            Bindings::V0_3_0(b) => {
                let rep = wit_v0_3_0::RequestRep::new(
                    input.shared_request(),
                    Arc::clone(input.placement),
                    input.team_link,
                );
                let handle = store
                    .data_mut()
                    .requests_mut()
                    .push(rep)
                    .map_err(|e| PluginError::Instantiate(format!("request handle: {e}")))?;
                let borrowed = wasmtime::component::Resource::new_borrow(handle.rep());
                let out = b.call_evaluate(&mut *store, borrowed);
                // The handle dies with the call, whatever the plugin did.
                if let Ok(rep) = store.data_mut().requests_mut().delete(handle)
                    && rep.read_shares()
                {
                    input.shares_were_read();
                }
                let out = out.map_err(|e| store.data().classify(&e, deadline_ms))?;
                wit_v0_3_0::decision_from_wit(out, input.placement)
            }
        }
    }

    /// Contract 0.3.0: hand the link's settings to a new instance, once.
    fn configure(&self, inst: &mut Instance, settings: &str) -> Result<(), PluginError> {
        let deadline_ms = self.limits.deadline_ms();
        let Bindings::V0_3_0(b) = &inst.bindings else {
            return Ok(());
        };
        match b.call_configure(&mut inst.store, settings) {
            Ok(Ok(())) => {
                inst.set_configured();
                Ok(())
            }
            Ok(Err(message)) => Err(PluginError::BadOutput(format!(
                "configure refused the settings that passed validate-settings: {message}"
            ))),
            Err(e) => Err(inst.store.data().classify(&e, deadline_ms)),
        }
    }

    /// Ask this plugin about a planned preemption, in a fresh instance (planning is
    /// rare; it never shares an instance with admissions). A plugin built against a
    /// contract before 0.3.0 has no say: it accepts. The verdict is checked against
    /// the plan ([`crate::preemption`]).
    pub fn plan_preemption(
        &self,
        settings: &str,
        plan: &PreemptionPlan,
        team_link: bool,
    ) -> Result<PlanVerdict, PluginError> {
        if !matches!(self.abi, Abi::V0_3_0(_)) {
            return Ok(PlanVerdict::Accept);
        }
        let deadline_ms = self.limits.deadline_ms();
        let mut inst = self.instantiate(None)?;
        self.configure(&mut inst, settings)?;
        let Bindings::V0_3_0(b) = &inst.bindings else {
            return Ok(PlanVerdict::Accept);
        };
        let out = b
            .call_plan_preemption(&mut inst.store, &wit_v0_3_0::plan_to_wit(plan))
            .map_err(|e| inst.store.data().classify(&e, deadline_ms))?;
        crate::preemption::check_verdict(plan, wit_v0_3_0::verdict_from_wit(out), team_link)
    }
}

/// The contract version a component implements: the newest first, since a
/// component's exports type-check against exactly one version's bindings.
fn abi_of(
    instance_pre: wasmtime::component::InstancePre<HostState>,
) -> Result<(&'static str, Abi), LoadError> {
    let v3 = match wit_v0_3_0::PolicyPre::new(instance_pre.clone()) {
        Ok(pre) => return Ok(("forge:policy/policy@0.3.0", Abi::V0_3_0(pre))),
        Err(e) => e,
    };
    let v2 = match wit_v0_2_0::PolicyPre::new(instance_pre.clone()) {
        Ok(pre) => return Ok(("forge:policy/policy@0.2.0", Abi::V0_2_0(pre))),
        Err(e) => e,
    };
    match wit_v0_1_0::PolicyPre::new(instance_pre) {
        Ok(pre) => Ok(("forge:policy/policy@0.1.0", Abi::V0_1_0(pre))),
        Err(v1) => Err(LoadError::WrongWorld {
            supported: SUPPORTED_WORLDS,
            detail: format!("as 0.3.0: {v3:#}; as 0.2.0: {v2:#}; as 0.1.0: {v1:#}"),
        }),
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

/// Refuse any import other than the policy host interfaces, naming it. Type imports
/// (a world's `use` of the request resource's type, in 0.3.0) grant nothing and pass,
/// as in [`precheck`].
fn check_imports(engine: &PolicyEngine, component: &Component) -> Result<(), LoadError> {
    let ty = component.component_type();
    for (name, item) in ty.imports(engine.engine()) {
        if matches!(item.ty, ComponentItem::Type(_) | ComponentItem::Resource(_)) {
            continue;
        }
        let allowed = matches!(item.ty, ComponentItem::ComponentInstance(_))
            && ALLOWED_IMPORTS.contains(&name);
        if !allowed {
            return Err(LoadError::ForbiddenImport(name.to_string()));
        }
    }
    Ok(())
}

/// A compiled artifact not yet in the precompile cache (empty when it came from the
/// cache or the engine has none): [`Unsaved::save`] writes it.
pub struct Unsaved {
    engine: PolicyEngine,
    digest: String,
    artifact: Option<Vec<u8>>,
}

impl std::fmt::Debug for Unsaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsaved")
            .field("digest", &self.digest)
            .field("bytes", &self.artifact.as_ref().map(Vec::len))
            .finish()
    }
}

impl Unsaved {
    /// Write the artifact to the engine's precompile cache (nothing to do if it came
    /// from there).
    pub fn save(self) -> Result<(), LoadError> {
        match (self.engine.cache(), &self.artifact) {
            (Some(cache), Some(artifact)) => {
                cache.put(&self.digest, &self.engine.compatibility_key(), artifact)
            }
            _ => Ok(()),
        }
    }
}

/// The component for `digest`: its verified precompiled form, or compiled now on the
/// engine's compile pool (then also returned, to be cached once the caller accepts it).
fn compile_cached(
    engine: &PolicyEngine,
    digest: &str,
    bytes: &[u8],
) -> Result<(Component, Option<Vec<u8>>), LoadError> {
    let key = engine.compatibility_key();
    if let Some(cache) = engine.cache() {
        match cache.get(digest, &key) {
            Lookup::Hit(artifact) => {
                // SAFETY: the artifact carries this cache's HMAC over (engine key,
                // digest, bytes): it is exactly what this installation's engine of the
                // same compatibility wrote for this component (`crate::cache`).
                // wasmtime additionally checks its header against this engine.
                match unsafe { Component::deserialize(engine.engine(), &artifact) } {
                    Ok(c) => return Ok((c, None)),
                    Err(e) => tracing::warn!("ignoring an unloadable precompiled plugin: {e:#}"),
                }
            }
            Lookup::Rejected => engine.count_cache_rejection(),
            Lookup::Miss => {}
        }
    }
    engine.count_compilation();
    let artifact = engine.compiler().compile(bytes)?;
    // SAFETY: the bytes were just produced by this engine's compile pool.
    let component = unsafe { Component::deserialize(engine.engine(), &artifact) }
        .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
    Ok((component, Some(artifact)))
}
