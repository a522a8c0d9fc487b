//! The workspace's policy plugins, built from source (once per process; cargo's lock
//! serializes processes) for the gateway the tests start.

use std::path::{Path, PathBuf};

/// The workspace root (parent of this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives inside the workspace")
        .to_path_buf()
}

/// Build (if needed) and return the component bytes of plugin `name` (a reference
/// policy under `plugins/` or a fixture under `tests/fixtures/plugins/`).
pub fn component(name: &str) -> Vec<u8> {
    forge_plugin_build::workspace_component(&workspace_root(), name)
        .unwrap_or_else(|e| panic!("building plugin {name}: {e}"))
}

/// A component or module written in WebAssembly text under `tests/fixtures/`, encoded.
pub fn wat_fixture(rel: &str) -> Vec<u8> {
    let path = workspace_root().join("tests/fixtures").join(rel);
    let text = std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    wat::parse_bytes(&text)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .into_owned()
}
