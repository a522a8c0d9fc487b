//! Where the Python and TypeScript SDKs, their toolchains and the WIT contract live, and
//! which contract version they build against.
//!
//! - The SDK directory is `FORGE_SDK_DIR` if set; else, for a plugin scaffolded by
//!   `forge plugin new --lang python|ts`, the copy vendored into it
//!   (`<plugin>/vendor/plugin-sdk`, next to `<plugin>/vendor/wit`: the same layout as
//!   this repository, so the plugin builds and tests without the repository); else
//!   `plugin-sdk/` of the workspace this crate was built from. The workspace (the SDK
//!   directory's parent) holds `wit/` and, under `target/sdk/`, the toolchains
//!   `plugin-sdk/install-toolchains.sh` installs (a Python venv with componentize-py,
//!   dacite and pytest; the npm packages in `plugin-sdk/js/node_modules`).
//! - The contract is **one setting**: `wit` in `plugin-sdk/sdk.toml` (a folder under
//!   `wit/`; without it, the newest `wit/policy@*` folder).
//! - Tools are found at `FORGE_PYTHON_VENV` (the whole Python toolchain: a venv with
//!   componentize-py, dacite and pytest), `FORGE_COMPONENTIZE_PY` (that one binary) and
//!   `FORGE_NODE_MODULES` if set — one installation shared by many plugins — else in the
//!   workspace's install locations, else (componentize-py, python3) on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::BuildError;

/// The SDK's locations and contract.
#[derive(Debug, Clone)]
pub struct Sdk {
    /// `plugin-sdk/`.
    pub dir: PathBuf,
    /// The workspace root (parent of `plugin-sdk/`).
    pub workspace: PathBuf,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SdkSettings {
    wit: Option<String>,
}

impl Sdk {
    /// The SDK at `FORGE_SDK_DIR`, else the one this crate was built from.
    pub fn locate() -> Sdk {
        let dir = std::env::var_os("FORGE_SDK_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."));
        Sdk::at(&dir)
    }

    /// The SDK a plugin in `plugin_dir` builds with: `FORGE_SDK_DIR`, else the SDK
    /// vendored into the plugin (`vendor/plugin-sdk`, by `forge plugin new`), else the
    /// one this crate was built from.
    pub fn for_plugin(plugin_dir: &Path) -> Sdk {
        if std::env::var_os("FORGE_SDK_DIR").is_none() {
            let vendored = plugin_dir.join(VENDORED);
            if vendored.join("sdk.toml").is_file() {
                return Sdk::at(&vendored);
            }
        }
        Sdk::locate()
    }

    /// The SDK in directory `dir` (`<workspace>/plugin-sdk`).
    pub fn at(dir: &Path) -> Sdk {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let workspace = dir.parent().map_or_else(|| dir.clone(), Path::to_path_buf);
        Sdk { dir, workspace }
    }

    /// Where the SDK toolchains and generated bindings live (`<workspace>/target/sdk`).
    pub fn tools_dir(&self) -> PathBuf {
        self.workspace.join("target/sdk")
    }

    /// The contract folder (`wit/policy@X.Y.Z`) to build against: `plugin-sdk/sdk.toml`'s
    /// `wit`, else the newest `wit/policy@*`.
    pub fn wit_dir(&self) -> Result<PathBuf, BuildError> {
        let name = self.configured_wit()?;
        let wit_root = self.workspace.join("wit");
        let name = match name {
            Some(n) => n,
            None => newest_policy_folder(&wit_root)?,
        };
        let dir = wit_root.join(&name);
        if !dir.is_dir() {
            return Err(BuildError::Wit(format!("{} does not exist", dir.display())));
        }
        Ok(dir)
    }

