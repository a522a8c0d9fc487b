//! Policy chain files: the ordered plugins and settings a gateway starts with
//! (`--policy-chain` / `FORGE_POLICY_CHAIN_FILE`), YAML or JSON:
//!
//! ```yaml
//! plugins:
//!   - name: pool-series
//!     component: components/forge-policy-pool-series.wasm   # relative to this file
//!     settings: { default_series: h100, allowed: [h100, h200] }
//!   - name: rwo-guard
//!     component: components/forge-policy-rwo-guard.wasm
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::chain::{Chain, ChainLink};
use crate::engine::PolicyEngine;
use crate::error::LoadError;
use crate::plugin::Plugin;

/// Why a chain file could not be turned into a chain.
#[derive(Debug, thiserror::Error)]
pub enum ChainFileError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid chain file: {reason}")]
    Parse { path: String, reason: String },
    #[error("plugin `{name}` ({path}): {source}")]
    Load {
        name: String,
        path: String,
        #[source]
        source: LoadError,
    },
    #[error(transparent)]
    Chain(#[from] LoadError),
}

/// One link as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub name: String,
    pub component: PathBuf,
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChainDoc {
    plugins: Vec<LinkSpec>,
}

/// Read and parse a chain file (component paths are resolved against its directory).
pub fn read(path: &Path) -> Result<Vec<LinkSpec>, ChainFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ChainFileError::Io {
        path: shown.clone(),
        source,
    })?;
    let doc: ChainDoc = serde_saphyr::from_str(&text).map_err(|e| ChainFileError::Parse {
        path: shown,
        reason: e.to_string(),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    Ok(doc
        .plugins
        .into_iter()
        .map(|mut l| {
            l.component = base.join(&l.component);
            l
        })
        .collect())
}

/// Load every component and build (validate and warm) the chain.
pub fn build(engine: &PolicyEngine, links: &[LinkSpec]) -> Result<Chain, ChainFileError> {
    let mut chain = Vec::with_capacity(links.len());
    for l in links {
        let shown = l.component.display().to_string();
        let bytes = std::fs::read(&l.component).map_err(|source| ChainFileError::Io {
            path: shown.clone(),
            source,
        })?;
        let plugin =
            Plugin::load(engine, &l.name, &bytes).map_err(|source| ChainFileError::Load {
                name: l.name.clone(),
                path: shown,
                source,
            })?;
        let settings = match &l.settings {
            None | Some(serde_json::Value::Null) => "{}".to_string(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        chain.push(ChainLink { plugin, settings });
    }
    Ok(Chain::new(engine, chain)?)
}
