//! [`ApiError`]: the one place where domain errors become HTTP answers — a status, a
//! stable machine-readable code, a message for people, and details (the field, the
//! plugin, …): `{"error": {"code": "...", "message": "...", "details": ...}}`.
//!
//! Statuses are chosen by matching error *variants*, never codes or messages. Internal
//! errors are logged with their cause and answered with a generic message (never
//! echoed).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use forge_capsule::{CapsuleError, CapsuleErrorKind};
use forge_policy_host::{LoadError, PluginError, RunError};
use serde_json::{Value, json};

use crate::auth::AuthError;
use crate::jobs::JobError;
use crate::jobs::limits::LimitError;
use crate::jobspec::SpecErrors;
use crate::playground::PlaygroundError;
use crate::policy::{EvalError, Malformed, PolicyAdminError};
use crate::uploads::UploadError;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Not authenticated, or not allowed.
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// The request body is not a valid JobSpec: every problem with its field path.
    #[error(transparent)]
    InvalidSpec(#[from] SpecErrors),
    /// A policy plugin failed, or the team's chain is unavailable; admission fails
    /// closed.
    #[error("policy failed: {0}")]
    Policy(#[from] EvalError),
    /// A job operation failed.
    #[error(transparent)]
    Job(JobError),
    /// An upload operation failed.
    #[error(transparent)]
    Upload(#[from] UploadError),
    /// A playground operation failed.
    #[error(transparent)]
    Playground(PlaygroundError),
    /// A policy-management operation failed.
    #[error(transparent)]
    PolicyAdmin(#[from] PolicyAdminError),
    /// The request itself is malformed (a part, a query parameter, the body's shape).
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
    /// The body is larger than the limit.
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
    /// A bug or an unexpected dependency failure: logged, not echoed.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// A malformed request.
    pub fn bad(code: &'static str, field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::BadRequest {
            code,
            field: field.into(),
            message: message.into(),
        }
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::PolicyAdmin(e.into())
    }
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

impl From<PlaygroundError> for ApiError {
    fn from(e: PlaygroundError) -> Self {
        match e {
            PlaygroundError::Policy(e) => ApiError::Policy(e),
            other => ApiError::Playground(other),
        }
    }
}

/// An answer: status, code, message, details.
struct Answer {
    status: StatusCode,
    code: &'static str,
    message: String,
    details: Option<Value>,
    /// `Retry-After` seconds (429s).
    retry_after: Option<u64>,
}

impl Answer {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Answer {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// A failure that is not the client's: logged, answered without detail.
    fn internal(what: &str, cause: &dyn std::fmt::Display) -> Self {
        tracing::error!("{what}: {cause}");
        Answer::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error",
        )
    }

    /// Object storage is down: nothing was stored.
    fn storage_unavailable(cause: &dyn std::fmt::Display, changed: &str) -> Self {
        tracing::error!("object store: {cause}");
        Answer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage-unavailable",
            format!("object storage is unavailable; nothing was {changed}, try again"),
        )
    }
}

fn capsule_answer(e: &CapsuleError) -> Answer {
    let status = match e.kind() {
        CapsuleErrorKind::Internal => return Answer::internal("packing a capsule", e),
        CapsuleErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        CapsuleErrorKind::Rejected => StatusCode::BAD_REQUEST,
    };
    Answer::new(status, e.code(), e.to_string()).details(json!({ "field": "code" }))
}

/// `Retry-After` of a playground the policy would queue.
const PLAYGROUND_RETRY_S: u64 = 30;

fn job_answer(e: JobError) -> Answer {
    match e {
        JobError::NotFound(id) => Answer::new(
            StatusCode::NOT_FOUND,
            "not-found",
            format!("job {id} not found"),
        ),
        JobError::Rejected {
            job_id,
            code,
            message,
            field,
            plugin,
        } => Answer::new(StatusCode::FORBIDDEN, "policy-rejected", message)
            .details(json!({ "reason": code, "field": field, "plugin": plugin, "jobId": job_id })),
        JobError::Capsule(e) => capsule_answer(&e),
        e @ JobError::InvalidCapsuleRef => {
            Answer::new(StatusCode::BAD_REQUEST, "invalid-capsule", e.to_string())
                .details(json!({ "field": "capsule" }))
        }
        e @ JobError::UnknownCapsule(_) => Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown-capsule",
            e.to_string(),
        )
        .details(json!({ "field": "capsule" })),
        JobError::Limit(ref limit) => {
            let retry = limit.retry_after().as_secs().max(1);
            let (code, details) = match limit {
                LimitError::RateLimited { per_minute, .. } => (
                    "rate-limited",
                    json!({ "perMinute": per_minute, "retryAfterSeconds": retry }),
                ),
                LimitError::QueueFull { queued, limit, .. } => (
                    "queue-full",
                    json!({ "queued": queued, "limit": limit, "retryAfterSeconds": retry }),
                ),
            };
            Answer::new(StatusCode::TOO_MANY_REQUESTS, code, limit.to_string())
                .details(details)
                .retry_after(retry)
        }
        JobError::NotCancellable { id, state } => Answer::new(
            StatusCode::CONFLICT,
            "not-cancellable",
            format!("job {id} is {state} and cannot be cancelled"),
        )
        .details(json!({ "state": state })),
        JobError::LogNotAvailable { ref log, .. } => {
            let field = if log.starts_with("pod ") {
                "pod"
            } else {
                "name"
            };
            Answer::new(StatusCode::NOT_FOUND, "logs-not-archived", e.to_string())
                .details(json!({ "field": field }))
        }
        JobError::BadCapsuleLink => {
            Answer::new(StatusCode::FORBIDDEN, "bad-signature", e.to_string())
                .details(json!({ "field": "sig" }))
        }
        JobError::CapsuleLinkEnded { state, .. } => {
            Answer::new(StatusCode::GONE, "job-ended", e.to_string())
                .details(json!({ "state": state }))
        }
        JobError::LogsExpired { deleted_at_ms, .. } => {
            Answer::new(StatusCode::GONE, "logs-expired", e.to_string())
                .details(json!({ "deletedAtMs": deleted_at_ms }))
        }
        JobError::ObjectStore(e) => Answer::storage_unavailable(&e, "stored"),
        e @ JobError::NotReady(_) => {
            Answer::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", e.to_string())
        }
        JobError::InvalidSpec(_) | JobError::Policy(_) => {
            // Converted to their own variants by `From<JobError>`; kept total here.
            Answer::internal("unconverted job error", &"spec/policy")
        }
        other @ (JobError::Build(_)
        | JobError::Store(_)
        | JobError::Kube(_)
        | JobError::Io(_)
        | JobError::Deposed(_)) => Answer::internal("job operation failed", &other),
    }
}

fn playground_answer(e: PlaygroundError) -> Answer {
    let message = e.to_string();
    match e {
        PlaygroundError::Invalid { field, .. } => Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-playground",
            message,
        )
        .details(json!({ "field": field })),
        PlaygroundError::NotFound(_) => Answer::new(StatusCode::NOT_FOUND, "not-found", message),
        PlaygroundError::Ended { state, .. } => {
            Answer::new(StatusCode::CONFLICT, "playground-ended", message)
                .details(json!({ "state": state }))
        }
        PlaygroundError::NotReady(_) => Answer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "playground-not-ready",
            message,
        ),
        PlaygroundError::Disabled => {
            Answer::new(StatusCode::NOT_IMPLEMENTED, "playgrounds-disabled", message)
        }
        PlaygroundError::Rejected {
            code,
            message,
            field,
            plugin,
        } => Answer::new(StatusCode::FORBIDDEN, "policy-rejected", message)
            .details(json!({ "reason": code, "field": field, "plugin": plugin })),
        // Playgrounds do not wait in the training queue: try again once the team's
        // GPUs (or the cluster's) are free.
        PlaygroundError::NoRoom { code, message } => {
            Answer::new(StatusCode::TOO_MANY_REQUESTS, "policy-queued", message)
                .details(json!({ "reason": code }))
                .retry_after(PLAYGROUND_RETRY_S)
        }
        e @ PlaygroundError::ClusterNotReady(_) => {
            Answer::new(StatusCode::SERVICE_UNAVAILABLE, "not-ready", e.to_string())
        }
        PlaygroundError::Policy(_) => Answer::internal("unconverted playground error", &"policy"),
        other @ (PlaygroundError::Store(_) | PlaygroundError::Kube(_)) => {
            Answer::internal("playground operation failed", &other)
        }
    }
}

