//! An ordered chain of (plugin, settings) and its evaluation semantics.
//!
//! Semantics (the contract in `wit/policy@0.3.0/policy.wit` documents them for plugin
//! authors): plugins run in order; each sees the job, the cluster, the team's usage and
//! the placement so far; an admit replaces the placement (a 0.3.0 admit without one
//! keeps it); the first reject ends the chain and wins; a queue (hold) is remembered
//! and the chain continues so that a later plugin can still reject; if nothing
//! rejected, the first hold queues the job; if every plugin admitted, the last
//! placement is the decision, with the lowest priority cap any link gave and
//! non-preemptible if any link said so. Any plugin failure fails the whole evaluation
//! closed.
//!
//! A chain composed for a team ([`Chain::team_then_global`]) knows which of its links
//! are the team's: after each team link that admits, the host checks that the link only
//! narrowed the placement it was given — selectors, resources, labels and annotations
//! ([`crate::narrowing`]), tolerations, node affinity and fleets
//! (`narrowing_scheduling`) — and did not make the job non-preemptible, and fails
//! closed (`widened`, naming the field) otherwise.
//!
//! Each link has a pool of warm instances (`crate::warm`), shared by the chains
//! composed from this one; a team link's instances serve only the requesting team.

use std::cell::OnceCell;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use serde::Serialize;

use crate::contract_check::check_decision;
use crate::engine::PolicyEngine;
use crate::error::{ChainError, LoadError, PluginError};
use crate::link_input::LinkInput;
use crate::model::{Decision, Placement, PolicyRequest};
use crate::plugin::Plugin;
use crate::trace_entry::TraceEntry;
use crate::warm::WarmPool;
use crate::{narrowing, narrowing_scheduling};

/// One link of a chain: a plugin and the settings it runs with.
#[derive(Debug, Clone)]
pub struct ChainLink {
    pub plugin: Arc<Plugin>,
    /// JSON settings document, checked by the plugin's `validate-settings`.
    pub settings: String,
}

/// The chain's decision and how it was reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainOutcome {
    pub decision: Decision,
    /// Digests of the plugins that ran, in order (recorded with every decision).
    pub digests: Vec<String>,
    pub trace: Vec<TraceEntry>,
    /// Whether a link read the teams' shares (`request.shares()`): the decision then
    /// depends on them, and is made again when they change.
    pub reads_shares: bool,
}

/// A validated, warmed, immutable chain.
#[derive(Debug, Clone)]
pub struct Chain {
    engine: PolicyEngine,
    links: Vec<ChainLink>,
    /// The first `team_links` links are a team's: they may only narrow the placement.
    team_links: usize,
    /// Warm instances, one pool per link (shared with chains composed from this one).
    pools: Vec<Arc<WarmPool>>,
}

impl Chain {
    /// Build a chain, running every plugin's `validate-settings` first (which also
    /// instantiates each plugin once). A chain that fails here never serves a call.
    pub fn new(engine: &PolicyEngine, links: Vec<ChainLink>) -> Result<Chain, LoadError> {
        for link in &links {
            match link.plugin.validate_settings(&link.settings) {
                Ok(Ok(())) => {}
                Ok(Err(message)) => {
                    return Err(LoadError::InvalidSettings {
                        plugin: link.plugin.name().to_string(),
                        message,
                    });
                }
                Err(source) => {
                    return Err(LoadError::SettingsCheckFailed {
                        plugin: link.plugin.name().to_string(),
                        source,
                    });
                }
            }
        }
        let pools = links
            .iter()
            .map(|_| Arc::new(WarmPool::new(engine)))
            .collect();
        Ok(Chain {
            engine: engine.clone(),
            links,
            team_links: 0,
            pools,
        })
    }

    /// A team's already validated links followed by the global chain, without
    /// validating again. The team's links may only narrow the placement
    /// ([`crate::narrowing`]); the global links run unrestricted after them.
    pub fn team_then_global(team: &Chain, global: &Chain) -> Chain {
        Chain {
            engine: global.engine.clone(),
            links: team.links.iter().chain(&global.links).cloned().collect(),
            team_links: team.links.len(),
            pools: team.pools.iter().chain(&global.pools).cloned().collect(),
        }
    }

    /// Drop this chain's idle warm instances and those still in use when they come
    /// back: the chain was replaced (a live swap, after the drain). Chains composed
    /// from this one share its pools and are discarded with it.
    pub fn discard_warm(&self) {
        for pool in &self.pools {
            pool.discard();
        }
    }

    /// Idle warm instances of each link, in order.
    pub fn warm_idle(&self) -> Vec<usize> {
        self.pools.iter().map(|p| p.idle_count()).collect()
    }

    /// How many of the first links are a team's (restricted to narrowing).
    pub fn team_links(&self) -> usize {
        self.team_links
    }

    /// The links, in order.
    pub fn links(&self) -> &[ChainLink] {
        &self.links
    }

