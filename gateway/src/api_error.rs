//! The one error type of the HTTP API, mapped to stable JSON:
//! `{"error": {"code": "...", "message": "...", "details": ...}}`.
//!
//! Codes are stable and machine-readable; messages are for people. Internal errors are
//! logged with their cause and answered with a generic message (never echoed).

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::auth::AuthError;
use crate::jobspec::SpecErrors;
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
    /// A bug or an unexpected dependency failure: logged, not echoed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code, message, details) = match self {
            ApiError::Auth(e) => return e.into_response(),
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
