//! Build and test Forge policy plugins — Rust, Python or TypeScript — as WebAssembly
//! components targeting the `forge:policy` WIT world. One library for every developer
//! loop: the `forge-plugin` binary and the `forge` command line call the same functions.
//!
//! - [`detect`]: the language of a plugin directory (`Cargo.toml` → Rust,
//!   `forge-plugin.toml` → its `lang`, else `.py` / `.ts` files).
//! - [`build`]: the component `<out_dir>/<name>.wasm` ([`rust`]: cargo + wit-component;
//!   [`python`]: componentize-py; [`ts`]: tsc + esbuild + componentize-js). Python and
//!   TypeScript builds are cached by content ([`cache`]), so an unchanged plugin is not
//!   rebuilt.
//! - [`test`]: the plugin's native tests (`cargo test`, pytest, `node --test`) with each
//!   SDK's harness.
//! - [`Sdk`]: where the SDKs, their toolchains and the contract (`plugin-sdk/sdk.toml`)
//!   are — the repository's, or the copy a scaffolded plugin vendors.
//! - [`cli`]: the command lines (`build`, `test`) that both `forge-plugin` and the
//!   `forge` CLI's `plugin` commands parse, so the two cannot drift.
//! - [`workspace_component`]: a workspace plugin's bytes, for tests and benchmarks.

mod cache;
pub mod cli;
mod error;
mod lang;
pub mod python;
pub mod rust;
mod sdk;
pub mod ts;

use std::path::{Path, PathBuf};

pub use error::BuildError;
pub use lang::{Lang, MANIFEST, PluginManifest, detect, read_manifest};
pub use rust::{Toolchain, componentize, detect_toolchain, package_name};
pub use sdk::{Sdk, VENDORED as VENDORED_SDK};

/// The profile plugins are built with by default (the workspace's `[profile.plugin]`;
/// a crate that does not define it gets the same settings on the command line).
pub const PLUGIN_PROFILE: &str = "plugin";

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Cargo profile of Rust plugins (the workspace defines `plugin`: optimized for
    /// speed, LTO, panic=abort).
    pub profile: String,
    /// Cargo target directory of Rust builds; Python and TypeScript builds keep their
    /// content-addressed cache in `<target_dir>/sdk-cache`.
    pub target_dir: PathBuf,
    /// Where finished components are written (`<name>.wasm`).
    pub out_dir: PathBuf,
    /// The language, if not detected ([`detect`]).
    pub lang: Option<Lang>,
}

impl BuildOptions {
    /// The defaults of a workspace at `root`: profile `plugin`, `root/target/plugins`,
    /// components in `root/target/plugins/components`.
    pub fn in_workspace(root: &Path) -> Self {
        BuildOptions {
            profile: PLUGIN_PROFILE.into(),
            target_dir: root.join("target/plugins"),
            out_dir: root.join("target/plugins/components"),
            lang: None,
        }
    }
}

/// Build the plugin in `dir` (any language) into a component; returns its path.
pub fn build(dir: &Path, opts: &BuildOptions) -> Result<PathBuf, BuildError> {
    let lang = match opts.lang {
        Some(l) => l,
        None => detect(dir)?,
    };
    match lang {
        Lang::Rust => rust::build(dir, opts),
        Lang::Python => python::build(dir, opts, &Sdk::for_plugin(dir)),
        Lang::Ts => ts::build(dir, opts, &Sdk::for_plugin(dir)),
    }
}

/// Run the native tests of the plugin (or SDK test directory) `dir`. `target_dir` holds
/// bundled TypeScript tests.
pub fn test(dir: &Path, lang: Option<Lang>, target_dir: &Path) -> Result<(), BuildError> {
    let lang = match lang {
        Some(l) => l,
        None => detect(dir)?,
    };
    match lang {
        Lang::Rust => rust::test(dir),
        Lang::Python => python::test(dir, &Sdk::for_plugin(dir)),
        Lang::Ts => ts::test(dir, &Sdk::for_plugin(dir), target_dir),
    }
}

/// The component bytes of plugin `name` of the Forge workspace at `root` — a plugin
/// under `plugins/` (Rust, Python or TypeScript) or a test fixture under
/// `tests/fixtures/plugins/` — built (if needed) into `root/target/plugins`. For the
/// workspace's own tests and benchmarks. Built once per process (later calls return
/// the same bytes); callers in one process are serialized, cargo's own lock and the
/// content cache's atomic renames serialize processes.
pub fn workspace_component(root: &Path, name: &str) -> Result<Vec<u8>, BuildError> {
    type Built = std::collections::HashMap<(PathBuf, String), Vec<u8>>;
    static BUILT: std::sync::Mutex<Option<Built>> = std::sync::Mutex::new(None);
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = (root.to_path_buf(), name.to_string());
    if let Some(bytes) = built.get_or_insert_with(Built::new).get(&key) {
        return Ok(bytes.clone());
    }
    let reference = root.join("plugins").join(name);
    let dir = if reference.exists() {
        reference
    } else {
        root.join("tests/fixtures/plugins").join(name)
    };
    let path = build(&dir, &BuildOptions::in_workspace(root))?;
    let bytes = std::fs::read(&path).map_err(|e| BuildError::io(&path, e))?;
    built
        .get_or_insert_with(Built::new)
        .insert(key, bytes.clone());
    Ok(bytes)
}
