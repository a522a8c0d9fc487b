//! One job: `GET /console/jobs/{id}` opens with the "pending because…" sentence
//! ([`crate::jobs::pending_sentence`]) and the last acknowledged checkpoint above a
//! timeline merging the state history, the
//! admission decisions (with the per-plugin trace and the policy versions) and the
//! Kubernetes events of its objects; then its log, opened at the tail (earlier pages
//! with `?before=<byte offset>`) and followed live until the job ends, when the
//! archived rest follows. `?part=live` answers only the summary and timeline, which
//! the page re-reads when the job's feed reports a change; `?part=row`, the job's row
//! of the jobs list, which that list re-reads when the job changes. `POST
//! /console/jobs/{id}/cancel` cancels (CSRF token and an explicit confirmation
//! required). `GET /console/jobs/{id}/log?offset=N&follow=true` streams the log as
//! text for the page's script (`&attempt=N`: an earlier attempt's archived log, which
//! the timeline's log marks link to).

use axum::Form;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::draw::job_gantt;
use super::layout::{self, Nav, csrf_field, state_badge};
use super::present;
use super::session::Viewer;
use super::{Console, PageError};
use crate::cluster::LogSource;
use crate::cluster::events::ObjectEvent;
use crate::domain::JobState;
use crate::jobs::{JobError, LogStart, LogTarget, pending_sentence};
use crate::store::{DecisionRecord, HistoryEntry, JobRecord, PreemptionRecord, now_ms};

/// Log lines shown per page.
pub const LOG_LINES: usize = 500;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct DetailParams {
    #[serde(default)]
    part: Option<String>,
    #[serde(default)]
    before: Option<u64>,
}

/// `GET /console/jobs/{id}`.
pub async fn detail(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<DetailParams>,
) -> Result<Response, PageError> {
    let jobs = &console.app.jobs;
    let job = jobs.visible(&viewer.caller, &id).await?;
    if q.part.as_deref() == Some("row") {
        return Ok(Html(
            super::jobs::row_part(&console.app, &job)
                .await
                .into_string(),
        )
        .into_response());
    }
    let live = live_part(&console, &job).await?;
    if q.part.as_deref() == Some("live") {
        return Ok(Html(live.into_string()).into_response());
    }
    let text = jobs
        .logs
        .log(&job, LogSource::Driver)
        .await
        .unwrap_or_default();
    let end = q
        .before
        .map_or(text.len(), |b| (b as usize).min(text.len()));
    let start = tail_start(&text[..end], LOG_LINES);
    let shown = String::from_utf8_lossy(&text[start..end]).into_owned();
    let following = !job.state.is_terminal() && q.before.is_none();
    let body = html! {
        h1 { "Job " (job.name) }
        p { "Id " code { (job.id) } " · team " (job.team) " · submitted " (present::when(job.created_at_ms)) }
        section #live data-refresh={ "/console/jobs/" (job.id) "?part=live" } data-feed={ "/console/live/jobs/" (job.id) } {
            (live)
        }
        section aria-labelledby="log-title" {
            h2 #log-title { "Driver log" }
            p #log-status {
                @if job.state.is_terminal() { "The job ended: this is its archived log." }
                @else { "Live: new lines appear as the job writes them." }
            }
            @if start > 0 {
                p { a href={ "/console/jobs/" (job.id) "?before=" (start) } rel="prev" { "Earlier lines" } }
            }
            @if following {
                pre.log #log data-follow={ "/console/jobs/" (job.id) "/log?offset=" (end) "&follow=true" } data-status="log-status" tabindex="0" { (shown) }
            } @else {
                pre.log #log tabindex="0" { (shown) }
            }
        }
        @if !job.state.is_terminal() {
            section aria-labelledby="cancel-title" {
                h2 #cancel-title { "Cancel" }
                form method="post" action={ "/console/jobs/" (job.id) "/cancel" } #cancel-form {
                    (csrf_field(&viewer))
                    label { input type="checkbox" name="confirm" value="yes" required; " Yes, cancel this job" }
                    button type="submit" #cancel { "Cancel job" }
                }
            }
        }
    };
    Ok(layout::page(
        &format!("Job {}", job.name),
        Some(&viewer),
        Nav::Jobs,
        body,
    ))
}

/// The byte where the last `lines` lines of `text` start.
fn tail_start(text: &[u8], lines: usize) -> usize {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    body.iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1)
}

