//! Kubernetes API errors, rendered as `Status` bodies shaped exactly like the real
//! API server's (`kind: Status`, `reason`, `details{name,group,kind,causes}`, `code`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One field-level cause of an `Invalid` (422) error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, ...
    pub reason: String,
    /// Human-readable message, like the real server's (`Required value`, ...).
    pub message: String,
    /// Dotted field path (`spec.rayClusterSpec.workerGroupSpecs[0].groupName`).
    pub field: String,
}

/// An API error; every variant maps to one Kubernetes `Status` reason and HTTP code.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ApiError {
    /// 404 NotFound.
    #[error("{resource}{dot}{group} \"{name}\" not found", dot = if group.is_empty() { "" } else { "." })]
    NotFound {
        /// Resource plural (the real server puts it in `details.kind`).
        resource: String,
        /// API group.
        group: String,
        /// Object name.
        name: String,
    },
    /// 409 AlreadyExists.
    #[error("{resource}{dot}{group} \"{name}\" already exists", dot = if group.is_empty() { "" } else { "." })]
    AlreadyExists {
        /// Resource plural.
        resource: String,
        /// API group.
        group: String,
        /// Object name.
        name: String,
    },
    /// 409 Conflict.
    #[error("Operation cannot be fulfilled on {resource}{dot}{group} \"{name}\": {detail}", dot = if group.is_empty() { "" } else { "." })]
    Conflict {
        /// Resource plural.
        resource: String,
        /// API group.
        group: String,
        /// Object name.
        name: String,
        /// Why.
        detail: String,
    },
    /// 422 Invalid, with field causes.
    #[error("{kind}{dot}{group} \"{name}\" is invalid: {summary}", dot = if group.is_empty() { "" } else { "." }, summary = summarize(causes))]
    Invalid {
        /// Kind (the real server puts the kind here, not the plural).
        kind: String,
        /// API group.
        group: String,
        /// Object name.
        name: String,
        /// Field causes.
        causes: Vec<Cause>,
    },
    /// 400 BadRequest.
    #[error("{0}")]
    BadRequest(String),
    /// 405 MethodNotAllowed.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 410 Gone (reason Expired): resourceVersion or continue token too old.
    #[error("{0}")]
    Expired(String),
    /// 415 UnsupportedMediaType.
    #[error(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
    )]
    UnsupportedMediaType,
    /// 413 RequestEntityTooLarge (fault injection: what the API server answers for a
    /// body over its limit).
    #[error("{0}")]
    RequestEntityTooLarge(String),
    /// 500 InternalError (also used by fault injection).
    #[error("{0}")]
    Internal(String),
    /// 429 TooManyRequests (fault injection), with Retry-After seconds.
    #[error("Too many requests, please try again later.")]
    TooManyRequests {
        /// Seconds for the Retry-After header and `details.retryAfterSeconds`.
        retry_after: u32,
    },
    /// 403 Forbidden.
    #[error("{0}")]
    Forbidden(String),
    /// 401 Unauthorized: no bearer token, or not the server's.
    #[error("Unauthorized")]
    Unauthorized,
    /// 503 ServiceUnavailable: a proxy could not reach its backend (the API server's
    /// "error trying to reach service").
    #[error("{0}")]
    ServiceUnavailable(String),
}

fn summarize(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| {
            if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            }
        })
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } => 409,
            Self::Invalid { .. } => 422,
            Self::BadRequest(_) => 400,
            Self::MethodNotAllowed => 405,
            Self::Expired(_) => 410,
            Self::UnsupportedMediaType => 415,
            Self::RequestEntityTooLarge(_) => 413,
            Self::Internal(_) => 500,
            Self::TooManyRequests { .. } => 429,
            Self::Forbidden(_) => 403,
            Self::Unauthorized => 401,
            Self::ServiceUnavailable(_) => 503,
        }
    }

    /// The `Status.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } => "Conflict",
            Self::Invalid { .. } => "Invalid",
            Self::BadRequest(_) => "BadRequest",
            Self::MethodNotAllowed => "MethodNotAllowed",
            Self::Expired(_) => "Expired",
            Self::UnsupportedMediaType => "UnsupportedMediaType",
            Self::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            Self::Internal(_) => "InternalError",
            Self::TooManyRequests { .. } => "TooManyRequests",
            Self::Forbidden(_) => "Forbidden",
            Self::Unauthorized => "Unauthorized",
            Self::ServiceUnavailable(_) => "ServiceUnavailable",
        }
    }

    /// The full `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        let details = match self {
            Self::NotFound {
                resource,
                group,
                name,
            }
            | Self::AlreadyExists {
                resource,
                group,
                name,
            }
            | Self::Conflict {
                resource,
                group,
                name,
                ..
            } => {
                let mut d = json!({"name": name, "kind": resource});
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Self::Invalid {
                kind,
                group,
                name,
                causes,
            } => {
                let mut d = json!({
                    "name": name,
                    "kind": kind,
                    "causes": causes.iter().map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>(),
                });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Self::TooManyRequests { retry_after } => {
                Some(json!({"retryAfterSeconds": retry_after}))
            }
            Self::Internal(_) => Some(json!({"causes": [{"message": self.to_string()}]})),
            _ => None,
        };
        if let Some(d) = details {
            status["details"] = d;
        }
        status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.status().to_string();
        let mut resp = (
            code,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if let Self::TooManyRequests { retry_after } = self {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, retry_after.into());
        }
        resp
    }
}
