//! `forge`: the command-line client of the Forge gateway — login, submit a directory
//! (packed like the gateway packs it, uploaded in resumable chunks only when the
//! gateway lacks it), follow jobs and logs, manage policies — and the plugin
//! developer's loop (scaffold, build, run and bench in the gateway's own host).
//!
//! Data goes to stdout (`-o table|json|yaml`), progress and logs to stderr; errors
//! are one line, with the exit code of the contract in `exit.rs`.

mod api;
mod args;
mod cmd;
mod config;
mod exit;
mod follow;
mod output;
mod pack;
mod progress;
mod traceparent;
mod upload;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::exit::CliError;

/// mimalloc instead of glibc's malloc. Packing a capsule deflates each small file with a
/// new zlib-rs stream whose 64-byte-aligned buffers glibc's `memalign` does not reuse:
/// a capsule of 2 000 small files grew the heap by ~600 MiB (`cargo bench -p forge-capsule
/// --bench pack`, its peak-RSS part); mimalloc keeps it at ~25 MiB.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let debug = cli.global.debug;
    if !debug {
        // An internal error is one line, whatever RUST_BACKTRACE says.
        std::panic::set_hook(Box::new(|info| {
            let what = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            eprintln!("error: internal error: {what} (run with --debug for details)");
        }));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(exit::code::ERROR);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            if debug {
                let mut source = std::error::Error::source(&e);
                while let Some(s) = source {
                    eprintln!("  caused by: {s}");
                    source = s.source();
                }
                eprintln!("  {e:?}");
            }
            e.exit()
        }
    }
}

async fn run(cli: Cli) -> Result<u8, CliError> {
    let g = cli.global;
    let format = g.output;
    let client = || -> Result<api::Api, CliError> {
        api::Api::new(&config::resolve(g.url.clone(), g.token.clone())?)
    };
    match cli.command {
        Command::Login(args) => cmd::login::login(args, g.token.clone(), format).await,
        Command::Logout => cmd::login::logout(),
        Command::Whoami => cmd::login::whoami(&client()?, format).await,
        Command::Submit(args) => cmd::submit::submit(&client()?, args, format).await,
        Command::Jobs(args) => cmd::jobs::list(&client()?, args, format).await,
        Command::Status(args) => cmd::jobs::status(&client()?, args, format).await,
        Command::Logs(args) => cmd::logs::logs(&client()?, args, format).await,
        Command::Cancel(args) => cmd::jobs::cancel(&client()?, args, format).await,
        Command::Capacity => cmd::jobs::capacity(&client()?, format).await,
        Command::FairShare { command: None } => cmd::jobs::fair_share(&client()?, format).await,
        Command::FairShare { command: Some(c) } => {
            cmd::fair_share::run(&client()?, c, format).await
        }
        Command::Review(args) => cmd::jobs::review(&client()?, args, format).await,
        Command::Policy(c) => cmd::policy::run(&client()?, c, format).await,
        Command::Playground(c) => cmd::playground::run(&client()?, c, format).await,
        Command::Plugin(c) => cmd::plugin::run(c, client, format).await,
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "forge", &mut std::io::stdout());
            Ok(exit::code::OK)
        }
    }
}
