//! Build a Forge policy plugin crate into a WebAssembly component.
//!
//! Two toolchain paths, chosen automatically:
//! - **rustup target**: if `wasm32-unknown-unknown` is installed for the active
//!   toolchain, plain `cargo build --target wasm32-unknown-unknown`.
//! - **Debian build-std** (machines whose rustup cannot download targets): Debian's
//!   `rustc-web`/`cargo-web`/`rust-web-src` (Rust 1.96 with std sources) build `std`
//!   for wasm with `-Zbuild-std`, linked by rustup's bundled `rust-lld`.
//!
//! The core module is then wrapped into a component with `wit-component` (the world is
//! read from the custom section wit-bindgen embeds), and validated.

use std::path::{Path, PathBuf};
use std::process::Command;

use thiserror::Error;

const TARGET: &str = "wasm32-unknown-unknown";
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";
const DEBIAN_STD_SRC: &str = "/usr/lib/rustlib/src/rust/library";

/// Why a plugin could not be built.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a cargo package manifest: {detail}")]
    Manifest { path: String, detail: String },
    #[error(
        "no WebAssembly toolchain: install the target (`rustup target add {TARGET}`) or, \
         where rustup cannot download it, Debian's `rustc-web cargo-web rust-web-src`"
    )]
    NoToolchain,
    #[error("cargo failed building {package} (exit {status}); its output is above")]
    Cargo { package: String, status: String },
    #[error("componentizing {path} failed: {detail}")]
    Componentize { path: String, detail: String },
}

/// How to build.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Cargo profile (the workspace defines `plugin`: size-optimized, panic=abort).
    pub profile: String,
    /// Cargo target directory for the WebAssembly build.
    pub target_dir: PathBuf,
    /// Where finished components are written (`<package>.wasm`).
    pub out_dir: PathBuf,
}

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
    // A build started from inside `cargo test` inherits cargo's variables; none of
    // them may leak into this unrelated build.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_MAKEFLAGS",
    ] {
        cmd.env_remove(var);
    }
    if toolchain == Toolchain::RustupTarget {
        cmd.env_remove("RUSTC");
    }
    cmd.arg("build")
        .arg("--manifest-path")
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
    std::fs::create_dir_all(&opts.out_dir).map_err(|source| BuildError::Io {
        path: opts.out_dir.display().to_string(),
        source,
    })?;
    let out = opts.out_dir.join(format!("{package}.wasm"));
    // Write then rename: concurrent builds (test processes) never see a torn file.
    let tmp = out.with_extension(format!("wasm.tmp{}", std::process::id()));
    let io = |source| BuildError::Io {
        path: out.display().to_string(),
        source,
    };
    std::fs::write(&tmp, component).map_err(io)?;
    std::fs::rename(&tmp, &out).map_err(io)?;
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

/// The component bytes of plugin `name` of the Forge workspace at `root` — a reference
/// policy under `plugins/` or a test fixture under `tests/fixtures/plugins/` — built
/// (if needed) with the `plugin` profile into `root/target/plugins`. For the
/// workspace's own tests and benchmarks. Built once per process (later calls return
/// the same bytes); callers in one process are serialized, cargo's own lock serializes
/// processes.
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
    let opts = BuildOptions {
        profile: "plugin".into(),
        target_dir: root.join("target/plugins"),
        out_dir: root.join("target/plugins/components"),
    };
    let path = build(&dir, &opts)?;
    let bytes = std::fs::read(&path).map_err(|source| BuildError::Io {
        path: path.display().to_string(),
        source,
    })?;
    built
        .get_or_insert_with(Built::new)
        .insert(key, bytes.clone());
    Ok(bytes)
}
