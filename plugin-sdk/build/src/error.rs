//! Why a plugin could not be built or tested.

use thiserror::Error;

/// Why a plugin could not be built or tested. Callers (the `forge-plugin` and `forge`
/// command lines) print it; `ToolMissing` and `NoToolchain` say how to install.
#[derive(Debug, Error)]
pub enum BuildError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid manifest: {detail}")]
    Manifest { path: String, detail: String },
    #[error(
        "cannot tell the language of {dir}: expected Cargo.toml (rust), forge-plugin.toml \
         with `lang = \"python\"|\"ts\"`, or .py/.ts files; or pass --lang"
    )]
    UnknownLang { dir: String },
    #[error("unknown language `{0}`; expected rust, python or ts")]
    BadLang(String),
    #[error(
        "no WebAssembly toolchain: install the target (`rustup target add wasm32-unknown-unknown`) or, \
         where rustup cannot download it, Debian's `rustc-web cargo-web rust-web-src`"
    )]
    NoToolchain,
    #[error(
        "{tool} not found ({looked}); install the SDK toolchains with `bash plugin-sdk/install-toolchains.sh`"
    )]
    ToolMissing { tool: String, looked: String },
    #[error("the WIT contract is not usable: {0}")]
    Wit(String),
    #[error("cargo failed building {package} (exit {status}); its output is above")]
    Cargo { package: String, status: String },
    #[error("{tool} failed for {what} ({status}); its output is above")]
    Tool {
        tool: String,
        what: String,
        status: String,
    },
    #[error("componentizing {path} failed: {detail}")]
    Componentize { path: String, detail: String },
}

impl BuildError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        BuildError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}
