//! `/v1/jobs` over HTTP.
//!
//! - `POST /v1/jobs`: a submission ([`super::submission`]). 202 with the job (queued,
//!   with the admission decision and trace), 403 `policy-rejected`, 422 `invalid-spec`
//!   listing every field problem, 4xx `capsule.*` for bad archives.
//! - `GET /v1/jobs?state=&team=&limit=&cursor=`: newest first; members see their team,
//!   admins every team (or one with `team=`).
//! - `GET /v1/jobs/{id}`: the job with its queue position and reason, history and
//!   decisions, and while it starts or runs its Ray dashboard (address and
//!   `kubectl port-forward` command). `DELETE /v1/jobs/{id}`: cancel.
//! - `GET /v1/jobs/{id}/logs?name=driver|head|pod=<pod>[&container=]&offset=N|tail=N&follow=true`:
//!   the archived log once the job ended, live before (the driver's by default, or
//!   one pod's); from a byte offset or the last lines; with `follow`, live until the
//!   job ends and then the archived rest. The `x-forge-log-offset` header is the
//!   offset of the body's first byte. Streamed, never held whole.
//! - `GET /v1/jobs/{id}/logs/pods`: every pod's log of the job (pod, role, container,
//!   bytes, truncated, archived).
//! - `GET /v1/jobs/{id}/events`: deduplicated Kubernetes events of the job's objects and
//!   the structured pending reason (also on `GET /v1/jobs/{id}` while it starts).

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use forge_policy_host::ChainOutcome;
use serde::{Deserialize, Serialize};

use super::error::{ApiError, EdgeError};
use super::query::Query;
use super::submission;
use crate::auth::{Caller, Role};
use crate::cluster::LogSource;
use crate::domain::JobState;
use crate::jobs::logs::dashboard::Dashboard;
use crate::jobs::{Diagnosis, JobError, LogStart, LogTarget, PendingReason, PodLog, QueueEntry};
use crate::state::AppState;
use crate::store::{
    DecisionRecord, HistoryEntry, JobRecord, ListQuery, MAX_PAGE, Page, PreemptionRecord,
    StoreError,
};
use crate::telemetry::job_trace::SubmitTrace;
use tracing::Instrument as _;

/// A job as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobResponse {
    #[serde(flatten)]
    pub job: JobRecord,
    /// `unknown` while the job holds a place in a fleet marked unavailable: its state
    /// is the last one seen, not failed, until the fleet answers again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed: Option<&'static str>,
    /// Where it stands in the queue (queued jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueEntry>,
    /// The admission decision (on submission).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionTrace>,
    /// State history (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoryEntry>>,
    /// Recorded decisions (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<DecisionRecord>>,
    /// Why a dispatched job is not running yet (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingReason>,
    /// The Ray dashboard of a starting or running job (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dashboard: Option<Dashboard>,
    /// Its preemptions, oldest first (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<Vec<PreemptionRecord>>,
    /// Its runs: one per preempted attempt, then the current one (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<Vec<Attempt>>,
}

/// One run of a job and where its logs are.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attempt {
    /// 0 for the first run.
    pub attempt: u32,
    /// When it was released after its preemption (`None`: the current run).
    pub released_ms: Option<i64>,
    /// Its driver log (`GET …/logs?attempt=N`).
    pub logs: String,
}

/// A job's attempts from its preemptions.
fn attempts_of(job: &JobRecord, preemptions: &[PreemptionRecord]) -> Vec<Attempt> {
    let logs = |n: u32| format!("/v1/jobs/{}/logs?attempt={n}", job.id);
    preemptions
        .iter()
        .filter(|p| p.attempt < job.attempt)
        .map(|p| Attempt {
            attempt: p.attempt,
            released_ms: p.released_ms,
            logs: logs(p.attempt),
        })
        .chain(std::iter::once(Attempt {
            attempt: job.attempt,
            released_ms: None,
            logs: logs(job.attempt),
        }))
        .collect()
}

/// The decision made at submission.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionTrace {
    pub policy_version: u64,
    /// `global@3` / `global@3+team@1`.
    pub policy: String,
    #[serde(flatten)]
    pub outcome: ChainOutcome,
}

fn response(state: &AppState, job: JobRecord) -> JobResponse {
    let queue = (job.state == JobState::Queued)
        .then(|| state.jobs.queue().entry(&job.id))
        .flatten();
    let out_of_sight = job.state.holds_gpus()
        && job
            .fleet
            .as_deref()
            .is_some_and(|f| !state.capacity().is_available(f));
    JobResponse {
        job,
        observed: out_of_sight.then_some("unknown"),
        queue,
        admission: None,
        history: None,
        decisions: None,
        pending: None,
        dashboard: None,
        preemptions: None,
        attempts: None,
    }
}

