//! The command lines of a plugin build and test — `forge-plugin build|test` and
//! `forge plugin build|test` parse the same [`BuildArgs`] / [`TestArgs`] (clap), so the
//! two cannot drift.

use std::path::PathBuf;

use crate::{BuildError, BuildOptions, Lang, PLUGIN_PROFILE, build, test};

/// Arguments of a plugin build.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// Plugin directories: a Rust crate, or a Python / TypeScript plugin with its
    /// `forge-plugin.toml` [default: the current directory]
    #[arg(value_name = "DIR")]
    pub crates: Vec<PathBuf>,
    /// The language (rust, python, ts), if not detected from the directory
    #[arg(long, value_name = "LANG")]
    pub lang: Option<Lang>,
    /// Where the finished components (`<name>.wasm`) are written
    #[arg(long, value_name = "DIR", default_value = "target/plugins/components")]
    pub out: PathBuf,
    /// Cargo profile of Rust plugins; `plugin` (size-optimized, LTO, panic=abort) is
    /// defined for crates that do not define it
    #[arg(long, value_name = "NAME", default_value = PLUGIN_PROFILE)]
    pub profile: String,
    /// Cargo target directory of Rust builds; Python/TypeScript builds cache in
    /// `<DIR>/sdk-cache`
    #[arg(long, value_name = "DIR", default_value = "target/plugins")]
    pub target_dir: PathBuf,
}

impl BuildArgs {
    /// Builds every plugin (the current directory when none is named); returns the
    /// components' paths.
    pub fn run(&self) -> Result<Vec<PathBuf>, BuildError> {
        let opts = BuildOptions {
            profile: self.profile.clone(),
            target_dir: self.target_dir.clone(),
            out_dir: self.out.clone(),
            lang: self.lang,
        };
        dirs_or_current(&self.crates)
            .iter()
            .map(|dir| build(dir, &opts))
            .collect()
    }
}

/// Arguments of a plugin's native test run.
#[derive(Debug, Clone, clap::Args)]
pub struct TestArgs {
    /// Plugin directories [default: the current directory]
    #[arg(value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The language (rust, python, ts), if not detected from the directory
    #[arg(long, value_name = "LANG")]
    pub lang: Option<Lang>,
    /// Where bundled TypeScript tests are written
    #[arg(long, value_name = "DIR", default_value = "target/plugins")]
    pub target_dir: PathBuf,
}

impl TestArgs {
    /// Runs the native tests of every plugin (`cargo test`, pytest, `node --test`).
    pub fn run(&self) -> Result<(), BuildError> {
        dirs_or_current(&self.dirs)
            .iter()
            .try_for_each(|dir| test(dir, self.lang, &self.target_dir))
    }
}

fn dirs_or_current(dirs: &[PathBuf]) -> Vec<PathBuf> {
    if dirs.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        dirs.to_vec()
    }
}
