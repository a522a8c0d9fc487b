//! `forge policy show | set -f chain.yaml | history | rollback | diff V1 V2 |
//! shadow start|status|stop | replay N -f chain.yaml` — the global chain (admins) or
//! a team's (`--team`, its members).
//!
//! A chain file is `plugins: [{name, version | digest, settings}]` with an optional
//! `comment`, or just the list.

use std::path::PathBuf;

use reqwest::Method;
use serde_json::{Value, json};

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::output::{Format, emit, field, table, time};
use crate::progress::note;

/// Which chain.
#[derive(Debug, Clone, clap::Args)]
pub struct ScopeArg {
    /// A team's chain instead of the global one
    #[arg(long)]
    pub team: Option<String>,
}

impl ScopeArg {
    fn query(&self) -> String {
        self.team
            .as_ref()
            .map(|t| format!("?team={t}"))
            .unwrap_or_default()
    }

    fn key(&self) -> &'static str {
        if self.team.is_some() {
            "team"
        } else {
            "global"
        }
    }
}

/// The policy commands.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// The active global chain and your team's
    Show(ScopeArg),
    /// Replace a chain (built and checked before an atomic swap)
    #[command(
        after_help = "Examples:\n  forge policy set -f chain.yaml --comment 'stricter quota'\n  forge policy set --team vision -f team-chain.yaml\n  forge policy set -f chain.yaml --dry-run --replay 500"
    )]
    Set(SetArgs),
    /// Versions of a chain: who, when, what
    History {
        #[command(flatten)]
        scope: ScopeArg,
        /// At most this many, newest first (1..=1000)
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
    /// Activate the previous (or a given) version's chain as a new version
    Rollback {
        #[command(flatten)]
        scope: ScopeArg,
        /// The version to return to [default: the previous one]
        #[arg(long)]
        to: Option<u64>,
        #[arg(long, default_value = "")]
        comment: String,
    },
    /// What changed between two versions of a chain
    Diff {
        /// The older version
        v1: u64,
        /// The newer version
        v2: u64,
        #[command(flatten)]
        scope: ScopeArg,
    },
    /// Shadow a candidate global chain on real submissions (never enforced)
    #[command(subcommand)]
    Shadow(ShadowCommand),
    /// Replay a candidate chain against the last N decisions (changes nothing)
    Replay {
        /// How many recorded decisions
        n: u32,
        /// The candidate chain
        #[arg(short = 'f', long = "file")]
        chain: PathBuf,
        #[command(flatten)]
        scope: ScopeArg,
    },
}

/// Arguments of `forge policy set`.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The chain file (YAML, or JSON by `.json`)
    #[arg(short = 'f', long = "file")]
    pub chain: PathBuf,
    #[command(flatten)]
    pub scope: ScopeArg,
    /// Why (recorded in the history)
    #[arg(long)]
    pub comment: Option<String>,
    /// The version you expect to replace [default: the current one]
    #[arg(long)]
    pub expected_version: Option<u64>,
    /// Check and replay only; activate nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Replay the chain against the last N decisions first
    #[arg(long, value_name = "N")]
    pub replay: Option<u32>,
}

/// The shadow-mode commands.
#[derive(Debug, clap::Subcommand)]
pub enum ShadowCommand {
    /// Start shadowing a candidate chain
    Start {
        #[arg(short = 'f', long = "file")]
        chain: PathBuf,
        #[arg(long, default_value = "")]
        comment: String,
    },
    /// Agreement so far and the differing cases
    Status,
    /// Stop shadowing (prints the final report)
    Stop,
}

/// The links and comment of a chain file.
/// A chain file: its plugins, comment and (global chain) fair-share settings.
struct ChainFile {
    plugins: Value,
    comment: Option<String>,
    fair_share: Option<Value>,
}

fn read_chain(path: &std::path::Path) -> Result<ChainFile, CliError> {
    let doc = super::read_value(path)?;
    match doc {
        Value::Array(_) => Ok(ChainFile {
            plugins: doc,
            comment: None,
            fair_share: None,
        }),
        Value::Object(mut m) => {
            let plugins = m.remove("plugins").ok_or_else(|| {
                CliError::Usage(format!(
                    "{}: a chain file has `plugins: [...]`",
                    path.display()
                ))
            })?;
            let comment = m
                .remove("comment")
                .and_then(|c| c.as_str().map(str::to_string));
            Ok(ChainFile {
                plugins,
                comment,
                fair_share: m.remove("fairShare"),
            })
        }
        _ => Err(CliError::Usage(format!(
            "{}: a chain file is a list of plugins or `plugins: [...]`",
            path.display()
        ))),
    }
}