/// `POST /v1/jobs`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<(StatusCode, Json<JobResponse>), ApiError> {
    // Before the body is read: a refused submission costs almost nothing.
    state.jobs.submissions.check_submission_rate(&caller.team)?;
    // The job's trace starts here: reading the upload is part of the submission.
    let trace = SubmitTrace::start(&caller.team, request.headers());
    let submitted = async {
        let (spec, code) = submission::read(&state, &caller.team, request).await?;
        state
            .jobs
            .submissions
            .submit(&caller, spec, code, &trace)
            .await
            .map_err(ApiError::from)
    }
    .instrument(trace.span.clone())
    .await?;
    let mut resp = response(&state, submitted.job);
    resp.admission = Some(AdmissionTrace {
        policy_version: submitted.policy_version,
        policy: submitted.policy,
        outcome: submitted.outcome,
    });
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    state: Option<String>,
    team: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

/// A page of jobs.
#[derive(Debug, Serialize)]
pub struct ListResponse {
    jobs: Vec<JobResponse>,
    /// Cursor of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// Whose jobs a listing shows: admins any team's (`None`: all), members only their
/// own.
pub fn team_filter(caller: &Caller, asked: Option<String>) -> Result<Option<String>, ApiError> {
    match (caller.role, asked) {
        (Role::Admin, team) => Ok(team),
        (_, Some(team)) if team != caller.team => Err(EdgeError::ForbiddenTeam(
            "members can only see their own team's jobs".into(),
        )
        .into()),
        _ => Ok(Some(caller.team.clone())),
    }
}

/// `GET /v1/jobs`.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ListParams>,
) -> Result<Json<ListResponse>, ApiError> {
    let job_state = q
        .state
        .as_deref()
        .map(str::parse::<JobState>)
        .transpose()
        .map_err(|e| ApiError::bad("invalid-query", "state", e.to_string()))?;
    let limit = match q.limit {
        None => 0,
        Some(n @ 1..=MAX_PAGE) => n,
        Some(_) => {
            return Err(ApiError::bad(
                "invalid-query",
                "limit",
                format!("a page holds 1..={MAX_PAGE} jobs"),
            ));
        }
    };
    if let Some(c) = &q.cursor
        && !is_cursor(c)
    {
        return Err(bad_cursor());
    }
    let team = team_filter(&caller, q.team)?;
    let query = ListQuery {
        team,
        state: job_state,
        limit,
        after: q.cursor,
    };
    let page = list_page(&state, query).await?;
    Ok(Json(ListResponse {
        jobs: page.jobs.into_iter().map(|j| response(&state, j)).collect(),
        next: page.next,
    }))
}

/// The shape of the cursors the gateway issues (a job's sequence number, as the
/// OpenAPI document states it): anything else is refused before the store is asked.
pub const CURSOR_PATTERN: &str = "^[1-9][0-9]{0,17}$";

fn is_cursor(c: &str) -> bool {
    (1..=18).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_digit()) && !c.starts_with('0')
}

fn bad_cursor() -> ApiError {
    StoreError::BadCursor.into()
}

/// A page of a listing (already filtered to what the caller may see; the console's
/// jobs page reads the same).
pub async fn list_page(state: &AppState, query: ListQuery) -> Result<Page, ApiError> {
    Ok(state.jobs.store().list(query).await?)
}

/// `GET /v1/jobs/{id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    let jobs = &state.jobs;
    let job = jobs.visible(&caller, &id).await?;
    let history = jobs.store().history(&id).await.map_err(JobError::from)?;
    let decisions = jobs.store().decisions(&id).await.map_err(JobError::from)?;
    let preemptions = jobs
        .store()
        .preemptions(&id)
        .await
        .map_err(JobError::from)?;
    let (pending, dashboard) = cluster_details(jobs, &job).await;
    let mut resp = response(&state, job);
    resp.history = Some(history);
    resp.decisions = Some(decisions);
    resp.pending = pending;
    resp.dashboard = dashboard;
    resp.attempts = Some(attempts_of(&resp.job, &preemptions));
    resp.preemptions = Some(preemptions);
    Ok(Json(resp))
}