fn upload_answer(e: UploadError) -> Answer {
    let message = e.to_string();
    let bad = StatusCode::BAD_REQUEST;
    match e {
        UploadError::NotFound(_) => Answer::new(StatusCode::NOT_FOUND, "upload.not-found", message)
            .details(json!({ "field": "id" })),
        UploadError::CapsuleAbsent(_) => {
            Answer::new(StatusCode::NOT_FOUND, "unknown-capsule", message)
                .details(json!({ "field": "digest" }))
        }
        UploadError::InvalidDigest => {
            Answer::new(bad, "invalid-digest", message).details(json!({ "field": "digest" }))
        }
        UploadError::BadSize { size, .. } => {
            // Nothing to upload is a malformed request, not a large one.
            let status = if size == 0 {
                bad
            } else {
                StatusCode::PAYLOAD_TOO_LARGE
            };
            Answer::new(status, "upload.bad-size", message).details(json!({ "field": "size" }))
        }
        UploadError::TooManySessions { ref open, .. } => Answer::new(
            StatusCode::TOO_MANY_REQUESTS,
            "upload.too-many-sessions",
            message,
        )
        .details(json!({ "field": null, "open": open })),
        UploadError::BadRange(_) => Answer::new(bad, "upload.bad-range", message)
            .details(json!({ "field": "content-range" })),
        UploadError::ChunkTooLarge { limit, .. } => Answer::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "upload.chunk-too-large",
            message,
        )
        .details(json!({ "field": "content-range", "limit": limit })),
        UploadError::BodyLength { .. } => {
            Answer::new(bad, "upload.body-length", message).details(json!({ "field": "body" }))
        }
        UploadError::Interrupted(_) => {
            Answer::new(bad, "upload.interrupted", message).details(json!({ "field": "body" }))
        }
        UploadError::Incomplete { ref missing } => {
            Answer::new(StatusCode::CONFLICT, "upload.incomplete", message)
                .details(json!({ "field": null, "missing": missing }))
        }
        UploadError::DigestMismatch { .. } => Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "upload.digest-mismatch",
            message,
        )
        .details(json!({ "field": "digest" })),
        UploadError::NotCanonical { .. } => Answer::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "upload.not-canonical",
            message,
        )
        .details(json!({ "field": "body" })),
        UploadError::Capsule(e) => capsule_answer(&e),
        UploadError::ObjectStore(e) => Answer::storage_unavailable(&e, "stored"),
        other @ (UploadError::Io(_) | UploadError::Store(_)) => Answer::internal("upload", &other),
    }
}