/// A preempted job's preemptions, and where its earlier attempts' logs are.
fn preemptions_table(job: &JobRecord, preemptions: &[PreemptionRecord]) -> Markup {
    html! {
        @if !preemptions.is_empty() {
            h2 { "Preemptions" }
            p { "Attempt " (job.attempt) " runs now; an earlier attempt's log: "
                code { "forge logs " (job.id) " --attempt N" } }
            div.scroll { table #preemptions {
                thead { tr { th { "Attempt" } th { "Notice" } th { "By job" } th { "Grace" }
                    th { "Released" } th { "How" } th { "Resume step" } th { "Lost GPU·s" } } }
                tbody { @for p in preemptions {
                    tr {
                        td { (p.attempt) }
                        td { (present::when(p.at_ms)) }
                        td { a href={ "/console/jobs/" (p.by_job) } { (p.by_job) } }
                        td { (p.notice_ms / 1000) "s" }
                        td { @if let Some(r) = p.released_ms { (present::when(r)) } @else { "notice running" } }
                        td { @if let Some(c) = p.released_by { (c.as_str()) } @else { "—" } }
                        td { @if let Some(s) = p.checkpoint_step { (s) } @else { "—" } }
                        td { @if let Some(l) = p.lost_gpu_seconds { (format!("{l:.0}")) } @else { "—" } }
                    }
                } }
            } }
        }
    }
}

/// The summary (state, sentence, queue standing, pending reason) and the timeline.
async fn live_part(console: &Console, job: &JobRecord) -> Result<Markup, PageError> {
    let jobs = &console.app.jobs;
    let store = jobs.store();
    let history = store.history(&job.id).await.map_err(JobError::from)?;
    let decisions = store.decisions(&job.id).await.map_err(JobError::from)?;
    let preemptions = store.preemptions(&job.id).await.map_err(JobError::from)?;
    let queue = (job.state == JobState::Queued)
        .then(|| jobs.queue().entry(&job.id))
        .flatten();
    let diagnosis = if job.rayjob_name.is_some() {
        match jobs.logs.diagnose(job).await {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(job = %job.id, "pending diagnosis: {e}");
                None
            }
        }
    } else {
        None
    };
    let pending = diagnosis.as_ref().and_then(|d| d.pending.as_ref());
    let sentence = pending_sentence(job.state, queue.as_ref(), pending);
    let timeline = timeline(&history, &decisions, &preemptions);
    let mut events: Vec<(Option<i64>, &ObjectEvent)> = diagnosis
        .iter()
        .flat_map(|d| d.events.iter())
        .map(|e| (e.last_seen.as_deref().and_then(present::parse_rfc3339), e))
        .collect();
    events.sort_by_key(|(at, _)| *at);
    let mut marks = marks(job, &decisions, &preemptions);
    marks.extend(job_gantt::log_marks(&job.id, job.attempt, &history));
    marks.extend(events.iter().filter_map(|(at, e)| {
        Some(job_gantt::Mark {
            at_ms: (*at)?,
            kind: if e.type_ == "Warning" {
                "warning"
            } else {
                "event"
            },
            label: format!("{} {}/{}: {}", e.reason, e.kind, e.object, e.message),
            href: None,
        })
    }));
    Ok(html! {
        p { "State: " span #job-state { (state_badge(job.state)) }
            @if let Some(r) = &job.reason { " — " (present::message(r)) } }
        @if let Some(s) = &sentence { p.sentence #pending-sentence role="status" { (present::message(s)) } }
        @if let Some(q) = &queue {
            p #standing { "Queue: position " (q.position) " on " (present::series(&q.series)) " (" code { (q.code) } ")" }
            @if let Some(s) = q.standing_sentence() { p #fair-standing { (present::message(&s)) } }
        }
        @if let Some(t) = &job.terms { p #terms { (t.sentence()) } }
        @if let Some(f) = &job.fleet { p #fleet { "Fleet: " code { (f) } } }
        @if let Some(c) = &job.last_checkpoint {
            p #checkpoint { "Last checkpoint: step " (c.step) " " (present::when(c.at_ms)) }
        }
        (preemptions_table(job, &preemptions))
        h2 { "Timeline" }
        (job_gantt::full(&history, &marks, now_ms()))
        ol #timeline {
            @for (at, kind, what) in &timeline {
                li { (present::when(*at)) " · " strong { (kind) } " · " (what) }
            }
        }
        @if !decisions.is_empty() {
            h2 { "Admission decisions" }
            @for d in &decisions {
                details {
                    summary { (d.decision.kind) " by " (d.decision.chain_version) " " (present::when(d.at_ms)) }
                    pre { (serde_json::to_string_pretty(&d.decision.plugins).unwrap_or_default()) }
                }
            }
        }
        @if diagnosis.is_some() {
            h2 { "Kubernetes events" }
            @if events.is_empty() { p #no-events { "No events." } }
            @else {
                div.scroll { table #events {
                    caption { "Oldest first" @if job.state.is_terminal() { "; kept with the job's archived logs" } }
                    thead { tr { th scope="col" { "Last seen" } th scope="col" { "Object" } th scope="col" { "Type" }
                        th scope="col" { "Reason" } th scope="col" { "Count" } th scope="col" { "Message" } } }
                    tbody { @for (at, e) in &events {
                        tr {
                            td { @if let Some(at) = at { (present::when(*at)) } @else { "—" } }
                            td { (e.kind) "/" (e.object) } td { (e.type_) } td { (e.reason) } td { (e.count) }
                            td { (present::message(&e.message)) }
                        }
                    } }
                } }
            }
        }
    })
}

/// The job's history and admission decisions as one list, oldest first: (time, kind,
/// what happened).
fn timeline(
    history: &[HistoryEntry],
    decisions: &[DecisionRecord],
    preemptions: &[PreemptionRecord],
) -> Vec<(i64, &'static str, Markup)> {
    let mut timeline: Vec<(i64, &str, Markup)> = Vec::new();
    for h in history {
        let what = html! {
            @match &h.from {
                Some(f) => { (f.as_str()) " → " (h.to.as_str()) },
                None => { "submitted (" (h.to.as_str()) ")" },
            }
            @if let Some(r) = &h.reason { ": " (present::message(r)) }
        };
        timeline.push((h.at_ms, "state", what));
    }
    for d in decisions {
        let what = html! {
            (d.decision.kind) " by " (d.decision.chain_version)
            @if let Some(m) = &d.decision.message { ": " (present::message(m)) }
        };
        timeline.push((d.at_ms, "decision", what));
    }
    for p in preemptions {
        timeline.push((
            p.at_ms,
            "preemption",
            html! { "notice: preempted by " a href={ "/console/jobs/" (p.by_job) } { (p.by_job) } },
        ));
    }
    timeline.sort_by_key(|(at, _, _)| *at);
    timeline
}

/// What the drawn timeline marks: decisions, preemption notices and releases, the
/// last checkpoint.
fn marks(
    job: &JobRecord,
    decisions: &[DecisionRecord],
    preemptions: &[PreemptionRecord],
) -> Vec<job_gantt::Mark> {
    let mut marks: Vec<job_gantt::Mark> = decisions
        .iter()
        .map(|d| job_gantt::Mark {
            at_ms: d.at_ms,
            kind: "decision",
            label: format!("{} by {}", d.decision.kind, d.decision.chain_version),
            href: None,
        })
        .collect();
    for p in preemptions {
        marks.push(job_gantt::Mark {
            at_ms: p.at_ms,
            kind: "preemption",
            label: format!("preemption notice (by {})", p.by_job),
            href: None,
        });
        if let Some(r) = p.released_ms {
            marks.push(job_gantt::Mark {
                at_ms: r,
                kind: "release",
                label: match p.released_by {
                    Some(how) => format!("released attempt {} ({})", p.attempt, how.as_str()),
                    None => format!("released attempt {}", p.attempt),
                },
                href: None,
            });
        }
    }
    if let Some(c) = &job.last_checkpoint {
        marks.push(job_gantt::Mark {
            at_ms: c.at_ms,
            kind: "checkpoint",
            label: format!("checkpoint at step {}", c.step),
            href: None,
        });
    }
    marks
}

/// The cancel form.
#[derive(Debug, Deserialize)]
pub struct CancelForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// `POST /console/jobs/{id}/cancel`.
pub async fn cancel(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Form(f): Form<CancelForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    if f.confirm.as_deref() != Some("yes") {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "confirm the cancellation (the checkbox); nothing was changed",
        ));
    }
    let job = console
        .app
        .jobs
        .lifecycle
        .cancel(&viewer.caller, &id)
        .await?;
    Ok(Redirect::to(&format!("/console/jobs/{}", job.id)).into_response())
}

