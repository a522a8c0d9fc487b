//! The policy manager: owns the active snapshot (global and team chains, swapped whole
//! with `arc-swap`), restores it from the store at start, and evaluates requests with
//! it. How the snapshot changes is in [`super::change`] (live swap, rollback, replica
//! sync), [`super::replay`] and [`super::shadow`]; the first chain of a fresh store
//! comes from [`super::bootstrap`].

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use forge_policy_host::model::PolicyRequest;
use forge_policy_host::{ChainOutcome, PolicyRunner};

use super::active::{ActivePolicy, Scope, ScopePolicy, Selected, Unavailable};
use super::bootstrap::BootLink;
use super::error::{EvalError, PolicyAdminError};
use super::registry::Registry;
use super::shadow::{ShadowCandidate, summary};
use crate::metrics::Metrics;
use crate::store::{PolicyStore, ShadowResult, now_ms};

/// A decision and the versions that made it.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub outcome: ChainOutcome,
    pub global_version: u64,
    pub team_version: Option<u64>,
    /// `global@3` / `global@3+team@1`.
    pub label: String,
    /// The generation of the policy snapshot that decided ([`PolicyManager::generation`]).
    pub generation: u64,
}

/// Owner of the active policy.
pub struct PolicyManager {
    pub(super) current: ArcSwap<ActivePolicy>,
    pub(super) registry: Registry,
    pub(super) store: Arc<dyn PolicyStore>,
    pub(super) runner: PolicyRunner,
    pub(super) metrics: Arc<Metrics>,
    /// Serialises activations in this process (the store serialises replicas).
    pub(super) activation: tokio::sync::Mutex<()>,
    pub(super) shadow: ArcSwapOption<ShadowCandidate>,
}

impl std::fmt::Debug for PolicyManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyManager")
            .field("heads", &self.current.load().heads())
            .finish()
    }
}

impl PolicyManager {
    /// Restore the stored policy (bootstrapping the global chain from `boot` if the
    /// store has none) and build every scope. A team chain that cannot be built is
    /// kept unavailable (that team's admissions fail closed; the sync retries it); the
    /// global chain must build.
    pub async fn start(
        registry: Registry,
        store: Arc<dyn PolicyStore>,
        runner: PolicyRunner,
        metrics: Arc<Metrics>,
        boot: Vec<BootLink>,
    ) -> Result<Arc<Self>, PolicyAdminError> {
        let mut heads = store.heads().await?;
        if !heads.contains_key("global") {
            super::bootstrap::bootstrap(&registry, store.as_ref(), boot).await?;
            heads = store.heads().await?;
        } else if !boot.is_empty() {
            tracing::info!("the store has a global policy; the start-up chain is not used");
        }
        let mut global = None;
        let mut teams = BTreeMap::new();
        let mut unavailable = Vec::new();
        for (key, v) in &heads {
            let Some(scope) = Scope::from_key(key) else {
                continue;
            };
            let pv = store
                .version(key, Some(*v))
                .await?
                .ok_or_else(|| PolicyAdminError::Invariant(format!("{key} v{v} vanished")))?;
            let chain = match (registry.build_chain(&pv.plugins).await, &scope) {
                (Ok(chain), _) => chain,
                (Err(e), Scope::Team(t)) => {
                    tracing::error!(
                        scope = %key,
                        version = pv.version,
                        "the team's policy chain cannot be built: its admissions fail closed \
                         until it is fixed (retried at every policy sync): {e}"
                    );
                    unavailable.push((
                        t.clone(),
                        Unavailable {
                            version: pv.version,
                            links: pv.plugins,
                            reason: e.to_string(),
                        },
                    ));
                    continue;
                }
                (Err(e), Scope::Global) => return Err(e),
            };
            let sp = ScopePolicy {
                version: pv.version,
                links: pv.plugins,
                chain,
                fair_share: Arc::new(pv.fair_share),
            };
            match scope {
                Scope::Global => global = Some(sp),
                Scope::Team(t) => {
                    teams.insert(t, sp);
                }
            }
        }
        let global =
            global.ok_or_else(|| PolicyAdminError::Invariant("no global policy stored".into()))?;
        let mut active = ActivePolicy::new(global, teams);
        for (team, u) in unavailable {
            active = active.with_unavailable(&team, u);
        }
        Ok(Arc::new(PolicyManager {
            current: ArcSwap::from_pointee(active),
            registry,
            store,
            runner,
            metrics,
            activation: tokio::sync::Mutex::new(()),
            shadow: ArcSwapOption::empty(),
        }))
    }

