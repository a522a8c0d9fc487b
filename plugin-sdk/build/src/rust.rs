//! Rust plugins: a cargo package built for `wasm32-unknown-unknown`, its core module
//! wrapped into a component.
//!
//! Two toolchain paths, chosen automatically:
//! - **rustup target**: if `wasm32-unknown-unknown` is installed for the active
//!   toolchain, plain `cargo build --target wasm32-unknown-unknown`.
//! - **Debian build-std** (machines whose rustup cannot download targets): Debian's
//!   `rustc-web`/`cargo-web`/`rust-web-src` (Rust 1.96 with std sources) build `std`
//!   for wasm with `-Zbuild-std`, linked by rustup's bundled `rust-lld`.
//!
//! The core module is then wrapped into a component with `wit-component` (the world is
//! read from the custom section wit-bindgen embeds), and validated. The `plugin`
//! profile's settings are passed on the command line, so a crate outside this
//! workspace builds without defining it.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildOptions;
use crate::error::BuildError;
use crate::sdk::write_atomic;

const TARGET: &str = "wasm32-unknown-unknown";
/// The settings of the `plugin` profile (the workspace's `[profile.plugin]`), passed
/// with `--config` so that a crate outside this workspace builds the same way.
/// `opt-level=3`, not `"s"`: a decision runs on every admission, and the reference
/// chain's warm p50/p99 measured 28.8/55.0 µs with `"s"` and 21.1/29.4 µs with 3
/// (`policy_chain` bench, same host binary) for components ~20 % larger.
const PLUGIN_PROFILE_SETTINGS: &[&str] = &[
    "inherits=\"release\"",
    "opt-level=3",
    "lto=true",
    "codegen-units=1",
    "panic=\"abort\"",
    "strip=true",
    "debug=false",
];
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library";

/// Which toolchain path is available here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolchain {
    RustupTarget,
    DebianBuildStd,
}

/// Detect the toolchain path to use.
pub fn detect_toolchain() -> Result<Toolchain, BuildError> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == TARGET)
        })
        .unwrap_or(false);
    if installed {
        return Ok(Toolchain::RustupTarget);
    }
    if Path::new(DEBIAN_RUSTC).exists()
        && Path::new(DEBIAN_CARGO).exists()
        && Path::new(DEBIAN_STD_SRC).exists()
    {
        return Ok(Toolchain::DebianBuildStd);
    }
    Err(BuildError::NoToolchain)
}

/// The package name in `<crate_dir>/Cargo.toml`.
pub fn package_name(crate_dir: &Path) -> Result<String, BuildError> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        package: Package,
    }
    #[derive(serde::Deserialize)]
    struct Package {
        name: String,
    }
    let path = crate_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|source| BuildError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let m: Manifest = toml::from_str(&text).map_err(|e| BuildError::Manifest {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    Ok(m.package.name)
}

/// Build one plugin crate; returns the path of the component.
pub fn build(crate_dir: &Path, opts: &BuildOptions) -> Result<PathBuf, BuildError> {
    let package = package_name(crate_dir)?;
    let toolchain = detect_toolchain()?;
    let manifest = crate_dir.join("Cargo.toml");
    let mut cmd = match toolchain {
        Toolchain::RustupTarget => Command::new("cargo"),
        Toolchain::DebianBuildStd => {
            let mut c = Command::new(DEBIAN_CARGO);
            c.env("RUSTC", DEBIAN_RUSTC)
                .env("RUSTC_BOOTSTRAP", "1")
                .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", rust_lld()?)
                .arg("-Zbuild-std=std,panic_abort");
            c
        }
    };
    without_callers_build_env(&mut cmd);
    if toolchain == Toolchain::RustupTarget {
        cmd.env_remove("RUSTC");
    }
    cmd.arg("build");
    if opts.profile == crate::PLUGIN_PROFILE {
        // Crates outside the Forge workspace need not define the profile.
        for setting in PLUGIN_PROFILE_SETTINGS {
            cmd.arg("--config")
                .arg(format!("profile.{}.{setting}", crate::PLUGIN_PROFILE));
        }
    }
    cmd.arg("--manifest-path")
        .arg(&manifest)
        .args([
            "--target",
            TARGET,
            "--profile",
            &opts.profile,
            "--target-dir",
        ])
        .arg(&opts.target_dir)
        .args(["-p", &package]);
    let status = cmd.status().map_err(|source| BuildError::Io {
        path: "cargo".into(),
        source,
    })?;
    if !status.success() {
        return Err(BuildError::Cargo {
            package,
            status: status.to_string(),
        });
    }
    let core = opts
        .target_dir
        .join(TARGET)
        .join(&opts.profile)
        .join(format!("{}.wasm", package.replace('-', "_")));
    let bytes = std::fs::read(&core).map_err(|source| BuildError::Io {
        path: core.display().to_string(),
        source,
    })?;
    let component = componentize(&bytes).map_err(|detail| BuildError::Componentize {
        path: core.display().to_string(),
        detail,
    })?;
    let out = opts.out_dir.join(format!("{package}.wasm"));
    write_atomic(&out, &component)?;
    Ok(out)
}

/// Wrap a core module (with wit-bindgen's embedded world) into a validated component.
pub fn componentize(core_module: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .module(core_module)
        .map_err(|e| format!("{e:#}"))?
        .validate(true)
        .encode()
        .map_err(|e| format!("{e:#}"))
}

/// rustup's bundled linker for the active (host) toolchain.
fn rust_lld() -> Result<PathBuf, BuildError> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .env_remove("RUSTC")
        .output()
        .map_err(|source| BuildError::Io {
            path: "rustc".into(),
            source,
        })?;
    let sysroot = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let lld = Path::new(&sysroot).join("lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-lld");
    if lld.exists() {
        Ok(lld)
    } else {
        Err(BuildError::NoToolchain)
    }
}

/// Removes what a caller's own cargo run set for its build — a build started from
/// inside `cargo test` inherits cargo's variables, a linting run its compiler wrapper
/// (`clippy-driver`, its `CLIPPY_ARGS`) — none of which may leak into the plugin's
/// unrelated build.
fn without_callers_build_env(cmd: &mut Command) {
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
}

/// Run the crate's native tests (`cargo test`; the harness runs the policy natively).
pub fn test(crate_dir: &Path) -> Result<(), BuildError> {
    let package = package_name(crate_dir)?;
    let mut cmd = Command::new("cargo");
    without_callers_build_env(&mut cmd);
    cmd.arg("test")
        .arg("--manifest-path")
        .arg(crate_dir.join("Cargo.toml"))
        .args(["-p", &package]);
    crate::sdk::run(cmd, "cargo test", &package)
}
