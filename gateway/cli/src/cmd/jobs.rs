//! `forge jobs [-w]`, `forge status ID [-w]`, `forge cancel ID`, `forge capacity`,
//! `forge fair-share`, `forge review -f job.yaml`.

use std::path::PathBuf;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::Method;
use serde_json::Value;

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::follow::{self, detachable};
use crate::output::{Format, emit, field, table, time};
use crate::progress::note;

/// Arguments of `forge jobs`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only jobs in this state (queued, running, succeeded, …)
    #[arg(long)]
    pub state: Option<String>,
    /// Another team's jobs (admins)
    #[arg(long)]
    pub team: Option<String>,
    /// At most this many (1..=500, the gateway's page)
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: u32,
    /// Keep watching: print each change as it happens (Ctrl-C stops)
    #[arg(short = 'w', long)]
    pub watch: bool,
}

fn job_rows(jobs: &[Value]) -> Vec<Vec<String>> {
    jobs.iter()
        .map(|j| {
            let mut why = j
                .pointer("/queue/reason")
                .or_else(|| j.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_string();
            if let Some(s) = j
                .pointer("/queue/standing/sentence")
                .and_then(Value::as_str)
            {
                why = format!("{why}; {s}");
            }
            vec![
                field(j, "/id"),
                field(j, "/name"),
                field(j, "/team"),
                field(j, "/state"),
                j["createdAtMs"].as_i64().map_or_else(|| "-".into(), time),
                why,
            ]
        })
        .collect()
}

/// `forge jobs`.
pub async fn list(api: &Api, args: ListArgs, format: Format) -> Result<u8, CliError> {
    let mut query = format!("/v1/jobs?limit={}", args.limit);
    if let Some(s) = &args.state {
        query.push_str(&format!("&state={s}"));
    }
    if let Some(t) = &args.team {
        query.push_str(&format!("&team={t}"));
    }
    let page: Value = api.get(&query).await?;
    let jobs = page["jobs"].as_array().cloned().unwrap_or_default();
    emit(format, &page, || {
        println!(
            "{}",
            table(
                &["ID", "NAME", "TEAM", "STATE", "SUBMITTED", "REASON"],
                job_rows(&jobs)
            )
        );
    })?;
    if !args.watch {
        return Ok(code::OK);
    }
    let path = match &args.team {
        Some(t) => format!("/v1/jobs/watch?team={t}"),
        None => "/v1/jobs/watch".into(),
    };
    detachable("(list)", async {
        let resp = api
            .send(
                api.request(Method::GET, &path)
                    .header("accept", "text/event-stream"),
            )
            .await?;
        let mut events = resp.bytes_stream().eventsource();
        while let Some(Ok(event)) = events.next().await {
            let data = follow::event_data(format, &event)?;
            if format.is_data() {
                continue;
            }
            match event.event.as_str() {
                "resync" => note("(missed changes; run `forge jobs` again)"),
                name => {
                    if let Some(line) = follow::describe(name, &data) {
                        println!("{line}");
                    }
                }
            }
        }
        Ok(code::OK)
    })
    .await
    .or_else(|e| match e {
        CliError::Detached(_) => Ok(code::OK),
        other => Err(other),
    })
}

/// Arguments of `forge status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The job's id
    pub id: String,
    /// Keep watching until the job ends (exit with its outcome)
    #[arg(short = 'w', long)]
    pub watch: bool,
}

/// A job's preemptions and runs, when it was preempted.
fn print_preemptions(job: &Value) {
    let Some(preemptions) = job["preemptions"].as_array().filter(|p| !p.is_empty()) else {
        return;
    };
    println!(
        "attempt   {} (earlier runs: forge logs {} --attempt N)",
        field(job, "/attempt"),
        field(job, "/id")
    );
    println!("\npreemptions:");
    let ms = |v: &Value| v.as_i64().map_or_else(|| "-".into(), time);
    let rows = preemptions.iter().map(|p| {
        vec![
            field(p, "/attempt"),
            ms(&p["atMs"]),
            field(p, "/byJob"),
            format!("{}s", p["noticeMs"].as_i64().unwrap_or(0) / 1000),
            ms(&p["releasedMs"]),
            p["releasedBy"].as_str().unwrap_or("-").to_string(),
            p["checkpointStep"]
                .as_u64()
                .map_or_else(|| "-".into(), |s| s.to_string()),
            p["lostGpuSeconds"]
                .as_f64()
                .map_or_else(|| "-".into(), |l| format!("{l:.0}")),
        ]
    });
    println!(
        "{}",
        table(
            &[
                "ATTEMPT",
                "AT",
                "BY JOB",
                "GRACE",
                "RELEASED",
                "HOW",
                "RESUME STEP",
                "LOST GPU·S"
            ],
            rows
        )
    );
}

