//! `forge plugin new | build | test | run | bench | upload | list`: the policy plugin
//! developer's loop, like `kwctl` for Kubewarden — scaffold a crate that builds
//! outside this repository, build it to a component, evaluate it on a request in the
//! gateway's own host (same checks, same limits), benchmark it, register it.

mod local;
mod registry;
mod scaffold;

use std::path::PathBuf;

use forge_plugin_build::cli::{BuildArgs, TestArgs};

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::output::Format;
use crate::progress::note;

/// The plugin commands.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Scaffold a plugin in Rust, Python or TypeScript (builds anywhere: the SDK and the
    /// contract are vendored)
    #[command(
        after_help = "Examples:\n  forge plugin new max-gpus\n  cd max-gpus && cargo test && forge plugin build && forge plugin run target/plugins/components/max-gpus.wasm --request request.json --settings settings.json\n  forge plugin new max-gpus --lang python   # or --lang ts\n  cd max-gpus && bash vendor/plugin-sdk/install-toolchains.sh python && forge plugin test && forge plugin build"
    )]
    New(scaffold::NewArgs),
    /// Build plugins (Rust, Python, TypeScript) into WebAssembly components
    #[command(
        after_help = "Examples:\n  forge plugin build                 # the plugin in the current directory\n  forge plugin build path/to/plugin --out dist"
    )]
    Build(BuildArgs),
    /// Run plugins' native tests (cargo test, pytest, node --test) with the SDK harness
    #[command(after_help = "Examples:\n  forge plugin test\n  forge plugin test path/to/plugin")]
    Test(TestArgs),
    /// Evaluate a component on a request, in the gateway's host with its limits
    #[command(
        after_help = "Examples:\n  forge plugin run my.wasm --request request.json --settings settings.json"
    )]
    Run(local::RunArgs),
    /// Measure a component's evaluation latency (p50/p99)
    #[command(
        after_help = "Examples:\n  forge plugin bench my.wasm --request request.json --settings settings.json --iterations 2000"
    )]
    Bench(local::BenchArgs),
    /// Register a component with the gateway (checked before it is stored)
    #[command(
        after_help = "Examples:\n  forge plugin upload my.wasm --name max-gpus --version 0.1.0 --settings settings.json\n  forge plugin upload my.wasm --name max-gpus --version 0.1.0 --scope global   # admins"
    )]
    Upload(registry::UploadArgs),
    /// The plugins you may use in a chain
    List {
        /// Another team's (admins)
        #[arg(long)]
        team: Option<String>,
    },
}

/// Runs a plugin command (`api` only for those that talk to the gateway).
pub async fn run(
    command: PluginCommand,
    api: impl FnOnce() -> Result<Api, CliError>,
    format: Format,
) -> Result<u8, CliError> {
    match command {
        PluginCommand::New(args) => scaffold::new(&args, format),
        PluginCommand::Build(args) => {
            let built: Vec<PathBuf> = tokio::task::spawn_blocking(move || args.run())
                .await
                .map_err(|e| CliError::local("building", e))?
                .map_err(|e| CliError::Local(e.to_string()))?;
            for path in built {
                note(format!("built {}", path.display()));
                println!("{}", path.display());
            }
            Ok(code::OK)
        }
        PluginCommand::Test(args) => {
            tokio::task::spawn_blocking(move || args.run())
                .await
                .map_err(|e| CliError::local("testing", e))?
                .map_err(|e| CliError::Local(e.to_string()))?;
            Ok(code::OK)
        }
        PluginCommand::Run(args) => local::run(args, format).await,
        PluginCommand::Bench(args) => local::bench(args, format).await,
        PluginCommand::Upload(args) => registry::upload(&api()?, args, format).await,
        PluginCommand::List { team } => registry::list(&api()?, team, format).await,
    }
}