fn links(links: &Value) -> String {
    links
        .as_array()
        .map(|l| {
            l.iter()
                .map(|p| format!("{}@{}", field(p, "/name"), field(p, "/version")))
                .collect::<Vec<_>>()
                .join(" → ")
        })
        .unwrap_or_default()
}

fn print_scope(v: &Value) {
    println!("{} version {}", field(v, "/scope"), field(v, "/version"));
    let plugins = v["plugins"].as_array().cloned().unwrap_or_default();
    let rows = plugins.iter().enumerate().map(|(i, p)| {
        vec![
            (i + 1).to_string(),
            field(p, "/name"),
            field(p, "/version"),
            field(p, "/digest").chars().take(19).collect(),
            p["settings"].to_string(),
        ]
    });
    println!(
        "{}",
        table(&["#", "PLUGIN", "VERSION", "DIGEST", "SETTINGS"], rows)
    );
    if let Some(weights) = v.pointer("/fairShare/weights").and_then(Value::as_object) {
        let weights: Vec<String> = weights.iter().map(|(t, w)| format!("{t}={w}")).collect();
        println!("fair-share weights: {} (others 1)", weights.join(", "));
    }
}

/// The current version of a scope.
async fn current_version(api: &Api, scope: &ScopeArg) -> Result<u64, CliError> {
    let policy: Value = api.get(&format!("/v1/policy{}", scope.query())).await?;
    Ok(policy[scope.key()]["version"].as_u64().unwrap_or(0))
}

/// Runs a policy command.
pub async fn run(api: &Api, command: PolicyCommand, format: Format) -> Result<u8, CliError> {
    match command {
        PolicyCommand::Show(scope) => {
            let policy: Value = api.get(&format!("/v1/policy{}", scope.query())).await?;
            emit(format, &policy, || {
                print_scope(&policy["global"]);
                println!();
                print_scope(&policy["team"]);
            })?;
        }
        PolicyCommand::Set(args) => set(api, args, format).await?,
        PolicyCommand::History { scope, limit } => {
            let sep = if scope.team.is_some() { '&' } else { '?' };
            let history: Value = api
                .get(&format!(
                    "/v1/policy/history{}{sep}limit={limit}",
                    scope.query()
                ))
                .await?;
            emit(format, &history, || {
                let versions = history["versions"].as_array().cloned().unwrap_or_default();
                let rows = versions.iter().map(|v| {
                    vec![
                        field(v, "/version"),
                        field(v, "/fromVersion"),
                        field(v, "/action"),
                        field(v, "/author"),
                        v["atMs"].as_i64().map_or_else(|| "-".into(), time),
                        links(&v["plugins"]),
                        field(v, "/comment"),
                    ]
                });
                println!(
                    "{}",
                    table(
                        &[
                            "VERSION", "FROM", "ACTION", "AUTHOR", "TIME", "CHAIN", "COMMENT"
                        ],
                        rows
                    )
                );
            })?;
        }
        PolicyCommand::Rollback { scope, to, comment } => {
            let mut body = json!({"comment": comment});
            if let Some(v) = to {
                body["toVersion"] = json!(v);
            }
            let done: Value = api
                .call(
                    Method::POST,
                    &format!("/v1/policy/rollback{}", scope.query()),
                    &body,
                )
                .await?;
            emit(format, &done, || {
                note(format!(
                    "{} is now version {} (the chain of version {})",
                    field(&done, "/scope"),
                    field(&done, "/version"),
                    to.map_or_else(|| "before".into(), |v| v.to_string())
                ));
            })?;
        }
        PolicyCommand::Diff { v1, v2, scope } => diff(api, v1, v2, &scope, format).await?,
        PolicyCommand::Shadow(c) => shadow(api, c, format).await?,
        PolicyCommand::Replay { n, chain, scope } => {
            let plugins = read_chain(&chain)?.plugins;
            let expected = current_version(api, &scope).await?;
            let body = json!({"expectedVersion": expected, "plugins": plugins, "replay": n, "dryRun": true});
            let report: Value = api
                .call(Method::PUT, &format!("/v1/policy{}", scope.query()), &body)
                .await?;
            emit(format, &report, || print_replay(&report["replay"]))?;
        }
    }
    Ok(code::OK)
}

fn print_replay(r: &Value) {
    println!(
        "replayed {} decisions: {} would change",
        field(r, "/compared"),
        field(r, "/changed")
    );
    let diffs = r["differences"].as_array().cloned().unwrap_or_default();
    if !diffs.is_empty() {
        let rows = diffs.iter().map(|d| {
            vec![
                field(d, "/jobId"),
                field(d, "/team"),
                field(d, "/recorded"),
                field(d, "/candidate"),
            ]
        });
        println!("{}", table(&["JOB", "TEAM", "RECORDED", "CANDIDATE"], rows));
    }
}