fn print_status(job: &Value) {
    println!("job       {}", field(job, "/id"));
    println!("name      {}", field(job, "/name"));
    println!("team      {}", field(job, "/team"));
    if job["observed"] == "unknown" {
        println!(
            "state     unknown (last seen {}: its fleet does not answer)",
            field(job, "/state")
        );
    } else {
        println!("state     {}", field(job, "/state"));
    }
    if let Some(f) = job["fleet"].as_str() {
        println!("fleet     {f}");
    }
    if let Some(t) = job.get("terms") {
        let protection = if t["preemptible"] == false {
            "protected from preemption"
        } else {
            "preemptible"
        };
        let borrowed = t["borrowedGpus"]
            .as_u64()
            .map(|n| format!(", {n} GPUs borrowed beyond the team's guarantee"))
            .unwrap_or_default();
        println!(
            "terms     priority {}, {protection}{borrowed}",
            field(t, "/priority")
        );
    }
    if let Some(r) = job["reason"].as_str() {
        println!("reason    {r}");
    }
    if let Some(q) = job.get("queue") {
        println!(
            "queue     #{} in {} — {}: {}",
            field(q, "/position"),
            field(q, "/series"),
            field(q, "/code"),
            field(q, "/reason")
        );
        if let Some(s) = q.pointer("/standing/sentence").and_then(Value::as_str) {
            println!("standing  {s}");
        }
    }
    if let Some(p) = job.get("pending") {
        println!(
            "pending   {}: {} ({})",
            field(p, "/code"),
            field(p, "/message"),
            field(p, "/object")
        );
    }
    println!("capsule   {}", field(job, "/capsuleSha256"));
    if let Some(c) = job.get("lastCheckpoint").filter(|c| c.is_object()) {
        println!(
            "checkpoint step {} at {}",
            field(c, "/step"),
            c["atMs"].as_i64().map_or_else(|| "-".into(), time)
        );
    }
    print_preemptions(job);
    if let Some(history) = job["history"].as_array() {
        println!("\nhistory:");
        let rows = history.iter().map(|h| {
            vec![
                h["atMs"].as_i64().map_or_else(|| "-".into(), time),
                field(h, "/from"),
                field(h, "/to"),
                field(h, "/reason"),
            ]
        });
        println!("{}", table(&["TIME", "FROM", "TO", "REASON"], rows));
    }
    if let Some(decisions) = job["decisions"].as_array() {
        println!("\ndecisions:");
        for d in decisions {
            println!(
                "{}  {} by {}{}",
                d["atMs"].as_i64().map_or_else(|| "-".into(), time),
                field(d, "/kind"),
                field(d, "/chainVersion"),
                d["code"]
                    .as_str()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            );
            if let Some(trace) = d["plugins"]
                .as_array()
                .or_else(|| d.pointer("/plugins/trace").and_then(Value::as_array))
            {
                println!("{}", trace_table(trace));
            }
        }
    }
}

/// A decision's kind, and its code and message if it has them.
pub fn print_decision(d: &Value) {
    println!(
        "decision  {}{}",
        field(d, "/kind"),
        d["code"]
            .as_str()
            .map(|c| format!(" {c}: {}", field(d, "/message")))
            .unwrap_or_default()
    );
}

/// A per-plugin trace as a table.
pub fn trace_table(trace: &[Value]) -> String {
    let rows = trace.iter().map(|t| {
        let detail = t
            .pointer("/decision/code")
            .or_else(|| t.get("error"))
            .and_then(Value::as_str)
            .unwrap_or("-")
            .to_string();
        vec![
            field(t, "/plugin"),
            field(t, "/version"),
            field(t, "/outcome"),
            detail,
            format!("{} µs", field(t, "/elapsedUs")),
        ]
    });
    table(&["PLUGIN", "VERSION", "OUTCOME", "CODE", "TIME"], rows)
}

/// `forge status`.
pub async fn status(api: &Api, args: StatusArgs, format: Format) -> Result<u8, CliError> {
    let job: Value = api.get(&format!("/v1/jobs/{}", args.id)).await?;
    emit(format, &job, || print_status(&job))?;
    if !args.watch {
        return Ok(code::OK);
    }
    let ended = detachable(&args.id, follow::watch(api, &args.id, format, false)).await?;
    super::submit::outcome(&args.id, ended)
}

/// Arguments of `forge cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The job's id
    pub id: String,
}

