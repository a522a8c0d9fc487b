//! [`Answer`]: what a failed request answers — a status, a stable machine-readable code,
//! a message for people, details (the field, the plugin, …) — and [`Answers`], the
//! trait through which every domain error declares its answer beside its definition
//! (`jobs/error.rs`, `uploads/error.rs`, `policy/error.rs`, …). The HTTP edge only
//! renders answers (`http::error`), as `{"error": {"code", "message", "details"}}`.
//!
//! Statuses are chosen by variant, never by a code or a message. An answer whose cause
//! is not the client's ([`Answer::internal`], [`Answer::storage_unavailable`]) says so
//! without the cause, and is marked [`Answer::logged`]: the edge hands the error itself
//! to its logging middleware, which logs it with the request (never echoed).
//!
//! Conventions of the error enums: a wrapped cause is the variant's `#[source]` (or
//! `#[from]`) — a typed error, not a string of it — and the variant's message includes
//! the cause's, so that a log line of `{e}` is complete. [`report`] prints a whole
//! chain on one line without those repeats.

mod foreign;

use http::StatusCode;
use serde_json::{Value, json};

/// A cause of any type, kept as an error (not its text) by the variants that wrap
/// failures of many kinds.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An operation that failed (`what` was being done) with its cause: the variant of
/// the domain errors for failures of the gateway's own work (a spool, a blocking task).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct Failed {
    pub what: String,
    #[source]
    pub source: BoxError,
}

impl Failed {
    pub fn new(what: impl Into<String>, e: impl Into<BoxError>) -> Self {
        Failed {
            what: what.into(),
            source: e.into(),
        }
    }
}

/// What a failure answers.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    /// Stable, machine-readable.
    pub code: &'static str,
    /// For people.
    pub message: String,
    pub details: Option<Value>,
    /// `Retry-After` seconds (429s, 503s).
    pub retry_after: Option<u64>,
    /// `WWW-Authenticate` (401s).
    pub challenge: Option<&'static str>,
    /// The cause is not the client's: the edge logs the error, the answer never
    /// carries it.
    pub logged: bool,
}

impl Answer {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Answer {
            status,
            code,
            message: message.into(),
            details: None,
            retry_after: None,
            challenge: None,
            logged: false,
        }
    }

    /// A bug or an unexpected dependency failure: 500 `internal`, logged.
    pub fn internal() -> Self {
        Answer {
            logged: true,
            ..Answer::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            )
        }
    }

    /// Object storage is down: nothing was `changed` (stored, changed…); 503, logged.
    pub fn storage_unavailable(changed: &str) -> Self {
        Answer {
            logged: true,
            ..Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage-unavailable",
                format!("object storage is unavailable; nothing was {changed}, try again"),
            )
        }
    }

    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Details naming only the request field concerned (`null`: none in particular).
    pub fn field<'a>(self, field: impl Into<Option<&'a str>>) -> Self {
        let field: Option<&str> = field.into();
        self.details(json!({ "field": field }))
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn challenge(mut self, challenge: &'static str) -> Self {
        self.challenge = Some(challenge);
        self
    }

    /// The same answer, logged by the edge (a refusal whose cause an operator must see).
    pub fn logged(mut self) -> Self {
        self.logged = true;
        self
    }
}

/// An error that knows what it answers a client.
pub trait Answers: std::error::Error + Send + Sync + 'static {
    fn answer(&self) -> Answer;
}

/// `e` and its causes on one line, `a: b: c`, leaving out a cause whose message the
/// line already carries (the convention above puts a cause's message in its wrapper's).
pub fn report(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("opening the store: {0}")]
    struct Wraps(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("starting")]
    struct Terse(#[source] Wraps);

    #[test]
    fn a_report_has_every_cause_once() {
        let io = || std::io::Error::other("disk full");
        assert_eq!(report(&Wraps(io())), "opening the store: disk full");
        assert_eq!(
            report(&Terse(Wraps(io()))),
            "starting: opening the store: disk full"
        );
    }

    #[test]
    fn internal_answers_are_logged_and_say_nothing_of_the_cause() {
        let a = Answer::internal();
        assert!(a.logged);
        assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(a.message, "internal error");
        let s = Answer::storage_unavailable("stored");
        assert!(s.logged && s.status == StatusCode::SERVICE_UNAVAILABLE);
        assert!(!Answer::new(StatusCode::NOT_FOUND, "not-found", "x").logged);
    }
}
