//! An ordered chain of (plugin, settings) and its evaluation semantics.
//!
//! Semantics (the contract in `wit/policy@0.1.0/policy.wit` documents them for plugin
//! authors): plugins run in order; each sees the job, the cluster, the team's usage and
//! the placement so far; an admit replaces the placement; the first reject ends the
//! chain and wins; a queue (hold) is remembered and the chain continues so that a later
//! plugin can still reject; if nothing rejected, the first hold queues the job; if every
//! plugin admitted, the last placement is the decision. Any plugin failure fails the
//! whole evaluation closed.
//!
//! A chain composed for a team ([`Chain::team_then_global`]) runs the team's links
//! first, and those may only narrow the placement they are given
//! (`narrowing_scheduling`): a widening team link fails the evaluation closed.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::engine::PolicyEngine;
use crate::error::{ChainError, LoadError, PluginError};
use crate::model::{Decision, Placement, PolicyRequest, TolerationOperator};
use crate::narrowing_scheduling;
use crate::plugin::Plugin;

/// One link of a chain: a plugin and the settings it runs with.
#[derive(Debug, Clone)]
pub struct ChainLink {
    pub plugin: Arc<Plugin>,
    /// JSON settings document, checked by the plugin's `validate-settings`.
    pub settings: String,
}

/// What one plugin did during an evaluation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TraceEntry {
    pub plugin: String,
    /// The plugin's version label (registry version, else a short digest).
    pub version: String,
    pub digest: String,
    /// `admit`, `queue`, `reject`, or `error`.
    pub outcome: &'static str,
    /// The plugin's decision (absent for `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The failure cause (for `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub elapsed_us: u64,
}

/// The chain's decision and how it was reached.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainOutcome {
    pub decision: Decision,
    /// Digests of the plugins that ran, in order (recorded with every decision).
    pub digests: Vec<String>,
    pub trace: Vec<TraceEntry>,
}

/// A validated, warmed, immutable chain.
#[derive(Debug, Clone)]
pub struct Chain {
    engine: PolicyEngine,
    links: Vec<ChainLink>,
    /// The first `team_links` links are a team's: they may only narrow.
    team_links: usize,
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
        Ok(Chain {
            engine: engine.clone(),
            links,
            team_links: 0,
        })
    }

    /// The chain deciding for a team: the team's own links (which may only narrow the
    /// placement they are given) followed by the global chain (which may widen).
    pub fn team_then_global(team: &Chain, global: &Chain) -> Chain {
        Chain {
            engine: global.engine.clone(),
            links: team.links.iter().chain(&global.links).cloned().collect(),
            team_links: team.links.len(),
        }
    }

    /// How many leading links are a team's (they may only narrow).
    pub fn team_links(&self) -> usize {
        self.team_links
    }

    /// The links, in order.
    pub fn links(&self) -> &[ChainLink] {
        &self.links
    }

    /// Evaluate synchronously on the current thread (blocking, CPU-bound): call this
    /// from a blocking pool, see [`PolicyRunner`](super::runner::PolicyRunner).
    pub fn evaluate(&self, request: &PolicyRequest) -> Result<ChainOutcome, ChainError> {
        let mut store = self.engine.new_store();
        let mut placement = Placement::initial(&request.job);
        let mut hold: Option<Decision> = None;
        let mut trace = Vec::with_capacity(self.links.len());
        let mut digests = Vec::with_capacity(self.links.len());

        for (i, link) in self.links.iter().enumerate() {
            let plugin = &link.plugin;
            digests.push(plugin.digest().to_string());
            let started = Instant::now();
            let team_link = i < self.team_links;
            let result = plugin
                .evaluate_in(&mut store, &link.settings, request, &placement)
                .and_then(|d| check_decision(request, d))
                .and_then(|d| {
                    if team_link {
                        check_narrowing(&placement, d)
                    } else {
                        Ok(d)
                    }
                });
            let elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let decision = match result {
                Ok(d) => d,
                Err(source) => {
                    trace.push(TraceEntry {
                        plugin: plugin.name().to_string(),
                        version: plugin.version().to_string(),
                        digest: plugin.digest().to_string(),
                        outcome: "error",
                        decision: None,
                        error: Some(source.to_string()),
                        elapsed_us,
                    });
                    tracing::warn!(
                        plugin = plugin.name(),
                        digest = plugin.digest(),
                        cause = source.cause(),
                        "policy failed closed: {source}"
                    );
                    return Err(ChainError {
                        plugin: plugin.name().to_string(),
                        version: plugin.version().to_string(),
                        digest: plugin.digest().to_string(),
                        source,
                    });
                }
            };
            trace.push(TraceEntry {
                plugin: plugin.name().to_string(),
                version: plugin.version().to_string(),
                digest: plugin.digest().to_string(),
                outcome: decision.kind(),
                decision: Some(decision.clone()),
                error: None,
                elapsed_us,
            });
            match decision {
                Decision::Admit { placement: p } => placement = p,
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
                    });
                }
            }
        }
        Ok(ChainOutcome {
            decision: hold.unwrap_or(Decision::Admit { placement }),
            digests,
            trace,
        })
    }
}

