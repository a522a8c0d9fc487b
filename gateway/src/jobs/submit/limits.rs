//! Per-team submission limits, so one team (a runaway script, a stolen token) cannot
//! flood the queue or the admission path for everyone else:
//!
//! - a **rate**: `FORGE_SUBMISSIONS_PER_MINUTE` submissions per team per minute on each
//!   replica, with bursts up to that many (GCRA, the `governor` crate). It is checked
//!   before the request body is read, so a refused submission costs almost nothing;
//!   the answer is 429 `rate-limited` with `Retry-After`. Per replica: behind N
//!   replicas a team gets up to N times the rate.
//! - a **queue cap**: `FORGE_MAX_QUEUED_PER_TEAM` jobs waiting per team, counted in the
//!   store (so across replicas); a submission beyond it is 429 `queue-full`, and
//!   nothing is stored. Jobs already queued are never dropped.
//!
//! Either is off at 0.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use http::StatusCode;
use serde_json::json;

/// How long a refused team should wait at least (`Retry-After` is whole seconds).
const MIN_RETRY: Duration = Duration::from_secs(1);

/// A team went over a submission limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Too many submissions per minute.
    #[error(
        "team {team} submits more than {per_minute} jobs per minute; retry in {}s",
        retry_after.as_secs()
    )]
    RateLimited {
        /// The team.
        team: String,
        /// The limit.
        per_minute: u32,
        /// When the next submission is allowed.
        retry_after: Duration,
    },
    /// Too many jobs waiting.
    #[error(
        "team {team} already has {queued} jobs waiting (at most {limit}); wait for some to start \
         or cancel some"
    )]
    QueueFull {
        /// The team.
        team: String,
        /// Jobs it has waiting.
        queued: u64,
        /// The limit.
        limit: u64,
    },
}

impl LimitError {
    /// When to try again.
    pub fn retry_after(&self) -> Duration {
        match self {
            LimitError::RateLimited { retry_after, .. } => *retry_after,
            // A queued job starts or is cancelled on no schedule: a polite default.
            LimitError::QueueFull { .. } => Duration::from_secs(30),
        }
    }
}

/// 429 with `Retry-After`: `rate-limited` or `queue-full`, and the limit in the details.
impl crate::answer::Answers for LimitError {
    fn answer(&self) -> crate::answer::Answer {
        let retry = self.retry_after().as_secs().max(1);
        let (code, details) = match self {
            LimitError::RateLimited { per_minute, .. } => (
                "rate-limited",
                json!({ "perMinute": per_minute, "retryAfterSeconds": retry }),
            ),
            LimitError::QueueFull { queued, limit, .. } => (
                "queue-full",
                json!({ "queued": queued, "limit": limit, "retryAfterSeconds": retry }),
            ),
        };
        crate::answer::Answer::new(StatusCode::TOO_MANY_REQUESTS, code, self.to_string())
            .details(details)
            .retry_after(retry)
    }
}

/// The submission limits of one replica.
pub struct SubmissionLimits {
    rate: Option<(u32, DefaultKeyedRateLimiter<String>)>,
    max_queued: u64,
}

impl std::fmt::Debug for SubmissionLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubmissionLimits")
            .field("per_minute", &self.rate.as_ref().map(|(n, _)| n))
            .field("max_queued", &self.max_queued)
            .finish()
    }
}

impl SubmissionLimits {
    /// `per_minute` submissions per team and minute, `max_queued` waiting jobs per team
    /// (0: no limit).
    pub fn new(per_minute: u32, max_queued: u64) -> SubmissionLimits {
        SubmissionLimits {
            rate: NonZeroU32::new(per_minute)
                .map(|n| (per_minute, RateLimiter::keyed(Quota::per_minute(n)))),
            max_queued,
        }
    }

    /// Takes one submission of `team` from its rate.
    pub fn check_rate(&self, team: &str) -> Result<(), LimitError> {
        let Some((per_minute, limiter)) = &self.rate else {
            return Ok(());
        };
        limiter.check_key(&team.to_owned()).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            LimitError::RateLimited {
                team: team.to_owned(),
                per_minute: *per_minute,
                retry_after: wait.max(MIN_RETRY),
            }
        })
    }

    /// Whether `team`, with `queued` jobs waiting, may queue one more.
    pub fn check_queue(&self, team: &str, queued: u64) -> Result<(), LimitError> {
        if self.max_queued == 0 || queued < self.max_queued {
            return Ok(());
        }
        Err(LimitError::QueueFull {
            team: team.to_owned(),
            queued,
            limit: self.max_queued,
        })
    }

    /// Whether a queue cap is set (the count is only worth reading then).
    pub fn caps_queue(&self) -> bool {
        self.max_queued > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_team_over_its_rate_waits_and_other_teams_do_not() {
        let l = SubmissionLimits::new(3, 0);
        for _ in 0..3 {
            l.check_rate("a").expect("within the burst");
        }
        let e = l.check_rate("a").expect_err("over the rate");
        assert!(
            matches!(e, LimitError::RateLimited { per_minute: 3, .. }),
            "{e}"
        );
        // 3 per minute: one more every 20 s.
        let wait = e.retry_after();
        assert!(
            wait >= MIN_RETRY && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        l.check_rate("b").expect("another team has its own rate");
    }

    #[test]
    fn the_queue_cap_counts_waiting_jobs() {
        let l = SubmissionLimits::new(0, 2);
        assert!(l.caps_queue());
        l.check_queue("a", 1).expect("under the cap");
        let e = l.check_queue("a", 2).expect_err("at the cap");
        assert_eq!(
            e,
            LimitError::QueueFull {
                team: "a".into(),
                queued: 2,
                limit: 2
            }
        );
        let off = SubmissionLimits::new(0, 0);
        assert!(!off.caps_queue());
        off.check_queue("a", u64::MAX - 1).expect("no cap");
        off.check_rate("a").expect("no rate");
    }
}