/// `forge cancel`.
pub async fn cancel(api: &Api, args: CancelArgs, format: Format) -> Result<u8, CliError> {
    let resp = api
        .send(api.request(Method::DELETE, &format!("/v1/jobs/{}", args.id)))
        .await?;
    let job: Value = crate::api::json(resp).await?;
    emit(format, &job, || {
        println!("{} {}", field(&job, "/id"), field(&job, "/state"));
    })?;
    Ok(code::OK)
}

/// `forge capacity`.
/// `forge fair-share`: each team's share of each series against its fair share
/// (members: their own team's rows).
pub async fn fair_share(api: &Api, format: Format) -> Result<u8, CliError> {
    let shares: Value = api.get("/v1/fair-share").await?;
    emit(format, &shares, || {
        let gpus = |v: &Value, p: &str| {
            v.pointer(p)
                .and_then(Value::as_f64)
                .map_or_else(|| "-".into(), |g| format!("{g:.1}"))
        };
        let series = shares["series"].as_array().cloned().unwrap_or_default();
        let rows = series.iter().flat_map(|s| {
            let teams = s["teams"].as_array().cloned().unwrap_or_default();
            let name = field(s, "/series");
            teams.into_iter().map(move |t| {
                vec![
                    name.clone(),
                    field(&t, "/team"),
                    t["weight"]
                        .as_f64()
                        .map_or_else(|| "-".into(), |w| w.to_string()),
                    gpus(&t, "/usedGpus"),
                    field(&t, "/allocatedGpus"),
                    field(&t, "/queuedGpus"),
                    gpus(&t, "/shareGpus"),
                    gpus(&t, "/fairShareGpus"),
                ]
            })
        });
        println!(
            "{}",
            table(
                &[
                    "SERIES",
                    "TEAM",
                    "WEIGHT",
                    "USED",
                    "HOLDS",
                    "QUEUED",
                    "SHARE",
                    "FAIR SHARE"
                ],
                rows
            )
        );
        println!(
            "USED: GPUs on average, decayed with a half-life of {} s; weights of global policy version {}",
            field(&shares, "/halfLifeSeconds"),
            field(&shares, "/policyVersion")
        );
    })?;
    Ok(code::OK)
}

pub async fn capacity(api: &Api, format: Format) -> Result<u8, CliError> {
    let cap: Value = api.get("/v1/capacity").await?;
    emit(format, &cap, || {
        let series = cap["series"].as_array().cloned().unwrap_or_default();
        let rows = series.iter().map(|s| {
            [
                "/series",
                "/total",
                "/allocatable",
                "/inUse",
                "/blocked",
                "/free",
                "/largestFreeBlock",
                "/nodes",
            ]
            .iter()
            .map(|p| field(s, p))
            .collect()
        });
        println!(
            "{}",
            table(
                &[
                    "SERIES",
                    "TOTAL",
                    "ALLOCATABLE",
                    "IN USE",
                    "BLOCKED",
                    "FREE",
                    "LARGEST BLOCK",
                    "NODES"
                ],
                rows
            )
        );
        let usage = cap
            .pointer("/team/usage")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        println!("\nteam {}:", field(&cap, "/team/name"));
        let rows = usage.iter().map(|u| {
            vec![
                field(u, "/series"),
                field(u, "/running"),
                field(u, "/queued"),
            ]
        });
        println!(
            "{}",
            table(&["SERIES", "RUNNING GPUS", "QUEUED GPUS"], rows)
        );
    })?;
    Ok(code::OK)
}

/// Arguments of `forge review`.
#[derive(Debug, clap::Args)]
pub struct ReviewArgs {
    /// The job spec (YAML, or JSON by `.json`)
    #[arg(short = 'f', long = "file", value_name = "JOB_YAML")]
    pub spec: PathBuf,
}

/// `forge review`: exits 6 when the policy would reject the job.
pub async fn review(api: &Api, args: ReviewArgs, format: Format) -> Result<u8, CliError> {
    let (doc, yaml) = super::read_doc(&args.spec)?;
    let resp = api
        .send(
            api.request(Method::POST, "/v1/admission/review")
                .header(
                    "content-type",
                    if yaml {
                        "application/yaml"
                    } else {
                        "application/json"
                    },
                )
                .body(doc),
        )
        .await?;
    let review: Value = crate::api::json(resp).await?;
    emit(format, &review, || {
        print_decision(&review["decision"]);
        println!("policy    {}", field(&review, "/policy"));
        if let Some(trace) = review["trace"].as_array() {
            println!("{}", trace_table(trace));
        }
    })?;
    if review["decision"]["kind"] == "reject" {
        return Ok(code::REJECTED);
    }
    Ok(code::OK)
}