/// Stable codes are short lowercase identifiers: `[a-z0-9][a-z0-9.-]*`, ≤ 64 chars.
fn valid_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && code.as_bytes()[0].is_ascii_alphanumeric()
}

/// Enforce the contract on a plugin's answer.
fn check_decision(request: &PolicyRequest, d: Decision) -> Result<Decision, PluginError> {
    match &d {
        Decision::Admit { placement } => {
            let pools = &request.job.pools;
            if placement.pools.len() != pools.len() {
                return Err(PluginError::BadOutput(format!(
                    "placement has {} pools, the job has {}",
                    placement.pools.len(),
                    pools.len()
                )));
            }
            for (i, (pp, pool)) in placement.pools.iter().zip(pools).enumerate() {
                if pp.pool != pool.name {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}] is `{}`, expected `{}`",
                        pp.pool, pool.name
                    )));
                }
                if let Some((k, v)) = pp
                    .ray_resources
                    .iter()
                    .find(|(_, v)| !v.is_finite() || **v < 0.0)
                {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}].rayResources[{k}] = {v} is not a non-negative number"
                    )));
                }
                for (j, t) in pp.tolerations.iter().enumerate() {
                    let bad = match t.operator {
                        TolerationOperator::Equal => t.key.is_none(),
                        TolerationOperator::Exists => t.value.is_some(),
                    };
                    if bad {
                        return Err(PluginError::BadOutput(format!(
                            "placement.pools[{i}].tolerations[{j}]: Equal needs a key, Exists takes no value"
                        )));
                    }
                }
                if let Some(problem) = pp.affinity.problem() {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}].affinity: {problem}"
                    )));
                }
            }
        }
        Decision::Queue { code, .. } | Decision::Reject { code, .. } => {
            if !valid_code(code) {
                return Err(PluginError::BadOutput(format!(
                    "code `{code}` is not a stable identifier ([a-z0-9.-], at most 64 characters)"
                )));
            }
        }
    }
    Ok(d)
}

/// A team link's admit may only narrow the placement it was given (the decision has
/// passed [`check_decision`], so its pools line up with `given`'s).
fn check_narrowing(given: &Placement, d: Decision) -> Result<Decision, PluginError> {
    if let Decision::Admit { placement } = &d {
        for (i, (before, after)) in given.pools.iter().zip(&placement.pools).enumerate() {
            narrowing_scheduling::check_pool(i, before, after)?;
        }
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_must_be_stable_identifiers() {
        assert!(valid_code("quota.exceeded"));
        assert!(valid_code("storage.rwo-multi-node"));
        assert!(!valid_code(""));
        assert!(!valid_code("Quota"));
        assert!(!valid_code(".x"));
        assert!(!valid_code("has space"));
        assert!(!valid_code(&"a".repeat(65)));
    }
}