/// How long a client should wait when every plugin compile thread is busy.
const COMPILER_BUSY_RETRY_S: u64 = 10;

fn component_code(e: &LoadError) -> &'static str {
    match e {
        LoadError::NotAComponent(_) => "plugin.not-a-component",
        LoadError::ForbiddenImport(_) => "plugin.forbidden-import",
        LoadError::WrongWorld { .. } | LoadError::MissingExports(_) => "plugin.wrong-world",
        LoadError::Limits(_) => "plugin.limits",
        LoadError::TooComplex(_) => "plugin.too-complex",
        LoadError::CompileTimeout { .. } => "plugin.compile-timeout",
        _ => "plugin.compile-failed",
    }
}

fn policy_admin_answer(e: PolicyAdminError) -> Answer {
    use PolicyAdminError as P;
    let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
    let message = e.to_string();
    match e {
        P::Malformed { what, field, .. } => {
            let code = match what {
                Malformed::Name => "invalid-name",
                Malformed::Version => "invalid-version",
                Malformed::Link => "invalid-policy",
            };
            Answer::new(StatusCode::BAD_REQUEST, code, message).details(json!({ "field": field }))
        }
        P::Component(LoadError::CompilerBusy { .. }) => Answer::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "plugin.compiler-busy",
            message,
        )
        .retry_after(COMPILER_BUSY_RETRY_S)
        .details(json!({ "field": null })),
        P::Component(ref load) => Answer::new(unprocessable, component_code(load), message)
            .details(json!({ "field": "component" })),
        P::FailedUploads { retry_after, .. } => {
            let seconds = retry_after.as_secs().max(1);
            Answer::new(StatusCode::TOO_MANY_REQUESTS, "rate-limited", message)
                .retry_after(seconds)
                .details(json!({ "field": null, "retryAfterSeconds": seconds }))
        }
        P::ChainTooLong { limit, .. } => {
            Answer::new(unprocessable, "policy.chain-too-long", message)
                .details(json!({ "field": "plugins", "limit": limit }))
        }
        P::Settings { plugin, field, .. } => {
            Answer::new(unprocessable, "plugin.invalid-settings", message)
                .details(json!({ "field": field, "plugin": plugin }))
        }
        P::LimitTooHigh { field, .. } => {
            Answer::new(unprocessable, "plugin.limit-too-high", message)
                .details(json!({ "field": field }))
        }
        P::TooLarge { .. } => {
            Answer::new(StatusCode::PAYLOAD_TOO_LARGE, "plugin.too-large", message)
                .details(json!({ "field": "component" }))
        }
        P::TeamLimit { .. } => Answer::new(unprocessable, "plugin.team-limit", message)
            .details(json!({ "field": null })),
        P::VersionExists { digest, .. } => {
            Answer::new(StatusCode::CONFLICT, "plugin.version-exists", message)
                .details(json!({ "field": "version", "digest": digest }))
        }
        P::UnknownPlugin { field, .. } => {
            Answer::new(unprocessable, "policy.unknown-plugin", message)
                .details(json!({ "field": field }))
        }
        P::VersionConflict {
            expected, current, ..
        } => Answer::new(StatusCode::CONFLICT, "policy.version-conflict", message).details(
            json!({ "field": "expectedVersion", "expected": expected, "current": current }),
        ),
        P::NothingToRollBack { .. } => {
            Answer::new(StatusCode::CONFLICT, "policy.no-previous-version", message)
                .details(json!({ "field": null }))
        }
        P::Forbidden(_) => Answer::new(StatusCode::FORBIDDEN, "forbidden", message)
            .details(json!({ "field": null })),
        P::NotFound(_) => Answer::new(StatusCode::NOT_FOUND, "not-found", message)
            .details(json!({ "field": null })),
        P::Storage(cause) => Answer::storage_unavailable(&cause, "changed"),
        other @ (P::Store(_) | P::Internal(_)) => Answer::internal("policy management", &other),
    }
}

