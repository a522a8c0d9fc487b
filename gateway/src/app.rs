//! The HTTP application: shared state and `router(state)`, so tests drive the real app.
//!
//! Every `/v1` endpoint is authenticated (bearer tokens, see [`crate::auth`]);
//! `/healthz`, `/readyz` and `/metrics` are open for probes and scrapers and reveal no
//! job data; `/v1/capsules/{sha}.zip` (dev-mode local store only) is authorized by its
//! HMAC-signed, expiring URL instead of a token, so Ray pods can fetch it.
//! Middleware: request ids (`x-request-id`, generated when absent and echoed back),
//! tracing, a body-size limit (413) and a request timeout.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use forge_object_store::{LocalStore, ObjectStore};
use serde::Serialize;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::api_error::ApiError;
use crate::auth::{Caller, Tokens};
use crate::capacity::Capacity;
use crate::config::Config;
use crate::jobs::{self, QueueBoard};
use crate::jobspec::{self, JobSpec, SpecFormat};
use crate::metrics::Metrics;
use crate::policies::{self, PolicyManager};
use crate::policy::ChainOutcome;
use crate::policy::model::{JobView, PolicyRequest, PoolView, StorageMode};
use crate::store::JobStore;

/// State shared by all handlers. Cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub tokens: Arc<Tokens>,
    pub capacity: Capacity,
    /// The active policy (global and team chains), its registry and its history.
    pub policies: Arc<PolicyManager>,
    /// The durable job store.
    pub store: Arc<dyn JobStore>,
    /// Capsules and archived logs (S3, or the local store in dev mode).
    pub capsules: Arc<dyn ObjectStore>,
    /// Set when `capsules` is the local store, whose signed URLs this app serves.
    pub local_capsules: Option<Arc<LocalStore>>,
    /// The Kubernetes client (RayJobs, pods, logs).
    pub kube: kube::Client,
    /// The dispatcher's wake-up signal and published queue view.
    pub queue: Arc<QueueBoard>,
    pub metrics: Arc<Metrics>,
}

impl FromRef<AppState> for Arc<Tokens> {
    fn from_ref(state: &AppState) -> Self {
        state.tokens.clone()
    }
}

/// The gateway's HTTP API.
pub fn router(state: AppState) -> Router {
    let max_body = state.config.gateway.max_body_bytes();
    let local = state.local_capsules.clone();
    let mut app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ready" }))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/capacity", get(capacity))
        .route("/v1/admission/review", post(review))
        .route("/v1/schemas/jobspec", get(jobspec_schema))
        .route(
            "/v1/jobs",
            post(jobs::routes::create).get(jobs::routes::list),
        )
        .route(
            "/v1/jobs/{id}",
            get(jobs::routes::get).delete(jobs::routes::delete),
        )
        .route("/v1/jobs/{id}/logs", get(jobs::routes::logs))
        .route("/v1/jobs/{id}/events", get(jobs::routes::events))
        .route(
            "/v1/plugins",
            post(policies::routes::upload).get(policies::routes::list_plugins),
        )
        .route(
            "/v1/policy",
            get(policies::routes::get_policy).put(policies::routes::put_policy),
        )
        .route("/v1/policy/rollback", post(policies::routes::rollback))
        .route("/v1/policy/history", get(policies::routes::history))
        .route(
            "/v1/policy/shadow",
            get(policies::routes::get_shadow)
                .put(policies::routes::put_shadow)
                .delete(policies::routes::delete_shadow),
        )
        .with_state(state);
    if let Some(local) = local {
        app = app.merge(forge_object_store::local_routes(local));
    }
    // The body limit is enforced once, for every extractor, by the tower layer; axum's
    // own 2 MB default (which would cap multipart code and plugin uploads) is off.
    app.layer(DefaultBodyLimit::disable())
        .layer(RequestBodyLimitLayer::new(max_body))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(60),
        ))
        .layer(TraceLayer::new_for_http())
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CapacityResponse {
    gpu_node_label: String,
    series: Vec<crate::policy::model::SeriesCapacity>,
    team: TeamUsage,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TeamUsage {
    name: String,
    usage: Vec<crate::policy::model::SeriesUsage>,
}

/// `GET /v1/capacity`: live per-series capacity and the caller's team usage.
async fn capacity(State(state): State<AppState>, caller: Caller) -> Json<CapacityResponse> {
    let view = state.capacity.snapshot();
    Json(CapacityResponse {
        gpu_node_label: view.gpu_node_label,
        series: view.series,
        team: TeamUsage {
            // The same accounting policies see: GPUs of the team's dispatched and
            // running jobs, and of its queued ones (the dispatcher's ledger).
            usage: state.queue.usage(&caller.team),
            name: caller.team,
        },
    })
}

/// `GET /metrics`: Prometheus text format.
async fn metrics(State(state): State<AppState>) -> impl axum::response::IntoResponse {
    let text = state.metrics.render(
        &state.queue.depth_by_series(),
        state.policies.current().global().version,
    );
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}

/// `GET /v1/openapi.json`: the API description.
async fn openapi(_caller: Caller) -> Json<serde_json::Value> {
    Json(crate::openapi::document())
}

/// `GET /v1/schemas/jobspec`: the JobSpec JSON Schema.
async fn jobspec_schema(_caller: Caller) -> Json<serde_json::Value> {
    Json(jobspec::json_schema())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewResponse {
    /// Version of the global chain that decided.
    policy_version: u64,
    /// Version of the caller's team chain, if the team has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    team_policy_version: Option<u64>,
    /// Both, as recorded with decisions (`global@3+team@1`).
    policy: String,
    #[serde(flatten)]
    outcome: ChainOutcome,
}

/// `POST /v1/admission/review`: the decision the active policy would make now for a
/// JobSpec (JSON or YAML), with a per-plugin trace. Changes nothing.
async fn review(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<ReviewResponse>, ApiError> {
    let format = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or(SpecFormat::Json, SpecFormat::from_content_type);
    let spec = jobspec::parse_and_validate(&body, format, &state.config)?;
    let request = policy_request(&state, &caller, "dry-run", &spec);
    let evaluated = state
        .policies
        .evaluate(&caller.team, request, "review")
        .await?;
    Ok(Json(ReviewResponse {
        policy_version: evaluated.global_version,
        team_policy_version: evaluated.team_version,
        policy: evaluated.label,
        outcome: evaluated.outcome,
    }))
}

/// The policy's view of a job, with the live cluster snapshot and the team's usage
/// (GPUs its dispatched and queued jobs hold or want, as the dispatcher last counted).
pub fn policy_request(
    state: &AppState,
    caller: &Caller,
    job_id: &str,
    spec: &JobSpec,
) -> PolicyRequest {
    PolicyRequest {
        job: job_view(&state.config, job_id, &caller.team, spec),
        cluster: state.capacity.snapshot(),
        usage: state.queue.usage(&caller.team),
    }
}

/// The policy's view of a job spec.
pub fn job_view(config: &Config, job_id: &str, team: &str, spec: &JobSpec) -> JobView {
    JobView {
        id: job_id.to_string(),
        team: team.to_string(),
        name: spec.name.clone(),
        framework: spec.framework.clone(),
        priority: spec.priority,
        pools: spec
            .pools
            .iter()
            .map(|p| PoolView {
                name: p.name.clone(),
                nodes: p.nodes,
                gpus_per_node: p.gpus_per_node,
                series: p.series.clone(),
            })
            .collect(),
        storage: if config.storage.shared {
            StorageMode::Shared
        } else {
            StorageMode::ReadWriteOnce
        },
        labels: spec.labels.clone(),
    }
}
