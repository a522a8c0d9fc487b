//! The policy manager: owns the active snapshot and every way it changes.
//!
//! **Live swap.** A change is resolved (plugin references → digests), built (each
//! plugin loaded, `validate-settings` run, so every plugin is instantiated once) and,
//! only if all of that succeeded, appended to the store as the scope's next version
//! (compare-and-set on the expected version) and swapped in atomically (`arc-swap`).
//! Evaluations load the snapshot when they get a runner permit and hold it while they
//! run; the change is acknowledged only after every evaluation that loaded the old
//! snapshot has finished (bounded wait), so no decision completes on the old version
//! after the acknowledgement. A failed build or a stale expected version changes
//! nothing.
//!
//! **Replicas.** Each gateway polls the store's per-scope head versions every
//! `FORGE_POLICY_SYNC_MS` and activates a newer version the same way (build, swap,
//! drain). A change on one replica is in effect on the others within one poll interval
//! plus its build time (milliseconds: plugins come from the shared precompile cache).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use serde::Serialize;

use super::active::{ActivePolicy, Scope, ScopePolicy, Selected};
use super::error::PolicyAdminError;
use super::registry::{GLOBAL, Registry, Upload, settings_text};
use super::shadow::{ShadowCandidate, summary};
use super::store::{LinkRef, NewVersion, PolicyStore, PolicyVersion, ShadowResult};
use crate::metrics::Metrics;
use crate::policy::model::PolicyRequest;
use crate::policy::{Chain, ChainLink, ChainOutcome, PolicyRunner, RunError};
use crate::store::now_ms;

/// Longest an activation waits for evaluations on the old snapshot to finish.
const DRAIN_BOUND: Duration = Duration::from_secs(5);

/// A plugin the gateway starts with when the store has no global policy yet (from
/// the chain file or the dev reference chain).
#[derive(Debug, Clone)]
pub struct BootLink {
    pub name: String,
    pub component: axum::body::Bytes,
    pub settings: serde_json::Value,
}

/// A chain link as a request names it: by name (and version), or by digest.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LinkInput {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
    #[serde(default)]
    pub settings: serde_json::Value,
}

/// A chain change to store and activate.
#[derive(Debug, Clone)]
pub struct Change {
    pub scope: Scope,
    /// The version the writer believes is current (optimistic concurrency).
    pub expected: u64,
    pub links: Vec<LinkRef>,
    /// The chain built from `links` (see [`PolicyManager::build`]).
    pub chain: Arc<Chain>,
    /// `put` or `rollback`.
    pub action: &'static str,
    pub author: String,
    pub comment: String,
}

/// The result of an activation.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Activation {
    #[serde(flatten)]
    pub version: PolicyVersion,
    /// Milliseconds from the stored version to the swap being in effect (drained).
    pub activation_ms: f64,
    /// False if evaluations on the old version were still running at the drain bound.
    pub drained: bool,
}

/// One decision replayed on a candidate.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayDifference {
    pub job_id: String,
    pub team: String,
    pub recorded: String,
    pub candidate: String,
}

/// A candidate replayed against recent decisions.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    pub compared: u64,
    pub changed: u64,
    /// The first differences (at most 100).
    pub differences: Vec<ReplayDifference>,
}

/// A decision and the versions that made it.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub outcome: ChainOutcome,
    pub global_version: u64,
    pub team_version: Option<u64>,
    /// `global@3` / `global@3+team@1`.
    pub label: String,
}

