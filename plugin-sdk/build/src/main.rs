//! `forge-plugin build|test [DIR]...`: build policy plugins (Rust, Python or
//! TypeScript) into components and run their native tests. The same commands as
//! `forge plugin build|test` (both parse [`forge_plugin_build::cli`]); kept for the
//! workspace's scripts.

use clap::{Parser, Subcommand};
use forge_plugin_build::cli::{BuildArgs, TestArgs};

/// Build and test Forge policy plugins.
#[derive(Parser)]
#[command(
    name = "forge-plugin",
    version,
    about,
    after_help = "Examples:\n  forge-plugin build plugins/pool-series plugins/scratch-guard-py\n  forge-plugin build --out dist .\n  forge-plugin test plugins/scratch-guard-ts"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build plugins (each writes `<out>/<name>.wasm`; prints each path)
    Build(BuildArgs),
    /// Run plugins' native tests (cargo test, pytest, node --test)
    Test(TestArgs),
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Build(args) => args.run().map(|paths| {
            for p in paths {
                println!("{}", p.display());
            }
        }),
        Command::Test(args) => args.run(),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