    fn configured_wit(&self) -> Result<Option<String>, BuildError> {
        let path = self.dir.join("sdk.toml");
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|e| BuildError::io(&path, e))?;
        let s: SdkSettings = toml::from_str(&text).map_err(|e| BuildError::Manifest {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        Ok(s.wit)
    }

    /// The Python venv of the toolchain: `FORGE_PYTHON_VENV`, else `target/sdk/python`.
    pub fn python_venv(&self) -> PathBuf {
        std::env::var_os("FORGE_PYTHON_VENV")
            .map_or_else(|| self.tools_dir().join("python"), PathBuf::from)
    }

    /// `componentize-py`: `FORGE_COMPONENTIZE_PY`, the venv's, else on `PATH`.
    pub fn componentize_py(&self) -> Result<PathBuf, BuildError> {
        find_tool(
            "componentize-py",
            std::env::var_os("FORGE_COMPONENTIZE_PY").map(PathBuf::from),
            self.python_venv().join("bin/componentize-py"),
        )
    }

    /// The Python that runs plugin tests (the venv's, with pytest and dacite).
    pub fn python(&self) -> Result<PathBuf, BuildError> {
        find_tool("python3", None, self.python_venv().join("bin/python"))
    }

    /// `site-packages` directories of the venv (bundled into components: dacite).
    pub fn python_site_packages(&self) -> Vec<PathBuf> {
        let lib = self.python_venv().join("lib");
        let mut out: Vec<PathBuf> = std::fs::read_dir(&lib)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
        out.sort();
        out
    }

    /// The Python SDK package directory (holds `forge_policy/`).
    pub fn python_sdk(&self) -> PathBuf {
        self.dir.join("python")
    }

    /// The TypeScript SDK directory (holds `src/` and `node_modules/`).
    pub fn js_sdk(&self) -> PathBuf {
        self.dir.join("js")
    }

    /// `node_modules` with jco, componentize-js, esbuild, typescript and zod.
    pub fn node_modules(&self) -> Result<PathBuf, BuildError> {
        let dir = std::env::var_os("FORGE_NODE_MODULES")
            .map(PathBuf::from)
            .unwrap_or_else(|| self.js_sdk().join("node_modules"));
        if dir.join(".bin").is_dir() {
            Ok(dir)
        } else {
            Err(BuildError::ToolMissing {
                tool: "the TypeScript SDK's npm packages".into(),
                looked: dir.display().to_string(),
            })
        }
    }

    /// A binary of an npm package (`node_modules/.bin/<name>`).
    pub fn npm_bin(&self, name: &str) -> Result<PathBuf, BuildError> {
        let bin = self.node_modules()?.join(".bin").join(name);
        if bin.exists() {
            Ok(bin)
        } else {
            Err(BuildError::ToolMissing {
                tool: name.into(),
                looked: bin.display().to_string(),
            })
        }
    }
}

/// Where `forge plugin new` vendors the SDK into a Python or TypeScript plugin.
pub const VENDORED: &str = "vendor/plugin-sdk";

/// The newest `policy@X.Y.Z` folder under `wit/` (by numeric version).
fn newest_policy_folder(wit_root: &Path) -> Result<String, BuildError> {
    let entries = std::fs::read_dir(wit_root).map_err(|e| BuildError::io(wit_root, e))?;
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.strip_prefix("policy@")?;
            let parts: Option<Vec<u64>> = version.split('.').map(|p| p.parse().ok()).collect();
            Some((parts?, name))
        })
        .max()
        .map(|(_, name)| name)
        .ok_or_else(|| BuildError::Wit(format!("no policy@* folder in {}", wit_root.display())))
}

/// The tool at `explicit`, else at `installed`, else `name` if it runs from `PATH`.
fn find_tool(
    name: &str,
    explicit: Option<PathBuf>,
    installed: PathBuf,
) -> Result<PathBuf, BuildError> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    if installed.exists() {
        return Ok(installed);
    }
    let on_path = Command::new(name)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Ok(PathBuf::from(name));
    }
    Err(BuildError::ToolMissing {
        tool: name.into(),
        looked: format!("{} and PATH", installed.display()),
    })
}

/// Run a prepared command, inheriting output; a failure names the tool and the target.
pub(crate) fn run(mut cmd: Command, tool: &str, what: &str) -> Result<(), BuildError> {
    let status = cmd.status().map_err(|source| BuildError::Io {
        path: tool.to_string(),
        source,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(BuildError::Tool {
            tool: tool.into(),
            what: what.into(),
            status: status.to_string(),
        })
    }
}

/// Write `bytes` to `path` through a temporary file and a rename, so concurrent builds
/// (test processes) never see a torn file.
/// The contract version of a `wit/policy@X.Y.Z` folder (`X.Y.Z`).
pub(crate) fn wit_version(wit: &Path) -> Result<String, BuildError> {
    wit.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("policy@"))
        .map(str::to_string)
        .ok_or_else(|| BuildError::Wit(format!("{} is not a policy@X.Y.Z folder", wit.display())))
}

pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| BuildError::io(parent, e))?;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp{}.{seq}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| BuildError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| BuildError::io(path, e))
}