    /// The active snapshot.
    pub fn current(&self) -> Arc<ActivePolicy> {
        self.current.load_full()
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn store(&self) -> &dyn PolicyStore {
        self.store.as_ref()
    }

    /// Evaluate `request` with the chain that decides for `team`, recording
    /// per-plugin metrics under `path`. A team whose chain is unavailable fails closed.
    pub async fn evaluate(
        self: &Arc<Self>,
        team: &str,
        request: PolicyRequest,
        path: &'static str,
    ) -> Result<Evaluated, EvalError> {
        if let Some(u) = self.current.load().unavailable(team) {
            return Err(EvalError::ScopeUnavailable {
                scope: Scope::Team(team.to_string()).key(),
                version: u.version,
                reason: u.reason.clone(),
            });
        }
        let this = self.clone();
        let scope = team.to_string();
        let team = team.to_string();
        let (result, selected) = self
            .runner
            .run_as(&scope, move || {
                // Loaded with the permit held; kept until the evaluation ends (the
                // activation drain waits for it).
                let active = this.current.load_full();
                let selected: Selected = active.select(&team);
                let result = selected.chain.evaluate(&request);
                let generation = active.generation();
                drop(active);
                (result, (selected, generation))
            })
            .await?;
        let (selected, generation) = selected;
        self.metrics.plugin_calls(&result);
        let outcome = result.map_err(forge_policy_host::RunError::from)?;
        self.metrics.admission(outcome.decision.kind(), path);
        if let forge_policy_host::model::Decision::Reject { code, .. } = &outcome.decision {
            self.metrics.rejection(code, path);
        }
        Ok(Evaluated {
            label: selected.label(),
            global_version: selected.global_version,
            team_version: selected.team_version,
            outcome,
            generation,
        })
    }

    /// The generation of the policy in force: it changes whenever any scope's chain
    /// does, so a decision made under an older one may not be reused.
    pub fn generation(&self) -> u64 {
        self.current.load().generation()
    }

    /// The shadow candidate, if one runs.
    pub fn shadow(&self) -> Option<Arc<ShadowCandidate>> {
        self.shadow.load_full()
    }

    /// Start shadowing `candidate` as the global chain (replacing any other).
    pub fn set_shadow(&self, candidate: ShadowCandidate) {
        self.shadow.store(Some(Arc::new(candidate)));
    }

    /// Stop shadowing; returns the candidate that ran.
    pub fn clear_shadow(&self) -> Option<Arc<ShadowCandidate>> {
        self.shadow.swap(None)
    }

    /// Run the shadow candidate (if any) on a real submission's request in the
    /// background, and record whether it agrees with the live decision.
    pub fn shadow_submission(
        self: &Arc<Self>,
        job_id: &str,
        team: &str,
        request: PolicyRequest,
        live: &ChainOutcome,
    ) {
        let Some(candidate) = self.shadow() else {
            return;
        };
        let this = self.clone();
        let live = summary(&live.decision);
        let (job_id, team) = (job_id.to_string(), team.to_string());
        tokio::spawn(async move {
            let chain = this.current().select_with_global(&team, &candidate.chain);
            let scope = team.clone();
            let shadow = match this
                .runner
                .run_as(&scope, move || chain.evaluate(&request))
                .await
            {
                Ok(Ok(o)) => summary(&o.decision),
                Ok(Err(e)) => format!("error:{}", e.source.cause()),
                Err(e) => {
                    tracing::warn!("shadow evaluation did not run: {e}");
                    return;
                }
            };
            let result = ShadowResult {
                agree: live == shadow,
                job_id,
                team,
                live,
                shadow,
                at_ms: now_ms(),
            };
            if let Err(e) = this.store.record_shadow(&candidate.id, result).await {
                tracing::warn!("could not record a shadow result: {e}");
            }
        });
    }
}
