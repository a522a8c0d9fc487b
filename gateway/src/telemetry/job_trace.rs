//! One trace per job, from the HTTP submission to the RayJob's deletion.
//!
//! The root is the submission span (`forge.job.submit`, a child of the client's
//! `traceparent` when it sent one). Its context is stored with the job
//! (`JobRecord::trace_parent`), so that every later span — made by whichever replica
//! leads then, possibly after a restart — hangs from it:
//!
//! | span | when | how |
//! |---|---|---|
//! | `forge.job.submit` | the request | live (`tracing`) |
//! | `forge.admission` | the chain's evaluation | live |
//! | `forge.policy.plugin` | one per plugin of the chain | from the chain's trace (start, µs) |
//! | `forge.capsule.store` | packing and storing the code | live |
//! | `forge.job.queue_wait` | queued → out of the queue, with why it waited | from the history |
//! | `forge.dispatch` | manifest, stored intent, RayJob create | live |
//! | `forge.rayjob.create` | the create call | live |
//! | `forge.job.initializing` | dispatched → running (or its end) | from the history |
//! | `forge.job.running` | running → its end | from the history |
//! | `forge.logs.archive` | archiving the pods' logs | live |
//! | `forge.rayjob.delete` | deleting the RayJob | live |
//!
//! Every span carries `forge.job.id` and `forge.team`. Spans made after the request
//! are only made when traces are exported ([`super::enabled`]) and the stored context
//! is sampled, so an untraced job costs nothing here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{Span as _, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::{TARGET, enabled};
use crate::domain::JobState;
use crate::store::{HistoryEntry, JobRecord};
use forge_policy_host::TraceEntry;

