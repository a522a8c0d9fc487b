//! `forge submit [DIR] -f job.yaml [--wait | --follow]`:
//!
//! 1. dry-run admission (`POST /v1/admission/review`): a job the policy rejects is
//!    refused before anything is packed or uploaded, and the answer carries the spec
//!    bytes the gateway puts into a capsule;
//! 2. pack DIR with those bytes (`pack.rs`: the gateway's packer, ignore files,
//!    default exclusions; the file count, total size and largest files first);
//! 3. ask whether the team already has that capsule (`GET /v1/team-capsules/{sha}`)
//!    — if so nothing is uploaded — else upload it in resumable chunks;
//! 4. submit by digest (`POST /v1/jobs` `{"spec", "capsule"}`), then optionally wait
//!    for the outcome or follow states, the pending reason and the log.

use std::path::PathBuf;

use reqwest::Method;
use serde_json::{Value, json};

use crate::api::{Api, json};
use crate::exit::{CliError, code, for_state};
use crate::follow::{self, Ended, detachable};
use crate::output::{Format, bytes, emit, field};
use crate::pack;
use crate::progress::note;
use crate::upload;

/// Arguments of `forge submit`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  forge submit -f job.yaml                  # the current directory\n  forge submit ./train -f job.yaml --wait    # exit with the job's outcome\n  forge submit ./train -f job.yaml --follow  # states, pending reason, then the log\n\n.forgeignore and .gitignore are honoured; .git, virtualenvs and caches are never packed.\nAn interrupted upload resumes when the same command runs again."
)]
pub struct SubmitArgs {
    /// The code directory
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// The job spec (YAML, or JSON by `.json`)
    #[arg(short = 'f', long = "file", value_name = "JOB_YAML")]
    pub spec: PathBuf,
    /// Wait for the job to end; exit with its outcome
    #[arg(long, conflicts_with = "follow")]
    pub wait: bool,
    /// Follow the job: state changes and the pending reason, then its log; exit with
    /// its outcome
    #[arg(long)]
    pub follow: bool,
    /// Upload chunk size in MiB
    #[arg(long, value_name = "MIB", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub chunk_mib: u64,
}

/// `forge submit`.
pub async fn submit(api: &Api, args: SubmitArgs, format: Format) -> Result<u8, CliError> {
    let (doc, yaml) = super::read_doc(&args.spec)?;
    let content_type = if yaml {
        "application/yaml"
    } else {
        "application/json"
    };
    let review = api
        .send(
            api.request(Method::POST, "/v1/admission/review")
                .header("content-type", content_type)
                .body(doc),
        )
        .await?;
    let review: Value = crate::api::json(review).await?;
    if review["decision"]["kind"] == "reject" {
        return Err(CliError::Rejected(format!(
            "{}: {} (by {})",
            field(&review, "/decision/code"),
            field(&review, "/decision/message"),
            rejecting_plugin(&review)
        )));
    }
    let capsule_spec = review["capsuleSpec"]
        .as_str()
        .ok_or_else(|| {
            CliError::Local("the gateway's review has no capsuleSpec (an older gateway?)".into())
        })?
        .to_string();
    let spec: Value = serde_json::from_str(&capsule_spec)
        .map_err(|e| CliError::local("the gateway's capsule spec", e))?;

    let tree = pack::scan(&args.dir)?;
    let work = tempfile::Builder::new()
        .prefix("forge-submit-")
        .tempdir()
        .map_err(|e| CliError::local("a temporary directory", e))?;
    let capsule = tree.pack(capsule_spec.into_bytes(), work.path()).await?;
    let present = match api
        .send(api.request(
            Method::GET,
            &format!("/v1/team-capsules/{}", capsule.digest),
        ))
        .await
    {
        Ok(_) => true,
        Err(CliError::Api { status: 404, .. }) => false,
        Err(e) => return Err(e),
    };
    let digest = if present {
        note(format!(
            "the gateway already has capsule {} ({}): nothing to upload",
            capsule.digest,
            bytes(capsule.size)
        ));
        capsule.digest.clone()
    } else {
        upload::upload(
            api,
            &capsule.path,
            &capsule.digest,
            capsule.size,
            args.chunk_mib << 20,
        )
        .await?
    };
    drop(work);

    let id = post_job(api, format, &spec, &digest).await?;
    if !args.wait && !args.follow {
        return Ok(code::OK);
    }
    let ended = detachable(&id, async {
        if args.wait {
            return follow::watch(api, &id, Format::Table, false).await;
        }
        let watched = follow::watch(api, &id, format, true).await?;
        if watched.state == "rejected" {
            return Ok(watched);
        }
        // Running, or already over (a quick job): its log either way.
        let logged = follow::logs(api, &id, "name=driver", follow::Start::Offset(0), true).await?;
        Ok(logged.unwrap_or(watched))
    })
    .await?;
    outcome(&id, ended)
}

/// Submits the job naming its stored capsule, as a child of the caller's trace (its
/// `TRACEPARENT`, or a new one), and reports it; returns its id.
async fn post_job(
    api: &Api,
    format: Format,
    spec: &Value,
    digest: &str,
) -> Result<String, CliError> {
    // The job's trace hangs from this submission (the caller's TRACEPARENT, or new).
    let traceparent = crate::traceparent::for_submission();
    let job: Value = json(
        api.send(
            api.request(Method::POST, "/v1/jobs")
                .header("traceparent", &traceparent)
                .json(&json!({"spec": spec, "capsule": digest})),
        )
        .await?,
    )
    .await?;
    let id = field(&job, "/id");
    emit(format, &job, || {
        println!("{id}");
        let decision = field(&job, "/admission/decision/kind");
        note(format!(
            "submitted job {id} ({}, trace {}): {}; {decision} by policy {}{}",
            field(&job, "/name"),
            crate::traceparent::trace_id(&traceparent),
            field(&job, "/state"),
            field(&job, "/admission/policy"),
            job["reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ));
    })?;
    Ok(id)
}

fn rejecting_plugin(review: &Value) -> String {
    review["trace"]
        .as_array()
        .and_then(|t| t.iter().find(|e| e["outcome"] == "reject"))
        .map_or_else(|| "-".into(), |e| field(e, "/plugin"))
}

/// The exit code of a job that ended: 0 when it succeeded, else its state's code
/// (reported as an error line).
pub fn outcome(id: &str, ended: Ended) -> Result<u8, CliError> {
    note(format!("job {id} {}", ended.state));
    match for_state(&ended.state) {
        code::OK => Ok(code::OK),
        _ => Err(CliError::JobEnded {
            id: id.to_string(),
            state: ended.state,
            reason: ended.reason,
        }),
    }
}
