//! How Forge reads the API server's failures: each `kube::Error` is classified once,
//! here (the only place that knows the API server's status codes), and calls that fail
//! transiently (throttling, server errors, no answer) are retried with a doubling
//! backoff, so one bad moment of the API server does not fail a job or leave its
//! RayJob behind.

use std::time::Duration;

/// Attempts of one API call that fails transiently (public so that tests can fail
/// exactly one call's worth of them).
pub const ATTEMPTS: u32 = 6;

/// What an API failure means to Forge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Throttled (429), a server error (5xx) or no answer: worth retrying.
    Transient,
    /// The object does not exist (404).
    NotFound,
    /// An object of that name exists (409 AlreadyExists on create).
    AlreadyExists,
    /// The server refused the request itself (400, 403, 413, 422, …): retrying the
    /// same request will not help.
    Refused,
    /// Anything else (a client-side error, a decode failure).
    Other,
}

/// Classifies an API error.
pub fn classify(e: &kube::Error) -> Failure {
    match e {
        kube::Error::Api(s) => match s.code {
            429 | 500..=599 => Failure::Transient,
            404 => Failure::NotFound,
            409 => Failure::AlreadyExists,
            400..=499 => Failure::Refused,
            _ => Failure::Other,
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => Failure::Transient,
        _ => Failure::Other,
    }
}

/// The API server's own message for a failure (its `Status.message`), for a job's
/// reason; other failures as they display.
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

/// Whether an API error is worth retrying.
pub fn transient(e: &kube::Error) -> bool {
    classify(e) == Failure::Transient
}

/// Runs an API call, retrying transient failures with a doubling backoff.
pub async fn with_retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    let mut attempt = 1;
    loop {
        match call().await {
            Err(e) if attempt < ATTEMPTS && transient(&e) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("x", "Reason")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn classifies_by_status() {
        assert_eq!(classify(&api(429)), Failure::Transient);
        assert_eq!(classify(&api(503)), Failure::Transient);
        assert_eq!(classify(&api(404)), Failure::NotFound);
        assert_eq!(classify(&api(409)), Failure::AlreadyExists);
        assert_eq!(classify(&api(422)), Failure::Refused);
        assert_eq!(classify(&api(400)), Failure::Refused);
        assert_eq!(classify(&api(413)), Failure::Refused);
        assert_eq!(message(&api(413)), "x (Reason)");
    }
}
