//! The active policy: an immutable snapshot of every scope's chain (global and per
//! team), swapped as a whole.
//!
//! A job of team `t` is decided by `t`'s own links **followed by** the global chain:
//! the global plugins always run last and see the placement the team's rules left, so
//! a team can add rejections and holds for itself but can never admit what the global
//! chain rejects (a reject anywhere ends the chain; an admit is only final if every
//! later plugin also admits). The composed chains are built once per snapshot, with
//! [`Chain::team_then_global`], so the host knows which links are the team's: those
//! may only narrow the placement (`forge_policy_host::narrowing`).
//!
//! A team scope whose stored version cannot be built (a plugin's bytes missing from
//! object storage, or no longer matching their digest) is kept as **unavailable**: that
//! team's admissions fail closed while every other team is decided as usual, and the
//! policy sync retries building it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Serialize;

use crate::domain::FairShareSettings;
use crate::store::LinkRef;
use forge_policy_host::Chain;

/// `global` or `team:<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Global,
    Team(String),
}

impl Scope {
    /// The key the store uses.
    pub fn key(&self) -> String {
        match self {
            Scope::Global => "global".to_string(),
            Scope::Team(t) => format!("team:{t}"),
        }
    }

    /// The scope a store key names.
    pub fn from_key(key: &str) -> Option<Scope> {
        if key == "global" {
            Some(Scope::Global)
        } else {
            key.strip_prefix("team:")
                .map(|t| Scope::Team(t.to_string()))
        }
    }
}

/// One scope's active chain.
#[derive(Debug, Clone)]
pub struct ScopePolicy {
    pub version: u64,
    pub links: Vec<LinkRef>,
    pub chain: Arc<Chain>,
    /// The version's fair-share weights (only the global scope's are used).
    pub fair_share: Arc<FairShareSettings>,
}

/// The chain that decides for one team, and the versions it is made of.
#[derive(Debug, Clone)]
pub struct Selected {
    pub chain: Arc<Chain>,
    pub global_version: u64,
    pub team_version: Option<u64>,
}

impl Selected {
    /// The version label recorded with a decision: `global@3` or `global@3+team@1`.
    pub fn label(&self) -> String {
        match self.team_version {
            Some(t) => format!("global@{}+team@{t}", self.global_version),
            None => format!("global@{}", self.global_version),
        }
    }
}

/// What `GET /v1/policy` shows of one scope.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScopeView {
    pub scope: String,
    pub version: u64,
    pub plugins: Vec<LinkRef>,
    /// The global scope's fair-share weights (shown when set).
    #[serde(skip_serializing_if = "FairShareSettings::is_default")]
    pub fair_share: FairShareSettings,
}

/// A stored team version that could not be built.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub version: u64,
    pub links: Vec<LinkRef>,
    /// Why it could not be built (for the log and readiness, not for API answers).
    pub reason: String,
}

/// Every scope's chain, immutable once built.
#[derive(Debug)]
pub struct ActivePolicy {
    global: ScopePolicy,
    teams: BTreeMap<String, ScopePolicy>,
    /// Team scopes whose stored version could not be built.
    unavailable: BTreeMap<String, Unavailable>,
    /// Team links followed by the global chain, per team with links.
    composed: HashMap<String, Arc<Chain>>,
    /// Unique to this snapshot: a decision made under one generation is the decision
    /// of that snapshot (the dispatcher reuses it while the generation and the request
    /// are the same).
    generation: u64,
}

