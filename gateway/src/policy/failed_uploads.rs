//! A brake on failed plugin uploads, per team.
//!
//! Every upload that gets as far as the component checks costs the gateway real work
//! (parsing, and compiling on the shared compile pool), and a refused upload stores
//! nothing, so it never counts against the team's plugin limits. Without a brake, a
//! team could keep the compiler busy for everyone with uploads that are bound to fail.
//! So failures are counted per team (GCRA, the `governor` crate:
//! `FORGE_PLUGIN_FAILED_UPLOADS_PER_HOUR`, bursts up to that many): once a team fails
//! more often than that, its uploads are refused with 429 `rate-limited` and
//! `Retry-After`, before anything is read or compiled, until its budget has refilled.
//! Successful uploads are not limited; admins' (global) uploads are not counted. Per
//! replica, like the submission rate.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use super::error::PolicyAdminError;

/// The failed-upload budget of every team on this replica.
pub struct FailedUploads {
    rate: Option<(u32, DefaultKeyedRateLimiter<String>)>,
    /// Teams refused until the given instant.
    blocked: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for FailedUploads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedUploads")
            .field("per_hour", &self.rate.as_ref().map(|(n, _)| n))
            .finish()
    }
}

impl FailedUploads {
    /// `per_hour` failures per team and hour (0: no brake).
    pub fn new(per_hour: u32) -> Self {
        FailedUploads {
            rate: NonZeroU32::new(per_hour)
                .map(|n| (per_hour, RateLimiter::keyed(Quota::per_hour(n)))),
            blocked: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `team` may upload now.
    pub fn admit(&self, team: &str) -> Result<(), PolicyAdminError> {
        let Some((per_hour, _)) = &self.rate else {
            return Ok(());
        };
        let now = Instant::now();
        let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        blocked.retain(|_, until| *until > now);
        match blocked.get(team) {
            Some(until) => Err(PolicyAdminError::FailedUploads {
                team: team.to_owned(),
                per_hour: *per_hour,
                retry_after: until.duration_since(now),
            }),
            None => Ok(()),
        }
    }

    /// Count a failed upload of `team`; over the budget, the team is refused until
    /// the budget has room again.
    pub fn record(&self, team: &str) {
        let Some((_, limiter)) = &self.rate else {
            return;
        };
        if let Err(not_until) = limiter.check_key(&team.to_owned()) {
            let wait = not_until
                .wait_time_from(DefaultClock::default().now())
                .max(Duration::from_secs(1));
            let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
            blocked.insert(team.to_owned(), Instant::now() + wait);
        }
    }
}

/// Whether a failed upload is the uploader's doing (and so counts against its
/// budget): not storage or internal trouble, and not a busy compiler.
pub fn counts_as_failure(e: &PolicyAdminError) -> bool {
    use PolicyAdminError as P;
    match e {
        P::Component(forge_policy_host::LoadError::CompilerBusy { .. }) => false,
        P::Malformed { .. }
        | P::Component(_)
        | P::Settings { .. }
        | P::LimitTooHigh { .. }
        | P::TooLarge { .. }
        | P::TeamLimit { .. }
        | P::VersionExists { .. } => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_team_over_its_failure_budget_is_refused_and_others_are_not() {
        let f = FailedUploads::new(2);
        // Within the burst: failures are counted, uploads still admitted.
        for _ in 0..2 {
            f.admit("a").expect("admitted");
            f.record("a");
        }
        f.admit("a").expect("still within the budget");
        f.record("a");
        let e = f.admit("a").expect_err("over the budget");
        match e {
            PolicyAdminError::FailedUploads {
                per_hour: 2,
                retry_after,
                ..
            } => {
                // 2 per hour: room for one more every 30 minutes.
                assert!(
                    retry_after > Duration::from_secs(60)
                        && retry_after <= Duration::from_secs(1800),
                    "{retry_after:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        f.admit("b").expect("another team has its own budget");
        FailedUploads::new(0).admit("a").expect("no brake");
    }

    #[test]
    fn only_the_uploaders_faults_count() {
        use forge_policy_host::LoadError;
        assert!(counts_as_failure(&PolicyAdminError::Component(
            LoadError::NotAComponent("x".into())
        )));
        assert!(!counts_as_failure(&PolicyAdminError::Component(
            LoadError::CompilerBusy {
                running: 1,
                waiting: 1
            }
        )));
        assert!(!counts_as_failure(&PolicyAdminError::storage(
            "plugins/x",
            "down"
        )));
    }
}
