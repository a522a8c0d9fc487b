//! [`ApiError`]: what a handler fails with — any error that knows its answer
//! ([`Answers`]: the domain errors declare theirs beside their definitions), or one of
//! the edge's own ([`EdgeError`]: a malformed request, an oversized body, a deadline).
//! This module only renders an answer, `{"error": {"code", "message", "details"}}` with
//! its `WWW-Authenticate` / `Retry-After` headers, and hands an answer's cause that is
//! not the client's to [`log_failures`], the middleware that logs it with the request
//! (never echoed), as axum's error-handling example does with a response extension.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::answer::{Answer, Answers, BoxError, Failed, report};
use crate::metrics::Metrics;

/// Everything a handler can fail with.
#[derive(Debug)]
pub struct ApiError(Box<dyn Answers>);

impl<E: Answers> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(Box::new(e))
    }
}

impl ApiError {
    /// A malformed request: 400 with a stable code and the field.
    pub fn bad(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        EdgeError::BadRequest {
            code,
            field: field.into(),
            message: message.into(),
        }
        .into()
    }

    /// A failure of the handler's own work (spooling a body, …): 500, logged.
    pub fn internal(what: &'static str, e: impl Into<BoxError>) -> Self {
        EdgeError::Internal(Failed::new(what, e)).into()
    }

    /// What this error answers.
    pub fn answer(&self) -> Answer {
        self.0.answer()
    }

