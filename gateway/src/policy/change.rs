//! How the active policy changes: a change is resolved (plugin references → digests),
//! built (each plugin loaded, `validate-settings` run, so every plugin is instantiated
//! once) and, only if all of that succeeded, appended to the store as the scope's next
//! version (compare-and-set on the expected version) and swapped in atomically.
//! Evaluations load the snapshot when they get a runner permit and hold it while they
//! run; the change is acknowledged only after every evaluation that loaded the old
//! snapshot has finished (bounded wait), so no decision completes on the old version
//! after the acknowledgement. A failed build or a stale expected version changes
//! nothing.
//!
//! **Replicas.** Each gateway re-reads the store's per-scope head versions when the
//! store announces an append (PostgreSQL `LISTEN/NOTIFY`: milliseconds) and, as the
//! fallback, every `FORGE_POLICY_SYNC_MS`; a newer version is activated the same way
//! (build, swap, drain). A change on one replica is in effect on the others within the
//! notification's delivery (or one poll interval) plus its build time (milliseconds:
//! plugins are compiled once per digest and cached).

use std::sync::Arc;
use std::time::{Duration, Instant};

use forge_policy_host::Chain;
use serde::Serialize;

use super::active::{Scope, ScopePolicy, Unavailable};
use super::error::{Malformed, PolicyAdminError};
use super::manager::PolicyManager;
use super::registry::GLOBAL;
use crate::domain::FairShareSettings;
use crate::store::{LinkRef, NewVersion, PolicyVersion};

/// Longest an activation waits for evaluations on the old snapshot to finish.
const DRAIN_BOUND: Duration = Duration::from_secs(5);

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
    /// The version's fair-share weights (global scope only); `None`: the scope's
    /// current version's.
    pub fair_share: Option<FairShareSettings>,
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

impl PolicyManager {
    /// Resolve a request's links for `scope`: the global chain may use only global
    /// plugins; a team's chain its own plugins and global ones.
    pub async fn resolve(
        &self,
        scope: &Scope,
        inputs: Vec<LinkInput>,
    ) -> Result<Vec<LinkRef>, PolicyAdminError> {
        let limit = self.registry.limits().max_chain_links;
        if inputs.len() > limit {
            return Err(PolicyAdminError::ChainTooLong {
                count: inputs.len(),
                limit,
            });
        }
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
                    return Err(PolicyAdminError::malformed(
                        Malformed::Link,
                        field,
                        "a link names its plugin by `digest`, or by `name` and `version`",
                    ));
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
        self.registry.build_chain(links).await
    }

    /// Store a change as its scope's next version (if the scope is still at the
    /// expected version) and activate it.
    pub async fn activate(&self, change: Change) -> Result<Activation, PolicyAdminError> {
        let Change {
            scope,
            expected,
            links,
            chain,
            fair_share,
            action,
            author,
            comment,
        } = change;
        let scope = &scope;
        let author = author.as_str();
        let _guard = self.activation.lock().await;
        let fair_share = match fair_share {
            Some(f) => f,
            None => self
                .store
                .version(&scope.key(), None)
                .await?
                .map(|v| v.fair_share)
                .unwrap_or_default(),
        };
        let version = self
            .store
            .append(NewVersion {
                scope: scope.key(),
                expected,
                plugins: links.clone(),
                fair_share: fair_share.clone(),
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
                fair_share: Arc::new(fair_share),
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
            fair_share: Some(previous.fair_share),
            action: "rollback",
            author: author.to_string(),
            comment,
        })
        .await
    }

    /// Pick up versions other replicas stored, and retry unavailable team chains.
    /// Returns whether anything changed. A team version that cannot be built makes
    /// that team's chain unavailable (fail closed) rather than keeping an older one.
    pub async fn sync(&self) -> Result<bool, PolicyAdminError> {
        let heads = self.store.heads().await?;
        let mine = self.current().heads();
        let mut todo: Vec<(String, u64)> = heads
            .into_iter()
            .filter(|(k, v)| mine.get(k).is_none_or(|m| m < v))
            .collect();
        for (team, u) in self.current().unavailable_teams() {
            let key = Scope::Team(team).key();
            if !todo.iter().any(|(k, _)| *k == key) {
                todo.push((key, u.version));
            }
        }
        if todo.is_empty() {
            return Ok(false);
        }
        let _guard = self.activation.lock().await;
        let mut changed = false;
        for (key, v) in todo {
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
                .ok_or_else(|| PolicyAdminError::Invariant(format!("{key} v{v} vanished")))?;
            let chain = match (self.build(&pv.plugins).await, &scope) {
                (Ok(chain), _) => chain,
                (Err(e), Scope::Team(team)) => {
                    let known = self
                        .current()
                        .unavailable(team)
                        .is_some_and(|u| u.version == pv.version);
                    if !known {
                        tracing::error!(scope = %key, version = v, "the team's policy chain cannot be built: its admissions fail closed: {e}");
                        let next = self.current().with_unavailable(
                            team,
                            Unavailable {
                                version: pv.version,
                                links: pv.plugins,
                                reason: e.to_string(),
                            },
                        );
                        self.current.store(Arc::new(next));
                        changed = true;
                    }
                    continue;
                }
                (Err(e), Scope::Global) => return Err(e),
            };
            let drained = self
                .swap_in(
                    &scope,
                    ScopePolicy {
                        version: pv.version,
                        links: pv.plugins,
                        chain,
                        fair_share: Arc::new(pv.fair_share),
                    },
                )
                .await;
            changed = true;
            tracing::info!(scope = %key, version = v, drained, "picked up a policy change");
        }
        Ok(changed)
    }

    /// Pick up other replicas' changes: when the store announces one, and every
    /// `every` regardless.
    pub fn spawn_sync(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut feed = this.store.changes();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    r = async {
                        match feed.as_mut() {
                            Some(f) => f.changed().await,
                            None => std::future::pending().await,
                        }
                    } => {
                        if r.is_err() {
                            feed = None;
                        }
                    }
                }
                if let Err(e) = this.sync().await {
                    tracing::warn!("policy sync failed (keeping the active policy): {e}");
                }
            }
        })
    }

    /// Swap a scope in and wait (bounded) until no evaluation uses the old snapshot.
    pub(super) async fn swap_in(&self, scope: &Scope, policy: ScopePolicy) -> bool {
        let next = Arc::new(self.current.load().with_scope(scope, policy));
        let old = self.current.swap(next);
        let deadline = Instant::now() + DRAIN_BOUND;
        let mut drained = true;
        while Arc::strong_count(&old) > 1 {
            if Instant::now() >= deadline {
                drained = false;
                break;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        // Warm instances of the replaced chain never serve again (those of an
        // evaluation still running past the drain bound are dropped when it ends).
        if let Some(replaced) = old.scope(scope) {
            replaced.chain.discard_warm();
        }
        drained
    }
}
