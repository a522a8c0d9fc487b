//! `forge-plugin build [CRATE_DIR]...`: build policy plugin crates into components.
//! The same command as `forge plugin build` (both parse
//! [`forge_plugin_build::cli::BuildArgs`]); kept for the workspace's scripts.

use clap::{Parser, Subcommand};
use forge_plugin_build::cli::BuildArgs;

/// Build Forge policy plugin crates into WebAssembly components.
#[derive(Parser)]
#[command(
    name = "forge-plugin",
    version,
    about,
    after_help = "Examples:\n  forge-plugin build plugins/pool-series\n  forge-plugin build --out dist ."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build plugin crates (each writes `<out>/<package>.wasm`)
    Build(BuildArgs),
}

fn main() -> std::process::ExitCode {
    let Command::Build(args) = Cli::parse().command;
    match args.run() {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