/// The log query.
#[derive(Debug, Deserialize)]
pub struct LogParams {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    follow: bool,
    /// An earlier attempt's archived log (a preempted run); default: the current.
    #[serde(default)]
    attempt: Option<u32>,
}

/// `GET /console/jobs/{id}/log`.
pub async fn log(
    State(console): State<Console>,
    viewer: Viewer,
    Path(id): Path<String>,
    Query(q): Query<LogParams>,
) -> Result<Response, PageError> {
    let jobs = &console.app.jobs;
    let job = jobs.visible(&viewer.caller, &id).await?;
    // An earlier attempt has ended: its archived log, never followed.
    let (logs, followable) = jobs.logs.for_attempt(&job, q.attempt)?;
    let follow = q.follow && followable;
    let read = logs
        .log_from(
            &job,
            &LogTarget::Source(LogSource::Driver),
            LogStart::Offset(q.offset),
            follow,
        )
        .await?;
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(read.body),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tail_starts_at_the_last_lines() {
        let text = b"a\nb\nc\n";
        assert_eq!(super::tail_start(text, 2), 2);
        assert_eq!(super::tail_start(text, 3), 0);
        assert_eq!(super::tail_start(text, 10), 0);
        assert_eq!(super::tail_start(b"a\nb", 1), 2);
    }
}
