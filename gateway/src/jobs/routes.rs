//! HTTP handlers of `/v1/jobs`.
//!
//! - `POST /v1/jobs`: `multipart/form-data` with a `spec` part (JSON, or YAML when the
//!   part's content type or file name says so) and a `code` part (`.zip` / `.tar.gz`,
//!   streamed to disk, never held in memory); or `application/json`
//!   `{"spec": {...}, "capsule": "<sha256>"}` naming a stored capsule. 202 with the job
//!   (queued, with the admission decision and trace), 403 `policy-rejected`, 422
//!   `invalid-spec` listing every field problem, 4xx `capsule.*` for bad archives.
//! - `GET /v1/jobs?state=&team=&limit=&cursor=`: newest first; members see their team,
//!   admins every team (or one with `team=`).
//! - `GET /v1/jobs/{id}`: the job with its queue position and reason, history and
//!   decisions. `DELETE /v1/jobs/{id}`: cancel.
//! - `GET /v1/jobs/{id}/logs?name=driver|head`: the archived log once the job ended.
//! - `GET /v1/jobs/{id}/events`: deduplicated Kubernetes events of the job's objects and
//!   the structured pending reason (also on `GET /v1/jobs/{id}` while it starts).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use super::{CodeInput, JobError, QueueEntry, cancel, submit, visible};
use crate::api_error::ApiError;
use crate::app::AppState;
use crate::auth::{Caller, Role};
use crate::jobspec::{self, SpecFormat};
use crate::policy::ChainOutcome;
use crate::store::{DecisionRecord, HistoryEntry, JobRecord, JobState, ListQuery};

/// A job as the API shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobResponse {
    #[serde(flatten)]
    pub job: JobRecord,
    /// Where it stands in the queue (queued jobs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueEntry>,
    /// The admission decision (on submission).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// State history (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<HistoryEntry>>,
    /// Recorded decisions (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<Vec<DecisionRecord>>,
    /// Why a dispatched job is not running yet (single-job reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<super::events::PendingReason>,
}

/// The decision made at submission.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    pub policy_version: u64,
    /// `global@3` / `global@3+team@1`.
    pub policy: String,
    #[serde(flatten)]
    pub outcome: ChainOutcome,
}

fn response(state: &AppState, job: JobRecord) -> JobResponse {
    let queue = (job.state == JobState::Queued)
        .then(|| state.queue.entry(&job.id))
        .flatten();
    JobResponse {
        job,
        queue,
        admission: None,
        history: None,
        decisions: None,
        pending: None,
    }
}

/// `POST /v1/jobs`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<(StatusCode, Json<JobResponse>), ApiError> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let (spec, code) = if content_type.starts_with("multipart/form-data") {
        let multipart = Multipart::from_request(request, &state)
            .await
            .map_err(|e| bad("invalid-multipart", "body", e.body_text()))?;
        read_multipart(&state, multipart).await?
    } else {
        let body = Bytes::from_request(request, &state)
            .await
            .map_err(|e| bad("invalid-body", "body", e.body_text()))?;
        read_json(&state, &body)?
    };
    let submitted = submit(&state, &caller, spec, code).await?;
    let mut resp = response(&state, submitted.job);
    resp.admission = Some(Admission {
        policy_version: submitted.policy_version,
        policy: submitted.policy,
        outcome: submitted.outcome,
    });
    Ok((StatusCode::ACCEPTED, Json(resp)))
}

/// A multipart read error: 413 when the body limit was hit, else 400.
fn multipart_error(field: &'static str, e: &axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        bad("body-too-large", field, e.body_text())
    } else {
        bad("invalid-multipart", field, e.body_text())
    }
}

