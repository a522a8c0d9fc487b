//! `forge-plugin`: build and test policy plugins in Rust, Python or TypeScript.
//!
//! ```text
//! forge-plugin build [--lang rust|python|ts] [--out DIR] [--profile NAME] [--target-dir DIR] <dir>...
//! forge-plugin test  [--lang rust|python|ts] [--target-dir DIR] <dir>...
//! ```

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use forge_plugin_build::{BuildOptions, Lang};

#[derive(Parser)]
#[command(name = "forge-plugin", about = "Build and test Forge policy plugins")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build plugin directories into WebAssembly components (prints each path).
    Build {
        /// The language, if not detected from the directory.
        #[arg(long)]
        lang: Option<Lang>,
        /// Where components are written.
        #[arg(long, default_value = "target/plugins/components")]
        out: PathBuf,
        /// Cargo profile of Rust plugins.
        #[arg(long, default_value = "plugin")]
        profile: String,
        /// Cargo target directory; Python/TypeScript builds cache in <DIR>/sdk-cache.
        #[arg(long, default_value = "target/plugins")]
        target_dir: PathBuf,
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Run plugin directories' native tests (cargo test, pytest, node --test).
    Test {
        #[arg(long)]
        lang: Option<Lang>,
        #[arg(long, default_value = "target/plugins")]
        target_dir: PathBuf,
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Cmd::Build {
            lang,
            out,
            profile,
            target_dir,
            dirs,
        } => {
            let opts = BuildOptions {
                profile,
                target_dir,
                out_dir: out,
                lang,
            };
            for dir in dirs {
                let out = forge_plugin_build::build(&dir, &opts)
                    .with_context(|| format!("building {}", dir.display()))?;
                println!("{}", out.display());
            }
        }
        Cmd::Test {
            lang,
            target_dir,
            dirs,
        } => {
            for dir in dirs {
                forge_plugin_build::test(&dir, lang, &target_dir)
                    .with_context(|| format!("testing {}", dir.display()))?;
            }
        }
    }
    Ok(())
}
