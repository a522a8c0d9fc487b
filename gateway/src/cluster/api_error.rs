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

/// Whether the API server refused the call before serving it (429: its in-flight
/// limit or priority-and-fairness turned it away), so it certainly took no effect.
pub fn throttled(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 429)
}

/// The attempts of one call: [`ATTEMPTS`] of them, the waits between them doubling
/// from 100 ms up to 2 s.
#[derive(Debug)]
pub struct Backoff {
    attempt: u32,
    delay: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            attempt: 1,
            delay: Duration::from_millis(100),
        }
    }
}

impl Backoff {
    /// Waits before the next attempt; false (at once) when every attempt is spent.
    pub async fn next(&mut self) -> bool {
        if self.attempt >= ATTEMPTS {
            return false;
        }
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(2));
        self.attempt += 1;
        true
    }
}

/// Runs an API call, retrying transient failures with a doubling backoff.
pub async fn with_retry<T, F, Fut>(mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut backoff = Backoff::default();
    loop {
        match call().await {
            Err(e) if transient(&e) && backoff.next().await => {}
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
        assert!(throttled(&api(429)));
        assert!(!throttled(&api(503)), "a 5xx may follow a write");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_allows_every_attempt_then_stops() {
        let mut b = Backoff::default();
        let started = tokio::time::Instant::now();
        let mut retries = 0;
        while b.next().await {
            retries += 1;
        }
        assert_eq!(retries, ATTEMPTS - 1);
        // 100 + 200 + 400 + 800 + 1600 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(3100));
    }
}
