//! Which language a plugin directory is written in, and its manifest.
//!
//! Rust plugins are cargo packages (`Cargo.toml`). Python and TypeScript plugins carry a
//! `forge-plugin.toml`:
//!
//! ```toml
//! name = "scratch-guard-py"            # the component is <name>.wasm
//! lang = "python"                      # python | ts
//! entry = "scratch_guard:ScratchGuard" # python: module:class; ts: file (default export)
//! ```
//!
//! The contract version is not a plugin setting: every Python and TypeScript plugin
//! builds against the SDK's (`plugin-sdk/sdk.toml`).

use std::path::Path;

use crate::error::BuildError;

/// A plugin language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lang {
    Rust,
    Python,
    Ts,
}

impl Lang {
    /// `rust`, `python` or `ts`.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Ts => "ts",
        }
    }
}

impl std::str::FromStr for Lang {
    type Err = BuildError;

    fn from_str(s: &str) -> Result<Self, BuildError> {
        match s {
            "rust" | "rs" => Ok(Lang::Rust),
            "python" | "py" => Ok(Lang::Python),
            "ts" | "typescript" | "js" | "javascript" => Ok(Lang::Ts),
            other => Err(BuildError::BadLang(other.to_string())),
        }
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `forge-plugin.toml` of a Python or TypeScript plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginManifest {
    /// The component's name (`<name>.wasm`).
    pub name: String,
    /// `python` or `ts`.
    pub lang: String,
    /// Python: `module:Class` of the `Policy` subclass; TypeScript: the module whose
    /// default export is the policy.
    pub entry: String,
}

/// The manifest file name of Python and TypeScript plugins.
pub const MANIFEST: &str = "forge-plugin.toml";

/// Read `<dir>/forge-plugin.toml`.
pub fn read_manifest(dir: &Path) -> Result<PluginManifest, BuildError> {
    let path = dir.join(MANIFEST);
    let text = std::fs::read_to_string(&path).map_err(|e| BuildError::io(&path, e))?;
    let m: PluginManifest = toml::from_str(&text).map_err(|e| BuildError::Manifest {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    m.lang.parse::<Lang>()?;
    Ok(m)
}

/// The language of a plugin (or test) directory: `Cargo.toml` → Rust,
/// `forge-plugin.toml` → its `lang`, else the first of `.py` / `.ts` files found.
pub fn detect(dir: &Path) -> Result<Lang, BuildError> {
    if dir.join("Cargo.toml").is_file() {
        return Ok(Lang::Rust);
    }
    if dir.join(MANIFEST).is_file() {
        return read_manifest(dir)?.lang.parse();
    }
    let entries = std::fs::read_dir(dir).map_err(|e| BuildError::io(dir, e))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.iter().any(|n| n.ends_with(".py")) {
        return Ok(Lang::Python);
    }
    if names.iter().any(|n| n.ends_with(".ts")) {
        return Ok(Lang::Ts);
    }
    Err(BuildError::UnknownLang {
        dir: dir.display().to_string(),
    })
}