fn bad(code: &'static str, field: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Job(JobError::BadRequest {
        code,
        field,
        message: message.into(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSubmission {
    spec: serde_json::Value,
    capsule: String,
}

fn read_json(
    state: &AppState,
    body: &[u8],
) -> Result<(crate::jobspec::JobSpec, CodeInput), ApiError> {
    let req: JsonSubmission = serde_json::from_slice(body).map_err(|e| {
        bad(
            "invalid-body",
            "body",
            format!("expected {{\"spec\": {{...}}, \"capsule\": \"<sha256>\"}} or a multipart upload: {e}"),
        )
    })?;
    let spec = jobspec::from_value_and_validate(req.spec, &state.config)?;
    Ok((spec, CodeInput::Capsule(req.capsule)))
}

async fn read_multipart(
    state: &AppState,
    mut multipart: Multipart,
) -> Result<(crate::jobspec::JobSpec, CodeInput), ApiError> {
    let mut spec_doc: Option<(Bytes, SpecFormat)> = None;
    let mut code: Option<tempfile::TempPath> = None;
    let spool = state.config.gateway.data_dir.join("spool");
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error("body", &e))?
    {
        match field.name().unwrap_or("") {
            "spec" => {
                let yaml = field
                    .content_type()
                    .is_some_and(|c| SpecFormat::from_content_type(c) == SpecFormat::Yaml)
                    || field
                        .file_name()
                        .is_some_and(|f| f.ends_with(".yaml") || f.ends_with(".yml"));
                let bytes = field
                    .bytes()
                    .await
                    .map_err(|e| multipart_error("spec", &e))?;
                let format = if yaml {
                    SpecFormat::Yaml
                } else {
                    SpecFormat::Json
                };
                spec_doc = Some((bytes, format));
            }
            "code" => {
                tokio::fs::create_dir_all(&spool)
                    .await
                    .map_err(|e| ApiError::Internal(format!("spool dir: {e}")))?;
                let tmp = tempfile::Builder::new()
                    .prefix(".upload-")
                    .tempfile_in(&spool)
                    .map_err(|e| ApiError::Internal(format!("spool file: {e}")))?;
                let (file, path) = tmp.into_parts();
                let mut out = tokio::fs::File::from_std(file);
                while let Some(chunk) = field
                    .chunk()
                    .await
                    .map_err(|e| multipart_error("code", &e))?
                {
                    out.write_all(&chunk)
                        .await
                        .map_err(|e| ApiError::Internal(format!("spooling the upload: {e}")))?;
                }
                out.flush()
                    .await
                    .map_err(|e| ApiError::Internal(format!("spooling the upload: {e}")))?;
                code = Some(path);
            }
            other => {
                return Err(bad(
                    "unknown-part",
                    "body",
                    format!("unexpected multipart part `{other}` (expected `spec` and `code`)"),
                ));
            }
        }
    }
    let Some((doc, format)) = spec_doc else {
        return Err(bad("missing-part", "spec", "the `spec` part is required"));
    };
    let Some(code) = code else {
        return Err(bad(
            "missing-part",
            "code",
            "the `code` part (a .zip or .tar.gz of the job's code) is required",
        ));
    };
    let spec = jobspec::parse_and_validate(&doc, format, &state.config)?;
    Ok((spec, CodeInput::Upload(code)))
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
        .map_err(|e| bad("invalid-query", "state", e.to_string()))?;
    let team = match (caller.role, q.team) {
        (Role::Admin, team) => team,
        (_, Some(team)) if team != caller.team => {
            return Err(bad(
                "forbidden-team",
                "team",
                "members can only list their own team's jobs",
            ));
        }
        _ => Some(caller.team.clone()),
    };
    let page = state
        .store
        .list(ListQuery {
            team,
            state: job_state,
            limit: q.limit.unwrap_or(0),
            after: q.cursor,
        })
        .await
        .map_err(|e| match e {
            crate::store::StoreError::BadCursor => bad(
                "invalid-query",
                "cursor",
                "not a cursor this gateway issued",
            ),
            other => ApiError::Job(other.into()),
        })?;
    Ok(Json(ListResponse {
        jobs: page.jobs.into_iter().map(|j| response(&state, j)).collect(),
        next: page.next,
    }))
}

/// `GET /v1/jobs/{id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    let job = visible(&state, &caller, &id).await?;
    let history = state.store.history(&id).await.map_err(JobError::from)?;
    let decisions = state.store.decisions(&id).await.map_err(JobError::from)?;
    let pending = if matches!(job.state, JobState::Dispatched | JobState::Initializing) {
        match super::events::diagnose(&state, &job).await {
            Ok(d) => d.pending,
            Err(e) => {
                tracing::warn!(job = %job.id, "pending diagnosis: {e}");
                None
            }
        }
    } else {
        None
    };
    let mut resp = response(&state, job);
    resp.history = Some(history);
    resp.decisions = Some(decisions);
    resp.pending = pending;
    Ok(Json(resp))
}

/// `GET /v1/jobs/{id}/events`: the deduplicated Kubernetes events of the job's
/// objects and the structured pending reason.
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<super::events::Diagnosis>, ApiError> {
    let job = visible(&state, &caller, &id).await?;
    Ok(Json(super::events::diagnose(&state, &job).await?))
}

/// `DELETE /v1/jobs/{id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<JobResponse>, ApiError> {
    let job = cancel(&state, &caller, &id).await?;
    Ok(Json(response(&state, job)))
}

/// Query of `GET /v1/jobs/{id}/logs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogQuery {
    name: Option<String>,
}

/// `GET /v1/jobs/{id}/logs`: the driver (default) or head log — archived once the job
/// ended, live from the pod before that.
pub async fn logs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    let job = visible(&state, &caller, &id).await?;
    let name = q.name.unwrap_or_else(|| "driver".to_string());
    if !matches!(name.as_str(), "driver" | "head") {
        return Err(bad("invalid-query", "name", "`driver` or `head`"));
    }
    let key = forge_object_store::log_key(&job.id, &name).map_err(JobError::from)?;
    let text = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    match state.capsules.get_object(&key).await {
        Ok(bytes) => return Ok((text, bytes).into_response()),
        Err(forge_object_store::StoreError::NotFound(_)) => {}
        Err(e) => return Err(ApiError::Job(e.into())),
    }
    // Not archived (yet): the live log from the cluster, while the pods exist.
    if let Some(live) = live_log(&state, &job, &name).await {
        return Ok((text, live).into_response());
    }
    Err(ApiError::Job(JobError::BadRequest {
        code: "logs-not-archived",
        field: "name",
        message: format!(
            "no {name} log for job {} (state {}): not archived and no live pod",
            job.id, job.state
        ),
    }))
}

/// The current log of a job's submitter (driver) or head pod, if it can be read.
async fn live_log(state: &AppState, job: &JobRecord, name: &str) -> Option<String> {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    let rayjob = job.rayjob_name.as_deref()?;
    let pods: kube::Api<Pod> =
        kube::Api::namespaced(state.kube.clone(), &state.config.k8s.namespace);
    let (selector, container) = if name == "driver" {
        (
            format!("batch.kubernetes.io/job-name={rayjob}"),
            Some("ray-job-submitter".to_string()),
        )
    } else {
        (
            format!(
                "{}={},ray.io/node-type=head",
                crate::rayjob::LABEL_JOB_ID,
                job.id
            ),
            None,
        )
    };
    let list = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .ok()?;
    let pod = list
        .items
        .iter()
        .max_by_key(|p| p.metadata.creation_timestamp.clone())?;
    let params = kube::api::LogParams {
        container,
        ..Default::default()
    };
    pods.logs(&pod.name_any(), &params).await.ok()
}
