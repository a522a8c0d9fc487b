//! The one error type of the HTTP API, mapped to stable JSON:
//! `{"error": {"code": "...", "message": "...", "details": ...}}`.
//!
//! Codes are stable and machine-readable; messages are for people. Internal errors are
//! logged with their cause and answered with a generic message (never echoed).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use forge_capsule::CapsuleErrorKind;
use serde_json::json;

use crate::auth::AuthError;
use crate::jobs::JobError;
use crate::jobspec::SpecErrors;
use crate::policies::PolicyAdminError;
use crate::policy::RunError;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The request body is not a valid JobSpec: every problem with its field path.
    #[error(transparent)]
    InvalidSpec(#[from] SpecErrors),
    /// A policy plugin failed; admission fails closed.
    #[error("policy failed: {0}")]
    Policy(#[from] RunError),
    /// A job operation failed.
    #[error(transparent)]
    Job(JobError),
    /// A policy-management operation failed.
    #[error(transparent)]
    PolicyAdmin(#[from] PolicyAdminError),
    /// A bug or an unexpected dependency failure: logged, not echoed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<JobError> for ApiError {
    fn from(e: JobError) -> Self {
        match e {
            JobError::InvalidSpec(errors) => ApiError::InvalidSpec(errors),
            JobError::Policy(e) => ApiError::Policy(e),
            other => ApiError::Job(other),
        }
    }
}

/// Status, code, message and details of a job error.
fn job_error(e: JobError) -> (StatusCode, &'static str, String, Option<serde_json::Value>) {
    match e {
        JobError::NotFound(id) => (
            StatusCode::NOT_FOUND,
            "not-found",
            format!("job {id} not found"),
            None,
        ),
        JobError::BadRequest {
            code,
            field,
            message,
        } => {
            let status = match code {
                "logs-not-archived" => StatusCode::NOT_FOUND,
                "body-too-large" => StatusCode::PAYLOAD_TOO_LARGE,
                "forbidden-team" => StatusCode::FORBIDDEN,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, code, message, Some(json!({ "field": field })))
        }
        JobError::Rejected {
            job_id,
            code,
            message,
            field,
            plugin,
        } => (
            StatusCode::FORBIDDEN,
            "policy-rejected",
            message,
            Some(json!({ "reason": code, "field": field, "plugin": plugin, "jobId": job_id })),
        ),
        JobError::Capsule(e) if e.kind() != CapsuleErrorKind::Internal => (
            match e.kind() {
                CapsuleErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                CapsuleErrorKind::Rejected | CapsuleErrorKind::Internal => StatusCode::BAD_REQUEST,
            },
            e.code(),
            e.to_string(),
            Some(json!({ "field": e.field() })),
        ),
        JobError::UnknownCapsule(digest) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown-capsule",
            format!("capsule {digest} is not stored; submit the code as a multipart upload"),
            Some(json!({ "field": "capsule" })),
        ),
        JobError::NotCancellable { id, state } => (
            StatusCode::CONFLICT,
            "not-cancellable",
            format!("job {id} is {state} and cannot be cancelled"),
            Some(json!({ "state": state })),
        ),
        JobError::ObjectStore(e) => {
            tracing::error!("object store: {e}");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "storage-unavailable",
                "object storage is unavailable; nothing was stored, try again".into(),
                None,
            )
        }
        JobError::InvalidSpec(_) | JobError::Policy(_) => {
            // Converted to their own variants by `From<JobError>`; kept total here.
            tracing::error!("unconverted job error");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".into(),
                None,
            )
        }
        other => {
            tracing::error!("job operation failed: {other}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error".into(),
                None,
            )
        }
    }
}

/// Status, code, message and details of a policy-management error.
fn policy_admin_error(
    e: &PolicyAdminError,
) -> (StatusCode, &'static str, String, Option<serde_json::Value>) {
    let (status, code, field) = e.status_code_field();
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status.is_server_error() {
        tracing::error!("policy management: {e}");
        let message = if status == StatusCode::SERVICE_UNAVAILABLE {
            "object storage is unavailable; nothing was changed, try again"
        } else {
            "internal error"
        };
        return (status, code, message.into(), None);
    }
    let mut details = json!({ "field": field });
    match e {
        PolicyAdminError::VersionConflict {
            expected, current, ..
        } => {
            details["expected"] = json!(expected);
            details["current"] = json!(current);
        }
        PolicyAdminError::Settings { plugin, .. } => details["plugin"] = json!(plugin),
        PolicyAdminError::VersionExists { digest, .. } => details["digest"] = json!(digest),
        _ => {}
    }
    (status, code, e.to_string(), Some(details))
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message, details) = match self {
            ApiError::Auth(e) => return e.into_response(),
            ApiError::Job(e) => job_error(e),
            ApiError::PolicyAdmin(e) => policy_admin_error(&e),
            ApiError::InvalidSpec(errors) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-spec",
                format!("the job spec has {} problem(s)", errors.0.len()),
                Some(json!({ "fields": errors.0 })),
            ),
            ApiError::Policy(RunError::Chain(e)) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "policy-failed",
                format!(
                    "admission policy `{}` failed ({}); the job was not admitted",
                    e.plugin,
                    e.source.cause()
                ),
                Some(json!({ "plugin": e.plugin, "digest": e.digest, "cause": e.source.cause() })),
            ),
            ApiError::Policy(RunError::Unavailable(detail)) => {
                tracing::error!("policy runner unavailable: {detail}");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "policy evaluation is unavailable".into(),
                    None,
                )
            }
            ApiError::Internal(detail) => {
                tracing::error!("internal error: {detail}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error".into(),
                    None,
                )
            }
        };
        let mut body = json!({ "error": { "code": code, "message": message } });
        if let Some(d) = details {
            body["error"]["details"] = d;
        }
        (status, Json(body)).into_response()
    }
}