    /// Evaluate synchronously on the current thread (blocking, CPU-bound): call this
    /// from a runner thread, see [`PolicyRunner`](super::runner::PolicyRunner).
    pub fn evaluate(&self, request: &PolicyRequest) -> Result<ChainOutcome, ChainError> {
        let mut placement = Arc::new(Placement::initial(&request.job));
        let shared = OnceCell::new();
        let mut terms = AdmitTerms::default();
        let mut hold: Option<Decision> = None;
        let mut trace = Vec::with_capacity(self.links.len());
        let mut digests = Vec::with_capacity(self.links.len());
        let mut reads_shares = false;

        for (i, link) in self.links.iter().enumerate() {
            let plugin = &link.plugin;
            digests.push(plugin.digest().to_string());
            let started = Instant::now();
            let started_at = SystemTime::now();
            let team_link = i < self.team_links;
            // A team link's instance serves only the requesting team; a global link's
            // instances serve only global links.
            let owner = team_link.then_some(request.job.team.as_str());
            let input = LinkInput::new(request, &placement, &shared, team_link);
            let result = self.pools[i].call(plugin, owner, &link.settings, &input, |d| {
                check_link(request, &placement, team_link, d)
            });
            reads_shares |= input.read_shares();
            let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let entry = |outcome, decision, error| TraceEntry {
                plugin: plugin.name().to_string(),
                version: plugin.version().to_string(),
                digest: plugin.digest().to_string(),
                outcome,
                decision,
                error,
                elapsed_us,
                started_at,
            };
            let decision = match result {
                Ok(d) => d,
                Err(source) => {
                    trace.push(entry("error", None, Some(source.to_string())));
                    return Err(failed(plugin, trace, source));
                }
            };
            trace.push(entry(decision.kind(), Some(decision.clone()), None));
            match decision {
                Decision::Admit {
                    placement: p,
                    priority_cap,
                    preemptible,
                } => {
                    placement = p;
                    terms.add(priority_cap, preemptible);
                }
                Decision::Queue { .. } => {
                    if hold.is_none() {
                        hold = Some(decision);
                    }
                }
                Decision::Reject { .. } => {
                    return Ok(ChainOutcome {
                        decision,
                        digests,
                        trace,
                        reads_shares,
                    });
                }
            }
        }
        Ok(ChainOutcome {
            decision: hold.unwrap_or_else(|| terms.admit(placement)),
            digests,
            trace,
            reads_shares,
        })
    }
}

/// The checks of one link's decision: the contract, and for a team link that admits,
/// narrowing — scheduling fields first (tolerations, affinity, fleets), then
/// selectors, resources, labels and annotations — and the admission's terms.
fn check_link(
    request: &PolicyRequest,
    given: &Placement,
    team_link: bool,
    d: Decision,
) -> Result<Decision, PluginError> {
    let d = check_decision(request, d)?;
    match &d {
        Decision::Admit {
            placement: after, ..
        } if team_link => {
            let d = check_narrowing(given, d.clone())?;
            narrowing::check(request, given, after)
                .map_err(|w| PluginError::Widened(Box::new(w)))?;
            check_team_terms(d)
        }
        _ => Ok(d),
    }
}

/// The chain failed closed at `plugin`: logged, with the trace so far.
fn failed(plugin: &Plugin, trace: Vec<TraceEntry>, source: PluginError) -> ChainError {
    tracing::warn!(
        plugin = plugin.name(),
        digest = plugin.digest(),
        cause = source.cause(),
        "policy failed closed: {source}"
    );
    ChainError {
        trace: Box::new(trace),
        plugin: plugin.name().to_string(),
        version: plugin.version().to_string(),
        digest: plugin.digest().to_string(),
        source,
    }
}

/// The terms of the links' admissions so far: the lowest priority cap, and whether
/// any link made the job non-preemptible (contract 0.3.0; older links add none).
#[derive(Debug, Default)]
struct AdmitTerms {
    priority_cap: Option<i32>,
    preemptible: Option<bool>,
}

impl AdmitTerms {
    fn add(&mut self, cap: Option<i32>, preemptible: Option<bool>) {
        self.priority_cap = match (self.priority_cap, cap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.preemptible = match (self.preemptible, preemptible) {
            (Some(false), _) | (_, Some(false)) => Some(false),
            (a, b) => a.or(b),
        };
    }

    fn admit(self, placement: Arc<Placement>) -> Decision {
        Decision::Admit {
            placement,
            priority_cap: self.priority_cap,
            preemptible: self.preemptible,
        }
    }
}

/// A team link may cap its jobs' priority (caps only ever lower it) but may not make
/// them non-preemptible: that would promote them over every other team's.
fn check_team_terms(d: Decision) -> Result<Decision, PluginError> {
    if let Decision::Admit {
        preemptible: Some(false),
        ..
    } = d
    {
        return Err(PluginError::Widened(Box::new(narrowing::Widening {
            field: "admission.preemptible".into(),
            reason: "makes the job non-preemptible; only global policies may".into(),
        })));
    }
    Ok(d)
}

/// A team link's admit may only narrow the placement it was given (the decision has
/// passed the contract check, so its pools line up with `given`'s).
fn check_narrowing(given: &Placement, d: Decision) -> Result<Decision, PluginError> {
    if let Decision::Admit { placement, .. } = &d {
        for (i, (before, after)) in given.pools.iter().zip(&placement.pools).enumerate() {
            narrowing_scheduling::check_pool(i, before, after)?;
        }
    }
    Ok(d)
}