    /// The error and its causes on one line (what is logged).
    pub fn report(&self) -> String {
        report(self.0.as_ref())
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The edge's own refusals: what is wrong with the request itself, before any domain
/// operation ran.
#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    /// A part, a query parameter or the body's shape is malformed.
    #[error("{field}: {message}")]
    BadRequest {
        /// Stable code.
        code: &'static str,
        /// The request field.
        field: String,
        /// Why.
        message: String,
    },
    /// A member asked about another team (`?team=`).
    #[error("{0}")]
    ForbiddenTeam(String),
    /// The body (or a part of it) is larger than its limit.
    #[error("{field}: {message}")]
    TooLarge {
        /// The request field.
        field: String,
        /// Why.
        message: String,
    },
    /// The request took longer than its deadline.
    #[error("the request took longer than {0:?}")]
    Timeout(std::time::Duration),
    /// The handler's own work failed (a bug or the local disk): logged, not echoed.
    #[error(transparent)]
    Internal(#[from] Failed),
}

impl Answers for EdgeError {
    fn answer(&self) -> Answer {
        match self {
            EdgeError::BadRequest {
                code,
                field,
                message,
            } => Answer::new(StatusCode::BAD_REQUEST, code, message.clone()).field(field.as_str()),
            EdgeError::ForbiddenTeam(message) => {
                Answer::new(StatusCode::FORBIDDEN, "forbidden-team", message.clone()).field("team")
            }
            EdgeError::TooLarge { field, message } => Answer::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body-too-large",
                message.clone(),
            )
            .field(field.as_str()),
            EdgeError::Timeout(limit) => Answer::new(
                StatusCode::REQUEST_TIMEOUT,
                "request-timeout",
                format!(
                    "the request was not answered within {} s; nothing was changed unless \
                     the answer says so on retry",
                    limit.as_secs()
                ),
            ),
            EdgeError::Internal(_) => Answer::internal(),
        }
    }
}

/// The cause of an answer that is not the client's, handed from the response to
/// [`log_failures`].
#[derive(Debug, Clone)]
pub struct Failure {
    pub code: &'static str,
    /// The error and its causes on one line.
    pub report: Arc<str>,
}

/// Renders an answer; `failure` is attached for the logging middleware.
pub fn render(answer: Answer, failure: Option<Failure>) -> Response {
    let mut body = json!({ "error": { "code": answer.code, "message": answer.message } });
    if let Some(d) = answer.details {
        body["error"]["details"] = d;
    }
    let mut response = (answer.status, Json(body)).into_response();
    if let Some(c) = answer.challenge {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
    }
    if let Some(s) = answer.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    if let Some(f) = failure {
        response.extensions_mut().insert(f);
    }
    response
}

impl ApiError {
    /// The logging middleware's record of this error, when its answer is logged.
    pub fn failure(&self, answer: &Answer) -> Option<Failure> {
        answer.logged.then(|| Failure {
            code: answer.code,
            report: self.report().into(),
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answer = self.answer();
        let failure = self.failure(&answer);
        render(answer, failure)
    }
}

/// The middleware that logs what [`Failure`]s the responses carry, with the request
/// they answered (method, path, request id), once.
pub async fn log_failures(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let response = next.run(req).await;
    if let Some(f) = response.extensions().get::<Failure>() {
        metrics.http_failure(f.code);
        tracing::error!(
            %method,
            path,
            request_id = request_id.as_deref().unwrap_or("-"),
            status = response.status().as_u16(),
            code = f.code,
            "{}",
            f.report
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthError;
    use crate::jobs::JobError;
    use crate::policy::{Malformed, PolicyAdminError};
    use forge_capsule::CapsuleError;

    async fn body_of(r: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(r.into_body(), 1 << 16)
            .await
            .expect("body");
        serde_json::from_slice(&bytes).expect("json")
    }
    #[tokio::test]
    async fn auth_errors_are_401_with_a_challenge_or_403() {
        let missing = ApiError::from(AuthError::Missing).into_response();
        assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(missing.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let body = body_of(missing).await;
        assert_eq!(body["error"]["code"], "unauthenticated");
        assert_eq!(body["error"]["message"], "missing bearer token");

        let invalid = ApiError::from(AuthError::Invalid).into_response();
        assert_eq!(invalid.status(), StatusCode::UNAUTHORIZED);
        assert!(
            invalid.headers()[header::WWW_AUTHENTICATE]
                .to_str()
                .expect("ascii")
                .starts_with("Bearer")
        );

        let forbidden =
            ApiError::from(AuthError::Forbidden("admin role required".into())).into_response();
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        assert!(forbidden.headers().get(header::WWW_AUTHENTICATE).is_none());
        assert_eq!(body_of(forbidden).await["error"]["code"], "forbidden");
    }

    #[tokio::test]
    async fn internal_errors_are_not_echoed() {
        let r = ApiError::from(JobError::io(
            "spooling",
            std::io::Error::other("disk /secret/path full"),
        ))
        .into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_of(r).await;
        assert_eq!(body["error"]["code"], "internal");
        assert!(!body.to_string().contains("/secret/path"));
    }

    #[tokio::test]
    async fn a_logged_answer_hands_its_cause_to_the_middleware_only() {
        let r =
            ApiError::internal("spool dir", std::io::Error::other("/secret/path")).into_response();
        let failure = r
            .extensions()
            .get::<Failure>()
            .expect("a failure to log")
            .clone();
        assert_eq!(failure.code, "internal");
        assert_eq!(&*failure.report, "spool dir: /secret/path");
        assert!(!body_of(r).await.to_string().contains("/secret/path"));
        let refused = ApiError::bad("invalid-query", "state", "no").into_response();
        assert!(refused.extensions().get::<Failure>().is_none());
    }

    #[tokio::test]
    async fn variants_choose_statuses() {
        let cases: Vec<(ApiError, StatusCode, &str)> = vec![
            (
                JobError::NotFound("j".into()).into(),
                StatusCode::NOT_FOUND,
                "not-found",
            ),
            (
                JobError::InvalidCapsuleRef.into(),
                StatusCode::BAD_REQUEST,
                "invalid-capsule",
            ),
            (
                JobError::Capsule(CapsuleError::TooManyFiles { limit: 1 }).into(),
                StatusCode::BAD_REQUEST,
                "capsule.too_many_files",
            ),
            (
                JobError::Capsule(CapsuleError::TooLarge {
                    limit: 1,
                    total: 2,
                    largest: vec![],
                })
                .into(),
                StatusCode::PAYLOAD_TOO_LARGE,
                "capsule.too_large",
            ),
            (
                PolicyAdminError::malformed(Malformed::Version, "version", "bad").into(),
                StatusCode::BAD_REQUEST,
                "invalid-version",
            ),
            (
                PolicyAdminError::TooLarge { size: 2, limit: 1 }.into(),
                StatusCode::PAYLOAD_TOO_LARGE,
                "plugin.too-large",
            ),
            (
                PolicyAdminError::storage("plugins/x", "down").into(),
                StatusCode::SERVICE_UNAVAILABLE,
                "storage-unavailable",
            ),
            (
                PolicyAdminError::Component(forge_policy_host::LoadError::CompilerBusy {
                    running: 1,
                    waiting: 4,
                })
                .into(),
                StatusCode::SERVICE_UNAVAILABLE,
                "plugin.compiler-busy",
            ),
            (
                PolicyAdminError::Component(forge_policy_host::LoadError::TooComplex("x".into()))
                    .into(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "plugin.too-complex",
            ),
            (
                PolicyAdminError::Component(forge_policy_host::LoadError::CompileTimeout {
                    seconds: 120,
                })
                .into(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "plugin.compile-timeout",
            ),
            (
                PolicyAdminError::FailedUploads {
                    team: "a".into(),
                    per_hour: 1,
                    retry_after: std::time::Duration::from_secs(5),
                }
                .into(),
                StatusCode::TOO_MANY_REQUESTS,
                "rate-limited",
            ),
            (
                PolicyAdminError::ChainTooLong { count: 3, limit: 2 }.into(),
                StatusCode::UNPROCESSABLE_ENTITY,
                "policy.chain-too-long",
            ),
            (
                crate::playground::PlaygroundError::Disabled.into(),
                StatusCode::CONFLICT,
                "playgrounds-disabled",
            ),
            (
                crate::store::StoreError::BadCursor.into(),
                StatusCode::BAD_REQUEST,
                "invalid-query",
            ),
            (
                ApiError::bad("invalid-query", "state", "no"),
                StatusCode::BAD_REQUEST,
                "invalid-query",
            ),
        ];
        for (e, status, code) in cases {
            let r = e.into_response();
            assert_eq!(r.status(), status);
            assert_eq!(body_of(r).await["error"]["code"], code);
        }
    }
}