fn auth_answer(e: &AuthError) -> (Answer, Option<&'static str>) {
    match e {
        AuthError::Missing => (
            Answer::new(StatusCode::UNAUTHORIZED, "unauthenticated", e.to_string()),
            Some("Bearer"),
        ),
        AuthError::Invalid => (
            Answer::new(StatusCode::UNAUTHORIZED, "unauthenticated", e.to_string()),
            Some("Bearer error=\"invalid_token\""),
        ),
        AuthError::Forbidden(_) => (
            Answer::new(StatusCode::FORBIDDEN, "forbidden", e.to_string()),
            None,
        ),
    }
}

impl ApiError {
    /// The status and the message a person is shown (the web console renders it as a
    /// page; internal causes are logged here, not shown).
    pub fn status_and_message(self) -> (StatusCode, String) {
        let (answer, _) = self.answer();
        (answer.status, answer.message)
    }

    fn answer(self) -> (Answer, Option<&'static str>) {
        let mut challenge = None;
        let answer = match self {
            ApiError::Auth(e) => {
                let (answer, c) = auth_answer(&e);
                challenge = c;
                answer
            }
            ApiError::Job(e) => job_answer(e),
            ApiError::Upload(e) => upload_answer(e),
            ApiError::Playground(e) => playground_answer(e),
            ApiError::PolicyAdmin(e) => policy_admin_answer(e),
            ApiError::InvalidSpec(errors) => Answer::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-spec",
                format!("the job spec has {} problem(s)", errors.total),
            )
            .details(json!({
                "fields": errors.errors,
                "total": errors.total,
                "omitted": errors.omitted(),
            })),
            ApiError::Policy(EvalError::Run(RunError::Chain(e))) => {
                // A widening is the team plugin's own fault and says which field; other
                // failures are reported by cause only.
                let what = match &e.source {
                    PluginError::Widened(w) => format!("widened: {w}"),
                    other => other.cause().to_string(),
                };
                Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "policy-failed",
                    format!(
                        "admission policy `{}` failed ({what}); the job was not admitted",
                        e.plugin
                    ),
                )
                .details(chain_failure_details(&e))
            }
            ApiError::Policy(EvalError::ScopeUnavailable {
                scope,
                version,
                reason,
            }) => {
                tracing::error!(%scope, version, "admission refused, the chain is unavailable: {reason}");
                Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "policy-unavailable",
                    format!(
                        "policy `{scope}` (version {version}) cannot be loaded, so this team's \
                         admissions fail closed; an admin must fix or replace it"
                    ),
                )
                .details(json!({ "scope": scope, "version": version }))
            }
            ApiError::Policy(EvalError::Run(RunError::Unavailable(detail))) => {
                tracing::error!("policy runner unavailable: {detail}");
                Answer::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "policy evaluation is unavailable",
                )
            }
            ApiError::BadRequest {
                code,
                field,
                message,
            } => Answer::new(StatusCode::BAD_REQUEST, code, message)
                .details(json!({ "field": field })),
            ApiError::ForbiddenTeam(message) => {
                Answer::new(StatusCode::FORBIDDEN, "forbidden-team", message)
                    .details(json!({ "field": "team" }))
            }
            ApiError::TooLarge { field, message } => {
                Answer::new(StatusCode::PAYLOAD_TOO_LARGE, "body-too-large", message)
                    .details(json!({ "field": field }))
            }
            ApiError::Timeout(limit) => Answer::new(
                StatusCode::REQUEST_TIMEOUT,
                "request-timeout",
                format!(
                    "the request was not answered within {} s; nothing was changed unless \
                     the answer says so on retry",
                    limit.as_secs()
                ),
            ),
            ApiError::Internal(detail) => Answer::internal("internal error", &detail),
        };
        (answer, challenge)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (answer, challenge) = self.answer();
        let mut body = json!({ "error": { "code": answer.code, "message": answer.message } });
        if let Some(d) = answer.details {
            body["error"]["details"] = d;
        }
        let mut response = (answer.status, Json(body)).into_response();
        if let Some(c) = challenge {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        if let Some(s) = answer.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        response
    }
}

/// Details of a chain that failed closed: the plugin and the cause, and for a team link
/// that widened the placement the host's own account of which field it widened (host
/// text, never the plugin's — a plugin's trap or output is logged, not echoed).
fn chain_failure_details(e: &forge_policy_host::ChainError) -> Value {
    let mut details = json!({ "plugin": e.plugin, "digest": e.digest, "cause": e.source.cause() });
    if let PluginError::Widened(w) = &e.source {
        // The gateway's own description of the widening (never the plugin's output).
        details["field"] = json!(w.field);
        details["reason"] = json!(w.to_string());
    }
    details
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(r: Response) -> Value {
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
        let r = ApiError::from(JobError::Io("disk /secret/path full".into())).into_response();
        assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = body_of(r).await;
        assert_eq!(body["error"]["code"], "internal");
        assert!(!body.to_string().contains("/secret/path"));
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
                PolicyAdminError::Storage("down".into()).into(),
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