/// Owner of the active policy.
pub struct PolicyManager {
    current: ArcSwap<ActivePolicy>,
    registry: Registry,
    store: PolicyStore,
    runner: PolicyRunner,
    metrics: Arc<Metrics>,
    /// Serialises activations in this process (the store serialises replicas).
    activation: tokio::sync::Mutex<()>,
    shadow: ArcSwapOption<ShadowCandidate>,
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
    /// store has none) and build every scope.
    pub async fn start(
        registry: Registry,
        store: PolicyStore,
        runner: PolicyRunner,
        metrics: Arc<Metrics>,
        boot: Vec<BootLink>,
    ) -> Result<Arc<Self>, PolicyAdminError> {
        let mut heads = store.heads().await?;
        if !heads.contains_key("global") {
            let mut links = Vec::with_capacity(boot.len());
            for b in boot {
                let hexd = crate::policy::digest_of(&b.component);
                let version = format!(
                    "boot-{}",
                    hexd.trim_start_matches("sha256:").get(..12).unwrap_or("")
                );
                let (rec, _) = registry
                    .upload(Upload {
                        owner: GLOBAL.into(),
                        name: b.name.clone(),
                        version,
                        description: "from the gateway's start-up chain".into(),
                        component: b.component,
                        settings: Some(b.settings.clone()),
                        uploaded_by: "gateway".into(),
                    })
                    .await?;
                links.push(LinkRef {
                    owner: rec.owner,
                    name: rec.name,
                    version: rec.version,
                    digest: rec.digest,
                    settings: b.settings,
                });
            }
            match store
                .append(NewVersion {
                    scope: Scope::Global.key(),
                    expected: 0,
                    plugins: links,
                    action: "bootstrap",
                    author: "gateway".into(),
                    comment: "the start-up chain".into(),
                })
                .await
            {
                // Another replica bootstrapped first: use its version.
                Ok(_) | Err(PolicyAdminError::VersionConflict { .. }) => {}
                Err(e) => return Err(e),
            }
            heads = store.heads().await?;
        } else if !boot.is_empty() {
            tracing::info!("the store has a global policy; the start-up chain is not used");
        }

        let mut global = None;
        let mut teams = BTreeMap::new();
        for (key, v) in &heads {
            let Some(scope) = Scope::from_key(key) else {
                continue;
            };
            let pv = store
                .version(key, Some(*v))
                .await?
                .ok_or_else(|| PolicyAdminError::Internal(format!("{key} v{v} vanished")))?;
            let chain = build_chain(&registry, &pv.plugins).await?;
            let sp = ScopePolicy {
                version: pv.version,
                links: pv.plugins,
                chain,
            };
            match scope {
                Scope::Global => global = Some(sp),
                Scope::Team(t) => {
                    teams.insert(t, sp);
                }
            }
        }
        let global =
            global.ok_or_else(|| PolicyAdminError::Internal("no global policy stored".into()))?;
        Ok(Arc::new(PolicyManager {
            current: ArcSwap::from_pointee(ActivePolicy::new(global, teams)),
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

    pub fn store(&self) -> &PolicyStore {
        &self.store
    }

    /// Evaluate `request` with the chain that decides for `team`, recording
    /// per-plugin metrics under `path`.
    pub async fn evaluate(
        self: &Arc<Self>,
        team: &str,
        request: PolicyRequest,
        path: &'static str,
    ) -> Result<Evaluated, RunError> {
        let this = self.clone();
        let team = team.to_string();
        let (result, selected) = self
            .runner
            .run(move || {
                // Loaded with the permit held; kept until the evaluation ends (the
                // activation drain waits for it).
                let active = this.current.load_full();
                let selected: Selected = active.select(&team);
                let result = selected.chain.evaluate(&request);
                drop(active);
                (result, selected)
            })
            .await?;
        self.metrics.plugin_calls(&result);
        let outcome = result?;
        self.metrics.admission(outcome.decision.kind(), path);
        Ok(Evaluated {
            label: selected.label(),
            global_version: selected.global_version,
            team_version: selected.team_version,
            outcome,
        })
    }

    /// Resolve a request's links for `scope`: the global chain may use only global
    /// plugins; a team's chain its own plugins and global ones.
    pub async fn resolve(
        &self,
        scope: &Scope,
        inputs: Vec<LinkInput>,
    ) -> Result<Vec<LinkRef>, PolicyAdminError> {
        let owners: Vec<String> = match scope {
            Scope::Global => vec![GLOBAL.into()],
            Scope::Team(t) => vec![t.clone(), GLOBAL.into()],
        };
        let mut out = Vec::with_capacity(inputs.len());
        for (i, l) in inputs.into_iter().enumerate() {
            let field = format!("plugins[{i}]");
            let found = match (&l.digest, &l.name, &l.version) {
                (Some(d), _, _) => {
                    let rec = self.store.plugin_by_digest(owners.clone(), d).await?;
                    rec.filter(|r| l.name.as_ref().is_none_or(|n| *n == r.name))
                }
                (None, Some(n), Some(v)) => {
                    let mut rec = None;
                    for o in &owners {
                        rec = self.store.plugin(o, n, v).await?;
                        if rec.is_some() {
                            break;
                        }
                    }
                    rec
                }
                _ => {
                    return Err(PolicyAdminError::BadRequest {
                        code: "invalid-policy",
                        field,
                        message: "a link names its plugin by `digest`, or by `name` and \
                                  `version`"
                            .into(),
                    });
                }
            };
            let Some(rec) = found else {
                let reference = l.digest.clone().unwrap_or_else(|| {
                    format!(
                        "{}@{}",
                        l.name.clone().unwrap_or_default(),
                        l.version.clone().unwrap_or_default()
                    )
                });
                return Err(PolicyAdminError::UnknownPlugin {
                    reference,
                    scope: scope.key(),
                    field,
                });
            };
            out.push(LinkRef {
                owner: rec.owner,
                name: rec.name,
                version: rec.version,
                digest: rec.digest,
                settings: l.settings,
            });
        }
        Ok(out)
    }

    /// Build (load, validate settings, warm) a chain from resolved links.
    pub async fn build(&self, links: &[LinkRef]) -> Result<Arc<Chain>, PolicyAdminError> {
        build_chain(&self.registry, links).await
    }

    /// Replay `candidate` (as `scope`'s chain) against the latest `n` recorded
    /// decisions (of that team, for a team scope).
    pub async fn replay(
        &self,
        scope: &Scope,
        candidate: &Arc<Chain>,
        n: u32,
    ) -> Result<ReplayReport, PolicyAdminError> {
        let team = match scope {
            Scope::Global => None,
            Scope::Team(t) => Some(t.clone()),
        };
        let recent = self.store.recent_decisions(team, n).await?;
        let active = self.current();
        let mut report = ReplayReport::default();
        for d in recent {
            let Ok(request) = serde_json::from_value::<PolicyRequest>(d.request) else {
                continue;
            };
            let chain = match scope {
                Scope::Global => active.select_with_global(&d.team, candidate),
                Scope::Team(_) => active.select_with_team(candidate),
            };
            let result = self
                .runner
                .run(move || chain.evaluate(&request))
                .await
                .map_err(|e| PolicyAdminError::Internal(e.to_string()))?;
            let candidate_says = match result {
                Ok(o) => summary(&o.decision),
                Err(e) => format!("error:{}", e.source.cause()),
            };
            let recorded = match &d.code {
                Some(c) => format!("{}:{c}", d.kind),
                None => d.kind.clone(),
            };
            report.compared += 1;
            if recorded != candidate_says {
                report.changed += 1;
                if report.differences.len() < 100 {
                    report.differences.push(ReplayDifference {
                        job_id: d.job_id,
                        team: d.team,
                        recorded,
                        candidate: candidate_says,
                    });
                }
            }
        }
        Ok(report)
    }

    /// Store a change as its scope's next version (if the scope is still at the
    /// expected version) and activate it.
    pub async fn activate(&self, change: Change) -> Result<Activation, PolicyAdminError> {
        let Change {
            scope,
            expected,
            links,
            chain,
            action,
            author,
            comment,
        } = change;
        let scope = &scope;
        let author = author.as_str();
        let _guard = self.activation.lock().await;
        let version = self
            .store
            .append(NewVersion {
                scope: scope.key(),
                expected,
                plugins: links.clone(),
                action,
                author: author.to_string(),
                comment,
            })
            .await?;
        let started = Instant::now();
        let drained = self.swap_in(
            scope,
            ScopePolicy {
                version: version.version,
                links,
                chain,
            },
        );
        let drained = drained.await;
        let activation_ms = started.elapsed().as_secs_f64() * 1000.0;
        tracing::info!(
            scope = %scope.key(),
            version = version.version,
            action,
            author,
            activation_ms,
            drained,
            "policy activated"
        );
        Ok(Activation {
            version,
            activation_ms,
            drained,
        })
    }

    /// Roll `scope` back to `to` (default: the version that was active before the
    /// current one), as a new version with exactly that chain.
    pub async fn rollback(
        &self,
        scope: &Scope,
        expected: Option<u64>,
        to: Option<u64>,
        author: &str,
        comment: &str,
    ) -> Result<Activation, PolicyAdminError> {
        let key = scope.key();
        let current = self
            .store
            .version(&key, None)
            .await?
            .ok_or_else(|| PolicyAdminError::NothingToRollBack { scope: key.clone() })?;
        let expected = expected.unwrap_or(current.version);
        let target = match to.unwrap_or(current.from_version) {
            0 => return Err(PolicyAdminError::NothingToRollBack { scope: key }),
            v => v,
        };
        let previous = self
            .store
            .version(&key, Some(target))
            .await?
            .ok_or_else(|| {
                PolicyAdminError::NotFound(format!("policy `{key}` has no version {target}"))
            })?;
        let chain = self.build(&previous.plugins).await?;
        let comment = if comment.is_empty() {
            format!("rollback to version {target}")
        } else {
            comment.to_string()
        };
        self.activate(Change {
            scope: scope.clone(),
            expected,
            links: previous.plugins,
            chain,
            action: "rollback",
            author: author.to_string(),
            comment,
        })
        .await
    }

    /// Pick up versions other replicas stored. Returns whether anything changed.
    pub async fn sync(&self) -> Result<bool, PolicyAdminError> {
        let heads = self.store.heads().await?;
        let mine = self.current().heads();
        let newer: Vec<(String, u64)> = heads
            .into_iter()
            .filter(|(k, v)| mine.get(k).is_none_or(|m| m < v))
            .collect();
        if newer.is_empty() {
            return Ok(false);
        }
        let _guard = self.activation.lock().await;
        for (key, v) in newer {
            let Some(scope) = Scope::from_key(&key) else {
                continue;
            };
            // Re-check under the lock: a local activation may have got there first.
            if self.current().scope(&scope).is_some_and(|s| s.version >= v) {
                continue;
            }
            let pv = self
                .store
                .version(&key, Some(v))
                .await?
                .ok_or_else(|| PolicyAdminError::Internal(format!("{key} v{v} vanished")))?;
            let chain = self.build(&pv.plugins).await?;
            let drained = self
                .swap_in(
                    &scope,
                    ScopePolicy {
                        version: pv.version,
                        links: pv.plugins,
                        chain,
                    },
                )
                .await;
            tracing::info!(scope = %key, version = v, drained, "picked up a policy change");
        }
        Ok(true)
    }

    /// Poll the store every `every` for other replicas' changes.
    pub fn spawn_sync(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if let Err(e) = this.sync().await {
                    tracing::warn!("policy sync failed (keeping the active policy): {e}");
                }
            }
        })
    }

    /// Swap a scope in and wait (bounded) until no evaluation uses the old snapshot.
    async fn swap_in(&self, scope: &Scope, policy: ScopePolicy) -> bool {
        let next = Arc::new(self.current.load().with_scope(scope, policy));
        let old = self.current.swap(next);
        let deadline = Instant::now() + DRAIN_BOUND;
        while Arc::strong_count(&old) > 1 {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        true
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
            let shadow = match this.runner.run(move || chain.evaluate(&request)).await {
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

/// Load every link's plugin and build the chain (validating settings, which also
/// instantiates each plugin once).
async fn build_chain(
    registry: &Registry,
    links: &[LinkRef],
) -> Result<Arc<Chain>, PolicyAdminError> {
    let mut chain_links = Vec::with_capacity(links.len());
    for l in links {
        chain_links.push(ChainLink {
            plugin: registry.load(l).await?,
            settings: settings_text(&l.settings),
        });
    }
    let engine = registry.engine().clone();
    let chain = tokio::task::spawn_blocking(move || Chain::new(&engine, chain_links))
        .await
        .map_err(|e| PolicyAdminError::Internal(e.to_string()))?
        .map_err(|e| {
            let field = match &e {
                crate::policy::LoadError::InvalidSettings { plugin, .. }
                | crate::policy::LoadError::SettingsCheckFailed { plugin, .. } => links
                    .iter()
                    .position(|l| super::registry::display_name(&l.owner, &l.name) == *plugin)
                    .map_or_else(
                        || "plugins".to_string(),
                        |i| format!("plugins[{i}].settings"),
                    ),
                _ => "plugins".to_string(),
            };
            PolicyAdminError::from_load(e, &field)
        })?;
    Ok(Arc::new(chain))
}