/// The next snapshot's generation.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl ActivePolicy {
    /// A snapshot from a global chain and team chains (composes them now).
    pub fn new(global: ScopePolicy, teams: BTreeMap<String, ScopePolicy>) -> Self {
        let composed = teams
            .iter()
            .filter(|(_, t)| !t.links.is_empty())
            .map(|(name, t)| {
                let chain = Chain::team_then_global(&t.chain, &global.chain);
                (name.clone(), Arc::new(chain))
            })
            .collect();
        ActivePolicy {
            global,
            teams,
            unavailable: BTreeMap::new(),
            composed,
            generation: GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }

    /// This snapshot's generation (a new one for every change of any scope).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// This snapshot with one scope replaced (an unavailable team scope becomes
    /// available again).
    pub fn with_scope(&self, scope: &Scope, policy: ScopePolicy) -> Self {
        let mut global = self.global.clone();
        let mut teams = self.teams.clone();
        let mut unavailable = self.unavailable.clone();
        match scope {
            Scope::Global => global = policy,
            Scope::Team(t) => {
                unavailable.remove(t);
                teams.insert(t.clone(), policy);
            }
        }
        ActivePolicy {
            unavailable,
            ..ActivePolicy::new(global, teams)
        }
    }

    /// This snapshot with team `team`'s chain unavailable (its admissions fail closed).
    pub fn with_unavailable(&self, team: &str, u: Unavailable) -> Self {
        let mut teams = self.teams.clone();
        teams.remove(team);
        let mut unavailable = self.unavailable.clone();
        unavailable.insert(team.to_string(), u);
        ActivePolicy {
            unavailable,
            ..ActivePolicy::new(self.global.clone(), teams)
        }
    }

    /// Team `team`'s unavailable version, if its chain could not be built.
    pub fn unavailable(&self, team: &str) -> Option<&Unavailable> {
        self.unavailable.get(team)
    }

    /// Every unavailable scope with its version (`team:ml@3`).
    pub fn unavailable_scopes(&self) -> Vec<String> {
        self.unavailable
            .iter()
            .map(|(t, u)| format!("{}@{}", Scope::Team(t.clone()).key(), u.version))
            .collect()
    }

    /// The unavailable team scopes (for retries).
    pub fn unavailable_teams(&self) -> Vec<(String, Unavailable)> {
        self.unavailable
            .iter()
            .map(|(t, u)| (t.clone(), u.clone()))
            .collect()
    }

    /// The chain that decides for `team`.
    pub fn select(&self, team: &str) -> Selected {
        match self.composed.get(team) {
            Some(chain) => Selected {
                chain: chain.clone(),
                global_version: self.global.version,
                team_version: self.teams.get(team).map(|t| t.version),
            },
            None => Selected {
                chain: self.global.chain.clone(),
                global_version: self.global.version,
                team_version: self.teams.get(team).map(|t| t.version),
            },
        }
    }

    /// The chain `team` would get with `global` as the global chain (shadow, replay).
    pub fn select_with_global(&self, team: &str, global: &Arc<Chain>) -> Arc<Chain> {
        match self.teams.get(team).filter(|t| !t.links.is_empty()) {
            Some(t) => Arc::new(Chain::team_then_global(&t.chain, global)),
            None => global.clone(),
        }
    }

    /// The chain `team` would get with `own` as its team chain (replay).
    pub fn select_with_team(&self, own: &Arc<Chain>) -> Arc<Chain> {
        Arc::new(Chain::team_then_global(own, &self.global.chain))
    }

    /// The global chain.
    pub fn global(&self) -> &ScopePolicy {
        &self.global
    }

    /// A scope's chain (`None` for a team without one).
    pub fn scope(&self, scope: &Scope) -> Option<&ScopePolicy> {
        match scope {
            Scope::Global => Some(&self.global),
            Scope::Team(t) => self.teams.get(t),
        }
    }

    /// Version of every scope (as the store's `heads` reports them), unavailable ones
    /// included.
    pub fn heads(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        out.insert(Scope::Global.key(), self.global.version);
        for (t, p) in &self.teams {
            out.insert(Scope::Team(t.clone()).key(), p.version);
        }
        for (t, u) in &self.unavailable {
            out.insert(Scope::Team(t.clone()).key(), u.version);
        }
        out
    }

    /// A scope as the API shows it (an unavailable one with its stored links).
    pub fn view(&self, scope: &Scope) -> ScopeView {
        let unavailable = match scope {
            Scope::Team(t) => self.unavailable.get(t),
            Scope::Global => None,
        };
        let (version, plugins, fair_share) = match (self.scope(scope), unavailable) {
            (Some(p), _) => (p.version, p.links.clone(), (*p.fair_share).clone()),
            (None, Some(u)) => (u.version, u.links.clone(), FairShareSettings::default()),
            (None, None) => (0, Vec::new(), FairShareSettings::default()),
        };
        ScopeView {
            scope: scope.key(),
            version,
            plugins,
            fair_share,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_keys_round_trip() {
        for s in [Scope::Global, Scope::Team("ml".into())] {
            assert_eq!(Scope::from_key(&s.key()), Some(s.clone()));
        }
        assert_eq!(Scope::from_key("other"), None);
    }
}