async fn set(api: &Api, args: SetArgs, format: Format) -> Result<(), CliError> {
    let file = read_chain(&args.chain)?;
    let expected = match args.expected_version {
        Some(v) => v,
        None => current_version(api, &args.scope).await?,
    };
    let mut body = json!({
        "expectedVersion": expected,
        "plugins": file.plugins,
        "comment": args.comment.or(file.comment).unwrap_or_default(),
        "dryRun": args.dry_run,
    });
    if let Some(f) = file.fair_share {
        body["fairShare"] = f;
    }
    if let Some(n) = args.replay {
        body["replay"] = json!(n);
    }
    let answer: Value = api
        .call(
            Method::PUT,
            &format!("/v1/policy{}", args.scope.query()),
            &body,
        )
        .await?;
    emit(format, &answer, || {
        if !answer["replay"].is_null() {
            print_replay(&answer["replay"]);
        }
        if let Some(a) = answer.get("activated") {
            note(format!(
                "activated {} version {} ({} ms)",
                field(a, "/scope"),
                field(a, "/version"),
                field(a, "/activationMs")
            ));
        } else {
            note("dry run: nothing activated");
        }
    })?;
    Ok(())
}

async fn diff(
    api: &Api,
    v1: u64,
    v2: u64,
    scope: &ScopeArg,
    format: Format,
) -> Result<(), CliError> {
    let sep = if scope.team.is_some() { '&' } else { '?' };
    let history: Value = api
        .get(&format!(
            "/v1/policy/history{}{sep}limit=1000",
            scope.query()
        ))
        .await?;
    let versions = history["versions"].as_array().cloned().unwrap_or_default();
    let find = |v: u64| {
        versions
            .iter()
            .find(|x| x["version"].as_u64() == Some(v))
            .cloned()
            .ok_or_else(|| CliError::Api {
                status: 404,
                code: "not-found".into(),
                message: format!("{} has no version {v}", field(&history, "/scope")),
            })
    };
    let (a, b) = (find(v1)?, find(v2)?);
    let render = |v: &Value| -> Result<String, CliError> {
        serde_saphyr::to_string(&v["plugins"]).map_err(|e| CliError::local("YAML", e))
    };
    let (ta, tb) = (render(&a)?, render(&b)?);
    let text = similar::TextDiff::from_lines(&ta, &tb)
        .unified_diff()
        .header(&format!("version {v1}"), &format!("version {v2}"))
        .to_string();
    emit(format, &json!({"from": a, "to": b, "diff": text}), || {
        if text.is_empty() {
            println!("versions {v1} and {v2} have the same chain");
        } else {
            print!("{text}");
        }
    })
}

async fn shadow(api: &Api, command: ShadowCommand, format: Format) -> Result<(), CliError> {
    let report: Value = match command {
        ShadowCommand::Start { chain, comment } => {
            let file = read_chain(&chain)?;
            let comment = if comment.is_empty() {
                file.comment.unwrap_or_default()
            } else {
                comment
            };
            api.call(
                Method::PUT,
                "/v1/policy/shadow",
                &json!({"plugins": file.plugins, "comment": comment}),
            )
            .await?
        }
        ShadowCommand::Status => api.get("/v1/policy/shadow").await?,
        ShadowCommand::Stop => {
            let resp = api
                .send(api.request(Method::DELETE, "/v1/policy/shadow"))
                .await?;
            crate::api::json(resp).await?
        }
    };
    emit(format, &report, || {
        if report["active"] == false && report["candidate"].is_null() {
            println!("no shadow candidate");
            return;
        }
        println!(
            "candidate {} ({}): {}",
            field(&report, "/candidate/id"),
            if report["active"] == true {
                "active"
            } else {
                "stopped"
            },
            links(&report["candidate"]["plugins"])
        );
        println!(
            "compared {}, agreed {}, agreement {}",
            field(&report, "/compared"),
            field(&report, "/agreed"),
            report["agreementRate"]
                .as_f64()
                .map_or_else(|| "-".into(), |r| format!("{:.1}%", r * 100.0))
        );
        let diffs = report["differences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !diffs.is_empty() {
            let rows = diffs.iter().map(|d| {
                vec![
                    field(d, "/jobId"),
                    field(d, "/live"),
                    field(d, "/candidate"),
                ]
            });
            println!("{}", table(&["JOB", "LIVE", "CANDIDATE"], rows));
        }
    })
}
