//! Embeds what `forge plugin new` writes into a scaffold so that it builds outside
//! this repository: the plugin SDK's sources with a standalone manifest (the
//! workspace-inherited fields resolved from the workspace's `Cargo.toml`) and every
//! WIT contract version under `wit/`, and the workspace's `Cargo.lock` (the
//! dependency versions the SDK is tested with). The scaffold vendors them
//! (`vendor/`), so it needs nothing but crates.io; generated from the repository's
//! files at build time, so a new SDK or contract version is picked up by rebuilding
//! `forge`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest_dir
        .parent()
        .and_then(Path::parent)
        .expect("gateway/cli sits two levels below the workspace root")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    let sdk = root.join("plugin-sdk");

    let manifest = standalone_manifest(&root.join("Cargo.toml"), &sdk.join("Cargo.toml"));
    let manifest_path = out.join("sdk-Cargo.toml");
    std::fs::write(&manifest_path, manifest).expect("writing the SDK manifest");

    // The workspace's lock file pins the scaffold's dependencies to the versions the
    // SDK is built and tested with here (cargo drops the entries it does not use).
    let mut files: Vec<(String, PathBuf)> = vec![
        ("vendor/forge-plugin-sdk/Cargo.toml".into(), manifest_path),
        ("Cargo.lock".into(), root.join("Cargo.lock")),
    ];
    for (base, dest) in [
        (sdk.join("src"), "vendor/forge-plugin-sdk/src"),
        (root.join("wit"), "vendor/wit"),
    ] {
        for path in walk(&base) {
            let rel = path.strip_prefix(&base).expect("walked under base");
            files.push((format!("{dest}/{}", rel.display()), path));
        }
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.lock").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        sdk.join("Cargo.toml").display()
    );
    println!("cargo:rerun-if-changed={}", sdk.join("src").display());
    println!("cargo:rerun-if-changed={}", root.join("wit").display());

    let mut code = String::from(
        "/// Files vendored into a plugin scaffold: (path in the scaffold, contents).\npub static VENDORED: &[(&str, &str)] = &[\n",
    );
    for (dest, path) in &files {
        writeln!(
            code,
            "    ({dest:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a string");
    }
    code.push_str("];\n");
    std::fs::write(out.join("vendored.rs"), code).expect("writing vendored.rs");
}

/// Every file under `dir`, sorted.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The SDK's manifest with `x.workspace = true` replaced by the workspace's values
/// and the workspace lints dropped.
fn standalone_manifest(workspace: &Path, sdk: &Path) -> String {
    let read = |p: &Path| -> toml::Table {
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        text.parse()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let ws = read(workspace);
    let mut m = read(sdk);
    let ws = ws["workspace"].as_table().expect("[workspace]");
    let inherited = |t: &toml::Value| {
        t.as_table()
            .and_then(|t| t.get("workspace"))
            .and_then(toml::Value::as_bool)
            == Some(true)
    };
    if let Some(pkg) = m.get_mut("package").and_then(toml::Value::as_table_mut) {
        let ws_pkg = ws["package"].as_table().expect("[workspace.package]");
        for (key, value) in pkg.iter_mut() {
            if inherited(value) {
                *value = ws_pkg[key].clone();
            }
        }
        pkg.remove("repository");
    }
    let ws_deps = ws["dependencies"]
        .as_table()
        .expect("[workspace.dependencies]");
    for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
        let Some(deps) = m.get_mut(section).and_then(toml::Value::as_table_mut) else {
            continue;
        };
        for (name, value) in deps.iter_mut() {
            if !inherited(value) {
                continue;
            }
            let mut resolved = match &ws_deps[name] {
                toml::Value::String(v) => {
                    let mut t = toml::Table::new();
                    t.insert("version".into(), toml::Value::String(v.clone()));
                    t
                }
                other => other.as_table().expect("a dependency table").clone(),
            };
            if let Some(extra) = value.get("features").and_then(toml::Value::as_array) {
                let features = resolved
                    .entry("features")
                    .or_insert_with(|| toml::Value::Array(Vec::new()));
                if let Some(list) = features.as_array_mut() {
                    list.extend(extra.iter().cloned());
                }
            }
            *value = toml::Value::Table(resolved);
        }
    }
    m.remove("lints");
    toml::to_string(&m).expect("a manifest serializes")
}
