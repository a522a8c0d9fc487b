//! Embeds what `forge plugin new` writes into a scaffold so that it builds outside
//! this repository: for Rust, the plugin SDK's sources with a standalone manifest (the
//! workspace-inherited fields resolved from the workspace's `Cargo.toml`) and every
//! WIT contract version under `wit/`, and the workspace's `Cargo.lock` (the
//! dependency versions the SDK is tested with); for Python and TypeScript, the SDK's
//! sources, settings (`sdk.toml`), pinned toolchain and installer, and the contract. The scaffold vendors them
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
    let mut rust: Vec<(String, PathBuf)> = vec![
        ("vendor/forge-plugin-sdk/Cargo.toml".into(), manifest_path),
        ("Cargo.lock".into(), root.join("Cargo.lock")),
    ];
    rust.extend(tree(&sdk.join("src"), "vendor/forge-plugin-sdk/src"));
    let wit = tree(&root.join("wit"), "vendor/wit");
    rust.extend(wit.iter().cloned());

    // Python and TypeScript plugins get the SDK in the repository's layout
    // (`vendor/plugin-sdk/…` next to `vendor/wit`), with its toolchain installer and
    // pinned toolchain (requirements.txt / package-lock.json).
    let mut common: Vec<(String, PathBuf)> = ["sdk.toml", "install-toolchains.sh"]
        .iter()
        .map(|f| (format!("vendor/plugin-sdk/{f}"), sdk.join(f)))
        .collect();
    common.extend(wit);
    let mut python = vec![(
        "vendor/plugin-sdk/python/requirements.txt".to_string(),
        sdk.join("python/requirements.txt"),
    )];
    python.extend(tree(
        &sdk.join("python/forge_policy"),
        "vendor/plugin-sdk/python/forge_policy",
    ));
    let mut ts: Vec<(String, PathBuf)> =
        ["package.json", "package-lock.json", "tsconfig.plugin.json"]
            .iter()
            .map(|f| (format!("vendor/plugin-sdk/js/{f}"), sdk.join("js").join(f)))
            .collect();
    ts.extend(tree(&sdk.join("js/src"), "vendor/plugin-sdk/js/src"));

    for path in [
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        sdk.join("Cargo.toml"),
        sdk.join("src"),
        root.join("wit"),
        sdk.join("sdk.toml"),
        sdk.join("install-toolchains.sh"),
        sdk.join("python/requirements.txt"),
        sdk.join("python/forge_policy"),
        sdk.join("js/package.json"),
        sdk.join("js/package-lock.json"),
        sdk.join("js/tsconfig.plugin.json"),
        sdk.join("js/src"),
    ] {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let mut code = String::new();
    for (name, doc, files) in [
        (
            "VENDORED",
            "Rust plugins: the SDK crate, the contract, the lock file",
            &rust,
        ),
        (
            "VENDORED_SDK",
            "Python and TypeScript plugins: the SDK settings, its toolchain installer and the contract",
            &common,
        ),
        (
            "VENDORED_PYTHON",
            "Python plugins: the Python SDK and its pinned toolchain",
            &python,
        ),
        (
            "VENDORED_TS",
            "TypeScript plugins: the TypeScript SDK and its pinned toolchain",
            &ts,
        ),
    ] {
        writeln!(
            code,
            "/// Files vendored into a plugin scaffold ({doc}): (path in the scaffold, contents).\npub static {name}: &[(&str, &str)] = &["
        )
        .expect("writing to a string");
        for (dest, path) in files {
            writeln!(
                code,
                "    ({dest:?}, include_str!({:?})),",
                path.display().to_string()
            )
            .expect("writing to a string");
        }
        code.push_str("];\n");
    }
    std::fs::write(out.join("vendored.rs"), code).expect("writing vendored.rs");
}

/// Every source file under `base` (no caches, no installed packages), each with its
/// path under `dest`.
fn tree(base: &Path, dest: &str) -> Vec<(String, PathBuf)> {
    walk(base)
        .into_iter()
        .filter(|p| {
            !p.components().any(|c| {
                let c = c.as_os_str();
                c == "__pycache__" || c == "node_modules"
            }) && p.extension().is_none_or(|e| e != "pyc")
        })
        .map(|p| {
            let rel = p.strip_prefix(base).expect("walked under base");
            (format!("{dest}/{}", rel.display()), p)
        })
        .collect()
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
