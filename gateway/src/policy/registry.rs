//! The plugin registry: uploads are checked before anything is stored, components are
//! kept content-addressed in object storage (`plugins/<sha256>.wasm`, the local store
//! in dev mode), metadata in the policy store, and loaded plugins are cached in memory
//! by digest (their compiled form is cached on disk by the engine, so a restart does
//! not recompile).
//!
//! Checks, in order, each answered with its own code: name and version syntax, size
//! against `FORGE_PLUGIN_MAX_KIB`, the plugin's own limits (`memoryMib`, `deadlineMs`)
//! against the operator's maxima, the team's count and byte limits, "is a component
//! of a supported WIT version that imports only the host interface and compiles"
//! (`Plugin::load`: imports, exports and shape are checked before compiling, and the
//! compile runs on the engine's bounded pool), and — when settings are given — the
//! plugin's own `validate-settings`. Only an accepted upload's compiled form is
//! cached on disk. Teams whose uploads keep failing are braked (`failed_uploads`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use forge_policy_host::{
    Chain, ChainLink, LoadError, Plugin, PluginLimits, PolicyEngine, Unsaved, digest_of,
};

use super::error::{Malformed, PolicyAdminError};
use super::failed_uploads::{FailedUploads, counts_as_failure};
use crate::objects::{ObjectStore, plugin_key};
use crate::store::{LinkRef, PluginRecord, PolicyStore, now_ms};

/// The owner of admin-managed plugins (the global chain uses only these).
pub const GLOBAL: &str = "global";

/// Size and count limits of the registry.
#[derive(Debug, Clone, Copy)]
pub struct RegistryLimits {
    /// Largest component accepted (`FORGE_PLUGIN_MAX_KIB`).
    pub max_plugin_bytes: u64,
    /// Plugins one team may register (`FORGE_TEAM_PLUGIN_MAX_COUNT`).
    pub team_max_count: u64,
    /// Total component bytes one team may register (`FORGE_TEAM_PLUGIN_MAX_MIB`).
    pub team_max_bytes: u64,
    /// Failed uploads one team may make per hour
    /// (`FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR`, 0: unlimited).
    pub failed_uploads_per_hour: u32,
    /// Most links in one chain (`FORGE_POLICY_MAX_CHAIN_LINKS`).
    pub max_chain_links: usize,
}

/// One upload.
#[derive(Debug, Clone)]
pub struct Upload {
    /// `global` or the caller's team.
    pub owner: String,
    pub name: String,
    pub version: String,
    pub description: String,
    pub component: Bytes,
    /// Settings to check with `validate-settings` before accepting (optional).
    pub settings: Option<serde_json::Value>,
    /// The plugin's memory cap in MiB (`None`: the operator's default).
    pub memory_mib: Option<u64>,
    /// The plugin's per-call deadline in ms (`None`: the operator's default).
    pub deadline_ms: Option<u64>,
    pub uploaded_by: String,
}

/// Checked uploads, stored components, loaded plugins.
pub struct Registry {
    engine: PolicyEngine,
    blobs: Arc<dyn ObjectStore>,
    store: Arc<dyn PolicyStore>,
    limits: RegistryLimits,
    /// The teams' failed-upload budgets.
    failures: FailedUploads,
    /// Loaded plugins by (digest, display name, version).
    loaded: Mutex<HashMap<(String, String, String), Arc<Plugin>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("limits", &self.limits)
            .finish()
    }
}

/// Plugin names are label-like: `[a-z0-9]([a-z0-9-]*[a-z0-9])?`, at most 63 chars.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Versions: `[A-Za-z0-9._+-]`, 1..=64 chars (semver fits).
pub fn valid_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._+-".contains(&b))
}

/// How a link's plugin is named in traces and metrics: `name` for global plugins,
/// `team/name` for a team's own.
pub fn display_name(owner: &str, name: &str) -> String {
    if owner == GLOBAL {
        name.to_string()
    } else {
        format!("{owner}/{name}")
    }
}