/// The pending reason (while the job starts) and the dashboard address, each left out
/// (and logged) when the cluster fails to answer it: the job is answered without them
/// when the API server is slow or unreachable, never held up by it (each read is
/// bounded by `jobs::logs::CLUSTER_READ_WITHIN`).
async fn cluster_details(
    jobs: &crate::jobs::Jobs,
    job: &crate::store::JobRecord,
) -> (Option<PendingReason>, Option<Dashboard>) {
    let starting = matches!(job.state, JobState::Dispatched | JobState::Initializing);
    let pending = async {
        if starting {
            jobs.logs.diagnose(job).await.map(|d| d.pending)
        } else {
            Ok(None)
        }
    };
    let (pending, dashboard) = tokio::join!(pending, jobs.logs.dashboard(job));
    (
        left_out("pending diagnosis", &job.id, pending),
        left_out("dashboard address", &job.id, dashboard),
    )
}

/// The answer, or `None` (logged) when it failed.
fn left_out<T>(what: &str, job: &str, answer: Result<Option<T>, JobError>) -> Option<T> {
    answer.unwrap_or_else(|e| {
        tracing::warn!(job = %job, "{what}: {e}");
        None
    })
}

/// `GET /v1/jobs/{id}/events`.
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Diagnosis>, ApiError> {
    let job = state.jobs.visible(&caller, &id).await?;
    Ok(Json(state.jobs.logs.diagnose(&job).await?))
}

/// `DELETE /v1/jobs/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    let job = state.jobs.lifecycle.cancel(&caller, &id).await?;
    Ok(Json(response(&state, job)))
}

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    name: Option<String>,
    /// One pod of the job (`GET /v1/jobs/{id}/logs/pods` lists them).
    pod: Option<String>,
    /// With `pod`: its container (default: the Ray or submitter container).
    container: Option<String>,
    /// Start at this byte of the log.
    offset: Option<u64>,
    /// Start at the last N lines.
    tail: Option<usize>,
    /// Keep the response open: live output, then the archived rest.
    #[serde(default)]
    follow: bool,
    /// An earlier attempt's archived logs (a preempted run); default: the current.
    attempt: Option<u32>,
}

/// The header carrying the offset of the body's first byte.
pub const LOG_OFFSET_HEADER: &str = "x-forge-log-offset";

/// `GET /v1/jobs/{id}/logs`.
pub async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let job = state.jobs.visible(&caller, &id).await?;
    logs_kept(&state, &job).await?;
    let target = match (q.name.as_deref(), q.pod, q.container) {
        (Some(_), Some(_), _) => {
            return Err(ApiError::bad(
                "invalid-query",
                "pod",
                "give `name` or `pod`, not both",
            ));
        }
        (_, None, Some(_)) => {
            return Err(ApiError::bad(
                "invalid-query",
                "container",
                "`container` goes with `pod`",
            ));
        }
        (None, None, None) => LogTarget::Source(LogSource::Driver),
        (Some(name), None, None) => LogTarget::Source(
            LogSource::parse(name)
                .ok_or_else(|| ApiError::bad("invalid-query", "name", "`driver` or `head`"))?,
        ),
        (None, Some(pod), container) => LogTarget::Pod { pod, container },
    };
    let start = match (q.offset, q.tail) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad(
                "invalid-query",
                "tail",
                "give `offset` or `tail`, not both",
            ));
        }
        (Some(n), None) => LogStart::Offset(n),
        (None, Some(n)) => LogStart::Tail(n),
        (None, None) => LogStart::Offset(0),
    };
    let (logs, followable) = state.jobs.logs.for_attempt(&job, q.attempt)?;
    if q.follow && !followable {
        return Err(ApiError::bad(
            "invalid-query",
            "follow",
            "an earlier attempt has ended: its logs are not followed",
        ));
    }
    let read = logs.log_from(&job, &target, start, q.follow).await?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                "text/plain; charset=utf-8".to_string(),
            ),
            (
                header::HeaderName::from_static(LOG_OFFSET_HEADER),
                read.offset.to_string(),
            ),
        ],
        axum::body::Body::from_stream(read.body),
    )
        .into_response())
}

/// `GET /v1/jobs/{id}/logs/pods`: the job's pod logs (head, workers, submitters), as
/// archived once the job ended (bytes, truncated) or its live pods before.
pub async fn log_pods(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Vec<PodLog>>, ApiError> {
    let job = state.jobs.visible(&caller, &id).await?;
    logs_kept(&state, &job).await?;
    Ok(Json(state.jobs.logs.pod_logs(&job).await?))
}

/// `410 logs-expired` for an ended job whose archived logs retention deleted.
async fn logs_kept(state: &AppState, job: &JobRecord) -> Result<(), ApiError> {
    if !job.state.is_terminal() {
        return Ok(());
    }
    match state.database.retention.logs_deleted_at(&job.id).await? {
        Some(deleted_at_ms) => Err(JobError::LogsExpired {
            id: job.id.clone(),
            deleted_at_ms,
        }
        .into()),
        None => Ok(()),
    }
}
