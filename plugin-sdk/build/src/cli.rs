//! The command line of a plugin build — `forge-plugin build` and `forge plugin build`
//! parse the same [`BuildArgs`] (clap), so the two cannot drift.

use std::path::PathBuf;

use crate::{BuildError, BuildOptions, build};

/// Arguments of a plugin build.
#[derive(Debug, Clone, clap::Args)]
pub struct BuildArgs {
    /// Plugin crate directories [default: the current directory]
    #[arg(value_name = "CRATE_DIR")]
    pub crates: Vec<PathBuf>,
    /// Where the finished components (`<package>.wasm`) are written
    #[arg(long, value_name = "DIR", default_value = "target/plugins/components")]
    pub out: PathBuf,
    /// Cargo profile; `plugin` (size-optimized, LTO, panic=abort) is defined for
    /// crates that do not define it
    #[arg(long, value_name = "NAME", default_value = "plugin")]
    pub profile: String,
    /// Cargo target directory of the WebAssembly build
    #[arg(long, value_name = "DIR", default_value = "target/plugins")]
    pub target_dir: PathBuf,
}

impl BuildArgs {
    /// Builds every crate (the current directory when none is named); returns the
    /// components' paths.
    pub fn run(&self) -> Result<Vec<PathBuf>, BuildError> {
        let opts = BuildOptions {
            profile: self.profile.clone(),
            target_dir: self.target_dir.clone(),
            out_dir: self.out.clone(),
        };
        let crates = if self.crates.is_empty() {
            vec![PathBuf::from(".")]
        } else {
            self.crates.clone()
        };
        crates.iter().map(|dir| build(dir, &opts)).collect()
    }
}
