//! Warm instances of one chain link, and how one link call gets its instance under
//! the engine's [`Isolation`].
//!
//! A [`WarmPool`] belongs to one link of one chain, so its instances share the plugin
//! digest and settings; a chain composed from a team's chain and the global chain
//! shares the pools of both. The scope is part of the key as well: an instance made
//! for a team link carries that team and serves only that team's requests; a global
//! link's instances serve only the global links. An instance goes back to its pool
//! only after a successful call, and not once it served `warm_max_calls` calls or its
//! memory grew; any failure (trap, deadline, memory, malformed decision) drops it.
//! A live swap [`discard`](WarmPool::discard)s the pools of the replaced chain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::engine::PolicyEngine;
use crate::error::{Mismatch, PluginError};
use crate::instance::Instance;
use crate::isolation::Isolation;
use crate::link_input::LinkInput;
use crate::model::Decision;
use crate::plugin::Plugin;

/// Most idle instances one link keeps (about the evaluations that run at once).
const MAX_IDLE_PER_LINK: usize = 16;

/// The idle warm instances of one link.
pub(crate) struct WarmPool {
    engine: PolicyEngine,
    idle: Mutex<Vec<Instance>>,
    /// Set by [`WarmPool::discard`]: instances coming back are dropped.
    closed: AtomicBool,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool")
            .field("idle", &self.idle_count())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl WarmPool {
    pub(crate) fn new(engine: &PolicyEngine) -> Self {
        WarmPool {
            engine: engine.clone(),
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Idle instances right now.
    pub(crate) fn idle_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Instance>> {
        // The list stays consistent whatever panicked while it was held.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle instance that may serve `owner` (a team, or `None` for global links).
    fn take(&self, owner: Option<&str>) -> Option<Instance> {
        let mut idle = self.lock();
        let at = idle.iter().rposition(|i| i.owner() == owner)?;
        let inst = idle.swap_remove(at);
        drop(idle);
        self.engine.release_warm(1);
        Some(inst)
    }

    /// Keep `inst` for a later call, unless the pool is closed or full (then it is
    /// dropped, returning its slot).
    fn put(&self, inst: Instance) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let mut idle = self.lock();
        if idle.len() >= MAX_IDLE_PER_LINK || !self.engine.reserve_warm() {
            return;
        }
        idle.push(inst);
        // A discard may have run between the check and the push.
        if self.closed.load(Ordering::Acquire) {
            let dropped = std::mem::take(&mut *idle);
            drop(idle);
            self.engine.release_warm(dropped.len());
        }
    }

    /// Drop every idle instance and every instance that comes back later: the chain
    /// was replaced.
    pub(crate) fn discard(&self) {
        self.closed.store(true, Ordering::Release);
        let dropped = std::mem::take(&mut *self.lock());
        self.engine.release_warm(dropped.len());
    }

    /// Run one link call of `plugin` with `settings` for `owner` (the request's team
    /// on a team link, `None` on a global link) under the engine's isolation mode;
    /// `check` is the chain's check of the decision (contract, narrowing), whose
    /// failure discards the instance like any other.
    pub(crate) fn call(
        &self,
        plugin: &Plugin,
        owner: Option<&str>,
        settings: &str,
        input: &LinkInput<'_>,
        check: impl FnOnce(Decision) -> Result<Decision, PluginError>,
    ) -> Result<Decision, PluginError> {
        if self.engine.isolation() == Isolation::Fresh {
            let mut inst = plugin.instantiate(owner)?;
            return plugin.call(&mut inst, settings, input).and_then(check);
        }
        let mut inst = match self.take(owner) {
            Some(inst) => inst,
            None => plugin.instantiate(owner)?,
        };
        let reused = inst.calls() > 0;
        // On failure `inst` is dropped here: a failed instance never serves again.
        let decision = plugin.call(&mut inst, settings, input).and_then(check)?;
        if reused && self.engine.verify_due() {
            self.verify(plugin, settings, input, &decision)?;
        }
        if inst.completed(self.engine.limits().warm_max_calls) {
            self.put(inst);
        }
        Ok(decision)
    }

    /// `FORGE_POLICY_VERIFY`: decide again in a fresh instance; a different outcome
    /// fails the call closed (the warm instance is dropped) and is counted and logged.
    fn verify(
        &self,
        plugin: &Plugin,
        settings: &str,
        input: &LinkInput<'_>,
        warm: &Decision,
    ) -> Result<(), PluginError> {
        let fresh = plugin
            .instantiate(None)
            .and_then(|mut inst| plugin.call(&mut inst, settings, input));
        if fresh.as_ref() == Ok(warm) {
            return Ok(());
        }
        self.engine.count_mismatch();
        let warm = summary(warm);
        let mut fresh = match fresh {
            Ok(d) => summary(&d),
            Err(e) => format!("error:{}", e.cause()),
        };
        if fresh == warm {
            fresh.push_str(" with another placement or message");
        }
        tracing::warn!(
            plugin = plugin.name(),
            digest = plugin.digest(),
            warm,
            fresh,
            "policy decision differs between a reused and a fresh instance; failing closed"
        );
        Err(PluginError::Nondeterministic(Box::new(Mismatch {
            warm,
            fresh,
        })))
    }
}

impl Drop for WarmPool {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(PoisonError::into_inner);
        self.engine.release_warm(idle.len());
    }
}

/// A decision in a few words for a mismatch report: its kind and code.
fn summary(d: &Decision) -> String {
    match d {
        Decision::Admit { .. } => "admit".to_string(),
        Decision::Queue { code, .. } => format!("queue:{code}"),
        Decision::Reject { code, .. } => format!("reject:{code}"),
    }
}
