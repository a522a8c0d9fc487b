//! One plugin instance in a store of its own, and the bookkeeping that decides whether
//! it may serve another call: how many calls it served, how far its memory grew, and
//! which team (if any) it belongs to.
//!
//! A store per instance (rather than one store per chain evaluation) lets an instance
//! outlive the evaluation that created it, and returns each instance's pool slot as
//! soon as it is dropped.

use wasmtime::Store;

use crate::sandbox::HostState;
use crate::{wit_v0_1_0, wit_v0_2_0, wit_v0_3_0};

/// The instantiated exports, per contract version.
pub(crate) enum Bindings {
    V0_1_0(wit_v0_1_0::Policy),
    V0_2_0(wit_v0_2_0::Policy),
    V0_3_0(wit_v0_3_0::Policy),
}

/// A live plugin instance.
pub(crate) struct Instance {
    pub(crate) store: Store<HostState>,
    pub(crate) bindings: Bindings,
    /// The team whose calls this instance may serve (`None`: global links only).
    owner: Option<String>,
    /// Calls completed.
    calls: u32,
    /// Contract 0.3.0: `configure` has run with the link's settings.
    configured: bool,
    /// Linear memory after the first call; any growth beyond it retires the instance.
    baseline: Option<usize>,
}

impl Instance {
    pub(crate) fn new(store: Store<HostState>, bindings: Bindings, owner: Option<&str>) -> Self {
        Instance {
            store,
            bindings,
            owner: owner.map(str::to_string),
            calls: 0,
            configured: false,
            baseline: None,
        }
    }

    /// The team this instance serves (`None` for a global link's instance).
    pub(crate) fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Whether `configure` has run (contract 0.3.0).
    pub(crate) fn configured(&self) -> bool {
        self.configured
    }

    /// Record that `configure` ran.
    pub(crate) fn set_configured(&mut self) {
        self.configured = true;
    }

    /// Calls completed so far.
    pub(crate) fn calls(&self) -> u32 {
        self.calls
    }

    /// Record a successful call. Returns whether the instance may serve another: not
    /// after `max_calls` calls, and not once its memory grew after its first call
    /// (a plugin accumulating state, or a leak).
    pub(crate) fn completed(&mut self, max_calls: u32) -> bool {
        self.calls = self.calls.saturating_add(1);
        let memory = self.store.data().memory_bytes();
        match self.baseline {
            None => self.baseline = Some(memory),
            Some(baseline) if memory > baseline => return false,
            Some(_) => {}
        }
        self.calls < max_calls
    }
}