/// The W3C trace context of `headers` (`traceparent`, `tracestate`), if valid.
pub fn remote_parent(headers: &http::HeaderMap) -> Option<Context> {
    let cx = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// `cx`'s span as a `traceparent` value, if it has a valid one.
pub fn traceparent_of(cx: &Context) -> Option<String> {
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent")
}

/// The context a stored `traceparent` names, if valid.
fn context_of(trace_parent: &str) -> Option<Context> {
    let carrier =
        std::collections::HashMap::from([("traceparent".to_string(), trace_parent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// A submission's trace: its root span and the client's context, if it sent one.
#[derive(Debug, Clone)]
pub struct SubmitTrace {
    /// The root span (`forge.job.submit`), which the whole request runs in.
    pub span: tracing::Span,
    /// The client's `traceparent`, if valid.
    pub client: Option<Context>,
}

impl SubmitTrace {
    /// The trace of a submission by `team` with these request headers.
    pub fn start(team: &str, headers: &http::HeaderMap) -> SubmitTrace {
        let client = remote_parent(headers);
        SubmitTrace {
            span: submission_span(team, client.as_ref()),
            client,
        }
    }

    /// Names the job the submission made (known after the request was read).
    pub fn record_job(&self, job_id: &str) {
        self.span.record("forge.job.id", job_id);
    }

    /// The context to store with the job ([`stored_context`]).
    pub fn stored(&self) -> Option<String> {
        stored_context(&self.span, self.client.as_ref())
    }
}

/// The root of a job's trace, a child of `parent` (the client's context) if given. Its
/// `forge.job.id` is recorded once the id is known.
pub fn submission_span(team: &str, parent: Option<&Context>) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "forge.job.submit",
        otel.kind = "server",
        forge.job.id = tracing::field::Empty,
        forge.team = team,
    );
    if let Some(cx) = parent {
        let _ = span.set_parent(cx.clone());
    }
    span
}

/// The trace context to store with a job submitted inside `submission`: the
/// submission span's own when traces are exported, else the client's (passed on to
/// the Ray containers unchanged), else none.
pub fn stored_context(submission: &tracing::Span, client: Option<&Context>) -> Option<String> {
    if enabled()
        && let Some(tp) = traceparent_of(&submission.context())
    {
        return Some(tp);
    }
    client.and_then(traceparent_of)
}

/// The span of a review (`forge.admission.review`), only when traces are exported and
/// the caller sent a `traceparent`: reviews are the hot path, traced parent-based.
pub fn review_span(team: &str, headers: &http::HeaderMap) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let Some(parent) = remote_parent(headers) else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!(
        target: TARGET,
        "forge.admission.review",
        otel.kind = "server",
        forge.job.id = REVIEW_ID,
        forge.team = team,
    );
    let _ = span.set_parent(parent);
    span
}

/// The job id a review's policy request carries (no job is made).
pub const REVIEW_ID: &str = "dry-run";

/// The admission span (the chain's evaluation at submission).
pub fn admission_span(job_id: &str, team: &str) -> tracing::Span {
    tracing::info_span!(target: TARGET, "forge.admission", forge.job.id = job_id, forge.team = team)
}

/// The capsule span (packing and storing, or checking a stored capsule).
pub fn capsule_span(job_id: &str, team: &str) -> tracing::Span {
    tracing::info_span!(target: TARGET, "forge.capsule.store", forge.job.id = job_id, forge.team = team)
}

/// One `forge.policy.plugin` span per plugin that ran, children of `admission`, with
/// the plugin's name, version, outcome and time in µs.
pub fn plugin_spans(admission: &tracing::Span, job_id: &str, team: &str, trace: &[TraceEntry]) {
    if !enabled() {
        return;
    }
    let cx = admission.context();
    if !cx.span().span_context().is_sampled() {
        return;
    }
    let tracer = opentelemetry::global::tracer("forge-gateway");
    for t in trace {
        let elapsed = i64::try_from(t.elapsed_us).unwrap_or(i64::MAX);
        let mut span = tracer
            .span_builder("forge.policy.plugin")
            .with_start_time(t.started_at)
            .with_attributes([
                KeyValue::new("forge.job.id", job_id.to_string()),
                KeyValue::new("forge.team", team.to_string()),
                KeyValue::new("forge.plugin.name", t.plugin.clone()),
                KeyValue::new("forge.plugin.version", t.version.clone()),
                KeyValue::new("forge.plugin.outcome", t.outcome),
                KeyValue::new("forge.plugin.elapsed_us", elapsed),
            ])
            .start_with_context(&tracer, &cx);
        if let Some(error) = &t.error {
            span.set_status(Status::error(error.clone()));
        }
        span.end_with_timestamp(t.started_at + Duration::from_micros(t.elapsed_us));
    }
}

/// A stored job's trace: the parent of its spans after the submission.
#[derive(Debug, Clone)]
pub struct JobTrace {
    cx: Context,
    job_id: String,
    team: String,
}

impl JobTrace {
    /// The trace of `job`, when traces are exported and its stored context is sampled.
    pub fn of(job: &JobRecord) -> Option<JobTrace> {
        if !enabled() {
            return None;
        }
        let cx = context_of(job.trace_parent.as_deref()?)?;
        cx.span().span_context().is_sampled().then(|| JobTrace {
            cx,
            job_id: job.id.clone(),
            team: job.team.clone(),
        })
    }

    /// A live span of the job (`forge.dispatch`, …), `Span::none()` for an untraced
    /// job. Its events carry the trace ids in JSON logs.
    pub fn span_of(job: &JobRecord, kind: LiveSpan) -> tracing::Span {
        let Some(trace) = Self::of(job) else {
            return tracing::Span::none();
        };
        let (id, team) = (job.id.as_str(), job.team.as_str());
        let span = match kind {
            LiveSpan::Dispatch => {
                tracing::info_span!(target: TARGET, "forge.dispatch", forge.job.id = id, forge.team = team)
            }
            LiveSpan::RayJobCreate => {
                tracing::info_span!(target: TARGET, "forge.rayjob.create", otel.kind = "client", forge.job.id = id, forge.team = team)
            }
            LiveSpan::Archive => {
                tracing::info_span!(target: TARGET, "forge.logs.archive", forge.job.id = id, forge.team = team)
            }
            LiveSpan::Delete => {
                tracing::info_span!(target: TARGET, "forge.rayjob.delete", otel.kind = "client", forge.job.id = id, forge.team = team)
            }
        };
        // A create inside a dispatch hangs from the dispatch span (tracing's own
        // parent); the others from the job's root.
        if kind != LiveSpan::RayJobCreate {
            let _ = span.set_parent(trace.cx);
        }
        span
    }

    /// The span of the phase `job` just left by moving `from → job.state`, read from
    /// its `history` (when it entered `from`); `why` says why it waited, for a queue
    /// wait. Nothing for a move that ends no phase.
    pub fn phase_ended(
        &self,
        from: JobState,
        job: &JobRecord,
        history: &[HistoryEntry],
        why: Option<&str>,
    ) {
        let to = job.state;
        let (name, entered) = match from {
            JobState::Queued => ("forge.job.queue_wait", JobState::Queued),
            JobState::Dispatched | JobState::Initializing
                if to == JobState::Running || to.is_terminal() =>
            {
                ("forge.job.initializing", JobState::Dispatched)
            }
            JobState::Running if to.is_terminal() => ("forge.job.running", JobState::Running),
            _ => return,
        };
        let Some(entry) = history.iter().rev().find(|h| h.to == entered) else {
            return;
        };
        let start = entry.at_ms;
        // Why it waited: the dispatcher's last word on it, else why it was queued.
        let why = (from == JobState::Queued)
            .then(|| why.or(entry.reason.as_deref()))
            .flatten();
        let mut attrs = vec![
            KeyValue::new("forge.job.id", self.job_id.clone()),
            KeyValue::new("forge.team", self.team.clone()),
            KeyValue::new("forge.job.next_state", to.as_str()),
        ];
        if let Some(why) = why {
            attrs.push(KeyValue::new("forge.queue.reason", why.to_string()));
        }
        if let Some(series) = &job.queue_series {
            attrs.push(KeyValue::new("forge.series", series.clone()));
        }
        let tracer = opentelemetry::global::tracer("forge-gateway");
        let mut span = tracer
            .span_builder(name)
            .with_start_time(at(start))
            .with_attributes(attrs)
            .start_with_context(&tracer, &self.cx);
        if matches!(to, JobState::Failed | JobState::TimedOut) {
            span.set_status(Status::error(job.reason.clone().unwrap_or_default()));
        }
        span.end_with_timestamp(at(job.updated_at_ms));
    }
}

/// The live spans of a job after its submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveSpan {
    Dispatch,
    RayJobCreate,
    Archive,
    Delete,
}

/// Unix milliseconds as a time.
fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips_through_a_context() {
        let cx = context_of(TP).expect("valid");
        assert!(cx.span().span_context().is_sampled());
        assert_eq!(traceparent_of(&cx).as_deref(), Some(TP));
        assert!(context_of("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
        assert!(context_of("not a traceparent").is_none());
    }

    #[test]
    fn a_client_header_is_the_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", TP.parse().expect("header"));
        let cx = remote_parent(&headers).expect("parent");
        assert_eq!(
            cx.span().span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(remote_parent(&http::HeaderMap::new()).is_none());
    }

    #[test]
    fn without_export_the_clients_context_is_stored() {
        // This process exports nothing (no init): the client's context is kept as is.
        let cx = context_of(TP).expect("valid");
        let span = submission_span("team-a", Some(&cx));
        assert_eq!(stored_context(&span, Some(&cx)).as_deref(), Some(TP));
        assert_eq!(stored_context(&span, None), None);
    }
}
