//! The command line (clap derive): global options, the commands and their help with
//! examples. Each command's own arguments live beside its code in `cmd/`.

use clap::{Args, Parser, Subcommand};

use crate::cmd::{jobs, login, logs, playground, plugin, policy, submit};
use crate::output::Format;

const AFTER_HELP: &str = "\
Examples:
  forge login https://forge.example.com         # store the URL and a token
  forge submit ./my-job -f job.yaml --follow     # pack, upload, follow, exit with the job's outcome
  forge jobs -w                                  # list and watch your team's jobs
  forge logs JOB -f --tail 100                   # stream a job's log
  forge plugin new my-policy                     # scaffold a policy plugin
  forge playground create --model M --gpus 1 --ttl 3600   # an inference server

Exit codes: 0 success (with --wait/--follow: the job succeeded), 1 error, 2 usage,
3 job failed, 4 job cancelled, 5 job timed out, 6 rejected by policy, 7 not found,
8 packing/upload failed, 9 not logged in or token refused, 10 gateway unreachable,
130 detached with Ctrl-C (the job keeps running).";

/// forge: submit and follow GPU training jobs on a Forge gateway, manage its
/// policies, and develop policy plugins.
#[derive(Debug, Parser)]
#[command(name = "forge", version, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Gateway URL (overrides `forge login`)
    #[arg(long, env = "FORGE_URL", global = true)]
    pub url: Option<String>,
    /// Bearer token (overrides `forge login`)
    #[arg(long, env = "FORGE_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// Output format of the data on stdout
    #[arg(short = 'o', long, value_enum, global = true, default_value_t = Format::Table)]
    pub output: Format,
    /// Show error details (error sources; backtraces of internal errors)
    #[arg(long, env = "FORGE_DEBUG", global = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub debug: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Store a gateway URL and token (checked first) in your config directory
    #[command(
        after_help = "Examples:\n  forge login https://forge.example.com            # asks for the token\n  echo \"$TOKEN\" | forge login http://127.0.0.1:8080"
    )]
    Login(login::LoginArgs),
    /// Forget the stored login
    Logout,
    /// Show who the token belongs to (team, role)
    Whoami,
    /// Pack a directory, upload it if the gateway lacks it, and submit a job
    Submit(submit::SubmitArgs),
    /// List jobs (newest first)
    #[command(
        after_help = "Examples:\n  forge jobs\n  forge jobs --state running -o json\n  forge jobs -w"
    )]
    Jobs(jobs::ListArgs),
    /// A job's state, history, queue standing, pending reason and decision trace
    #[command(after_help = "Examples:\n  forge status JOB\n  forge status JOB -w")]
    Status(jobs::StatusArgs),
    /// A job's log
    #[command(
        after_help = "Examples:\n  forge logs JOB\n  forge logs JOB -f\n  forge logs JOB --tail 20 --pod head"
    )]
    Logs(logs::LogsArgs),
    /// Cancel a job
    Cancel(jobs::CancelArgs),
    /// Live GPU capacity per series and your team's usage
    Capacity,
    /// Each team's share of each GPU series against its fair share (members: your
    /// team); `replay` orders the recorded dispatches again (admins)
    #[command(
        after_help = "Examples:\n  forge fair-share\n  forge fair-share replay --weight team-b=2"
    )]
    FairShare {
        #[command(subcommand)]
        command: Option<crate::cmd::fair_share::FairShareCommand>,
    },
    /// Dry-run admission: the decision and per-plugin trace for a job spec
    #[command(after_help = "Examples:\n  forge review -f job.yaml")]
    Review(jobs::ReviewArgs),
    /// Playgrounds: inference servers for a model on your team's GPUs
    #[command(subcommand)]
    Playground(playground::PlaygroundCommand),
    /// Admission policy chains: show, set, history, rollback, diff, shadow, replay
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Policy plugins: scaffold, build, run and bench locally, upload, list
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Shell completions
    #[command(
        after_help = "Examples:\n  forge completions bash > /etc/bash_completion.d/forge\n  forge completions zsh > \"${fpath[1]}/_forge\""
    )]
    Completions {
        /// The shell
        shell: clap_complete::Shell,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn limits_are_refused_outside_what_the_gateway_serves() {
        for (args, ok) in [
            (&["forge", "jobs", "--limit", "500"][..], true),
            (&["forge", "jobs", "--limit", "501"][..], false),
            (&["forge", "jobs", "--limit", "0"][..], false),
            (&["forge", "policy", "history", "--limit", "1000"][..], true),
            (
                &["forge", "policy", "history", "--limit", "1001"][..],
                false,
            ),
        ] {
            let parsed = Cli::try_parse_from(args);
            assert_eq!(parsed.is_ok(), ok, "{args:?}: {parsed:?}");
            if let Err(e) = parsed {
                assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{e}");
                assert!(e.to_string().contains("--limit"), "{e}");
            }
        }
    }
}
