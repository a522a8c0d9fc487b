//! Waiting for conditions instead of sleeping: poll until a check holds or a deadline
//! passes, then fail with what was awaited and the last thing seen.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is checked.
const POLL: Duration = Duration::from_millis(25);

/// Polls `check` until it returns `Some`, at most `within`; panics naming `what` and
/// the last value `probe` saw otherwise.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Box<dyn Debug + Send>>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) => {
                assert!(
                    Instant::now() < deadline,
                    "timed out after {within:?} waiting for {what}; last seen: {last:?}"
                );
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `Err` with a value to report if the wait times out.
pub fn not_yet<D: Debug + Send + 'static>(seen: D) -> Box<dyn Debug + Send> {
    Box::new(seen)
}