/// Settings as the plugin receives them (a JSON document; `null` = `{}`).
pub fn settings_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => "{}".to_string(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Registry {
    pub fn new(
        engine: PolicyEngine,
        blobs: Arc<dyn ObjectStore>,
        store: Arc<dyn PolicyStore>,
        limits: RegistryLimits,
    ) -> Self {
        Registry {
            engine,
            blobs,
            store,
            limits,
            failures: FailedUploads::new(limits.failed_uploads_per_hour),
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The registry's limits.
    pub fn limits(&self) -> RegistryLimits {
        self.limits
    }

    /// Whether `team` may upload now (its failed uploads are within budget).
    pub fn admit_upload(&self, team: &str) -> Result<(), PolicyAdminError> {
        self.failures.admit(team)
    }

    /// The engine plugins are compiled with.
    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    /// Check, store and register an upload. Returns the record and whether it is new
    /// (an identical re-upload is not an error). A team whose uploads failed too often
    /// lately is refused before anything is checked (`failed_uploads`).
    pub async fn upload(&self, u: Upload) -> Result<(PluginRecord, bool), PolicyAdminError> {
        let team = (u.owner != GLOBAL).then(|| u.owner.clone());
        if let Some(team) = &team {
            self.failures.admit(team)?;
        }
        let out = self.check_and_store(u).await;
        if let (Some(team), Err(e)) = (&team, &out)
            && counts_as_failure(e)
        {
            self.failures.record(team);
        }
        out
    }

    /// The upload's checks, in order — its shape, an identical or conflicting version,
    /// the team's room, the host's load checks and the plugin's own settings check —
    /// then the blob, the record and the precompiled form are stored.
    async fn check_and_store(&self, u: Upload) -> Result<(PluginRecord, bool), PolicyAdminError> {
        let size = self.check_shape(&u)?;
        let limits = self.requested_limits(u.memory_mib, u.deadline_ms)?;
        let digest = digest_of(&u.component);
        if let Some(existing) = self.store.plugin(&u.owner, &u.name, &u.version).await? {
            let same_limits =
                existing.memory_mib == u.memory_mib && existing.deadline_ms == u.deadline_ms;
            if existing.digest == digest && same_limits {
                return Ok((existing, false));
            }
            return Err(PolicyAdminError::VersionExists {
                name: u.name,
                version: u.version,
                digest: existing.digest,
            });
        }
        if u.owner != GLOBAL {
            self.check_team_room(&u.owner, size).await?;
        }
        let display = display_name(&u.owner, &u.name);
        let (plugin, unsaved) = self.load_checked(&u, &display, limits).await?;
        let key = plugin_key(&digest).map_err(|e| PolicyAdminError::task("the plugin's key", e))?;
        self.blobs
            .put_object(&key, u.component.clone())
            .await
            .map_err(|e| PolicyAdminError::storage(key.clone(), e))?;
        let record = PluginRecord {
            owner: u.owner,
            name: u.name,
            version: u.version.clone(),
            digest: digest.clone(),
            size,
            description: u.description,
            world: plugin.world().to_string(),
            uploaded_by: u.uploaded_by,
            uploaded_at_ms: now_ms(),
            memory_mib: u.memory_mib,
            deadline_ms: u.deadline_ms,
        };
        let out = self.store.insert_plugin(record).await?;
        // Accepted and stored: only now is its compiled form cached on disk.
        let saved = tokio::task::spawn_blocking(move || unsaved.save())
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(e) = saved {
            let plugin = display.as_str();
            tracing::warn!(plugin, "precompile cache not written: {e}");
        }
        self.cache_insert(&digest, &display, &u.version, plugin);
        Ok(out)
    }

    /// A well-formed name and version, a component within the size limit; its size.
    fn check_shape(&self, u: &Upload) -> Result<u64, PolicyAdminError> {
        if !valid_name(&u.name) {
            return Err(PolicyAdminError::malformed(
                Malformed::Name,
                "name",
                "a plugin name is 1-63 characters of [a-z0-9-], not starting or ending with `-`",
            ));
        }
        if !valid_version(&u.version) {
            return Err(PolicyAdminError::malformed(
                Malformed::Version,
                "version",
                "a version is 1-64 characters of [A-Za-z0-9._+-]",
            ));
        }
        let size = u.component.len() as u64;
        if size > self.limits.max_plugin_bytes {
            return Err(PolicyAdminError::TooLarge {
                size,
                limit: self.limits.max_plugin_bytes,
            });
        }
        Ok(size)
    }

    /// Whether `team` may store one more plugin of `size` bytes.
    async fn check_team_room(&self, team: &str, size: u64) -> Result<(), PolicyAdminError> {
        let (count, bytes) = self.store.owner_usage(team).await?;
        if count + 1 > self.limits.team_max_count {
            return Err(PolicyAdminError::TeamLimit {
                team: team.to_owned(),
                message: format!(
                    "has {count} plugins; the limit is {}",
                    self.limits.team_max_count
                ),
            });
        }
        if bytes + size > self.limits.team_max_bytes {
            return Err(PolicyAdminError::TeamLimit {
                team: team.to_owned(),
                message: format!(
                    "has {bytes} bytes of plugins; with this {size}-byte one that exceeds \
                     the limit of {}",
                    self.limits.team_max_bytes
                ),
            });
        }
        Ok(())
    }

    /// The host's checks, and the plugin's own settings check, off the async workers:
    /// the loaded plugin and its compiled form, not yet saved.
    async fn load_checked(
        &self,
        u: &Upload,
        display: &str,
        limits: PluginLimits,
    ) -> Result<(Arc<Plugin>, Unsaved), PolicyAdminError> {
        let engine = self.engine.clone();
        let (display, version, component) =
            (display.to_owned(), u.version.clone(), u.component.clone());
        let settings = u.settings.as_ref().map(settings_text);
        tokio::task::spawn_blocking(move || -> Result<_, PolicyAdminError> {
            let (plugin, unsaved) =
                Plugin::load_unsaved(&engine, &display, &version, &component, limits)
                    .map_err(|e| PolicyAdminError::from_load(e, "component"))?;
            if let Some(settings) = settings {
                let refused = |message| PolicyAdminError::Settings {
                    plugin: display.clone(),
                    field: "settings".into(),
                    message,
                };
                match plugin.validate_settings(&settings) {
                    Ok(Ok(())) => {}
                    Ok(Err(message)) => return Err(refused(message)),
                    Err(e) => return Err(refused(format!("validate-settings failed: {e}"))),
                }
            }
            Ok((plugin, unsaved))
        })
        .await
        .map_err(|e| PolicyAdminError::task("checking the upload", e))?
    }

    /// The loaded plugin a link names: from memory, else fetched from object storage
    /// (digest verified) and loaded (its compiled form comes from the engine's cache).
    pub async fn load(&self, link: &LinkRef) -> Result<Arc<Plugin>, PolicyAdminError> {
        let display = display_name(&link.owner, &link.name);
        let key = (link.digest.clone(), display.clone(), link.version.clone());
        if let Some(p) = self.cache_get(&key) {
            return Ok(p);
        }
        let object =
            plugin_key(&link.digest).map_err(|e| PolicyAdminError::task("the plugin's key", e))?;
        let bytes = self
            .blobs
            .get_object(&object)
            .await
            .map_err(|e| PolicyAdminError::storage(object.clone(), e))?;
        let actual = digest_of(&bytes);
        if actual != link.digest {
            return Err(PolicyAdminError::storage(
                object,
                format!("it has digest {actual}, expected {}", link.digest),
            ));
        }
        let record = self
            .store
            .plugin(&link.owner, &link.name, &link.version)
            .await?;
        let limits = self.stored_limits(
            &display,
            record.as_ref().and_then(|r| r.memory_mib),
            record.as_ref().and_then(|r| r.deadline_ms),
        );
        let engine = self.engine.clone();
        let version = link.version.clone();
        let name = display.clone();
        let plugin = tokio::task::spawn_blocking(move || {
            Plugin::load_with_limits(&engine, &name, &version, &bytes, limits)
        })
        .await
        .map_err(|e| PolicyAdminError::task("loading a plugin", e))?
        .map_err(|e| PolicyAdminError::from_load(e, "component"))?;
        self.cache_insert(&key.0, &key.1, &key.2, plugin.clone());
        Ok(plugin)
    }

    /// Load every link's plugin and build the chain (validating settings, which also
    /// instantiates each plugin once).
    pub async fn build_chain(&self, links: &[LinkRef]) -> Result<Arc<Chain>, PolicyAdminError> {
        let mut chain_links = Vec::with_capacity(links.len());
        for l in links {
            chain_links.push(ChainLink {
                plugin: self.load(l).await?,
                settings: settings_text(&l.settings),
            });
        }
        let engine = self.engine.clone();
        let chain = tokio::task::spawn_blocking(move || Chain::new(&engine, chain_links))
            .await
            .map_err(|e| PolicyAdminError::task("building a chain", e))?
            .map_err(|e| {
                let field = match &e {
                    LoadError::InvalidSettings { plugin, .. }
                    | LoadError::SettingsCheckFailed { plugin, .. } => links
                        .iter()
                        .position(|l| display_name(&l.owner, &l.name) == *plugin)
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

    /// The limits an upload asks for, checked against the operator's maxima.
    fn requested_limits(
        &self,
        memory_mib: Option<u64>,
        deadline_ms: Option<u64>,
    ) -> Result<PluginLimits, PolicyAdminError> {
        let engine = self.engine.limits();
        let mut limits = engine.plugin_defaults();
        let max_mib = (engine.max_memory_cap_bytes.max(engine.memory_cap_bytes) >> 20) as u64;
        if let Some(mib) = memory_mib {
            if mib == 0 || mib > max_mib {
                return Err(PolicyAdminError::LimitTooHigh {
                    field: "memoryMib".into(),
                    message: format!(
                        "memoryMib is {mib}; a plugin's memory cap is 1..={max_mib} MiB \
                         (FORGE_POLICY_MAX_MEMORY_MIB)"
                    ),
                });
            }
            limits.memory_cap_bytes = usize::try_from(mib << 20).unwrap_or(usize::MAX);
        }
        let max_ms =
            u64::try_from(engine.max_deadline.max(engine.deadline).as_millis()).unwrap_or(u64::MAX);
        if let Some(ms) = deadline_ms {
            if ms == 0 || ms > max_ms {
                return Err(PolicyAdminError::LimitTooHigh {
                    field: "deadlineMs".into(),
                    message: format!(
                        "deadlineMs is {ms}; a plugin's deadline is 1..={max_ms} ms \
                         (FORGE_POLICY_MAX_DEADLINE_MS)"
                    ),
                });
            }
            limits.deadline = std::time::Duration::from_millis(ms);
        }
        Ok(limits)
    }

    /// The limits of a registered plugin. A maximum lowered since the upload clamps
    /// them (with a warning) rather than leaving the chain unable to load.
    fn stored_limits(
        &self,
        plugin: &str,
        memory_mib: Option<u64>,
        deadline_ms: Option<u64>,
    ) -> PluginLimits {
        match self.requested_limits(memory_mib, deadline_ms) {
            Ok(l) => l,
            Err(e) => {
                let engine = self.engine.limits();
                tracing::warn!(
                    plugin,
                    "stored plugin limits above today's maxima, clamped: {e}"
                );
                PluginLimits {
                    memory_cap_bytes: memory_mib.map_or(engine.memory_cap_bytes, |m| {
                        usize::try_from(m << 20)
                            .unwrap_or(usize::MAX)
                            .clamp(1, engine.max_memory_cap_bytes.max(engine.memory_cap_bytes))
                    }),
                    deadline: deadline_ms.map_or(engine.deadline, |ms| {
                        std::time::Duration::from_millis(ms)
                            .min(engine.max_deadline.max(engine.deadline))
                    }),
                }
            }
        }
    }

    fn cache_get(&self, key: &(String, String, String)) -> Option<Arc<Plugin>> {
        self.loaded.lock().ok().and_then(|m| m.get(key).cloned())
    }

    fn cache_insert(&self, digest: &str, name: &str, version: &str, plugin: Arc<Plugin>) {
        if let Ok(mut m) = self.loaded.lock() {
            m.insert(
                (digest.to_string(), name.to_string(), version.to_string()),
                plugin,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions() {
        assert!(valid_name("pool-series"));
        assert!(!valid_name("Pool"));
        assert!(!valid_name("-x"));
        assert!(!valid_name(""));
        assert!(!valid_name(&"a".repeat(64)));
        assert!(valid_version("1.2.3-rc.1+build"));
        assert!(!valid_version("1 2"));
        assert!(!valid_version("../x"));
        assert_eq!(display_name("global", "q"), "q");
        assert_eq!(display_name("ml", "q"), "ml/q");
    }
}
