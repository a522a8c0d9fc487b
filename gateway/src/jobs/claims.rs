//! Keys claimed by work in flight in this process, each held by a guard that releases
//! it when dropped (on every path: done, failed, or the task cancelled).
//!
//! Two users:
//! - the dispatcher claims a job from before its intent (queued → dispatched, with the
//!   RayJob's name) is stored until its create returns. The lifecycle controller's
//!   reconcile after a (re)list queues again a `dispatched` job whose RayJob does not
//!   exist — the intent of a leader that died before its create — and the same
//!   leader's own dispatch in flight looks exactly like that, so reconcile skips
//!   claimed jobs: their create's own outcome decides (a failed create puts the job
//!   back in the queue);
//! - the lifecycle's `InFlight` (`lifecycle/inflight.rs`) runs at most one background task
//!   per key.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The claimed keys.
#[derive(Debug, Default)]
pub struct Claims {
    keys: Mutex<HashSet<String>>,
}

/// Holds one key of [`Claims`] until dropped.
#[derive(Debug)]
pub struct Claim {
    claims: Arc<Claims>,
    key: String,
}

impl Claims {
    /// Claims `key`, or `None` when it is already claimed.
    pub fn try_claim(self: &Arc<Self>, key: &str) -> Option<Claim> {
        self.lock().insert(key.to_string()).then(|| Claim {
            claims: self.clone(),
            key: key.to_string(),
        })
    }

    /// Whether `key` is claimed.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains(key)
    }

    fn lock(&self) -> MutexGuard<'_, HashSet<String>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.claims.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_claimed_while_its_guard_lives_and_only_once() {
        let claims = Arc::new(Claims::default());
        let a = claims.try_claim("job-a").expect("a is free");
        let b = claims.try_claim("job-b").expect("b is free");
        assert!(claims.contains("job-a") && claims.contains("job-b"));
        assert!(
            claims.try_claim("job-a").is_none(),
            "a is held by its guard"
        );
        drop(a);
        assert!(!claims.contains("job-a"));
        assert!(claims.contains("job-b"));
        let again = claims.try_claim("job-a");
        assert!(again.is_some(), "a is free again once its guard is dropped");
        drop(b);
        assert!(!claims.contains("job-b"));
    }
}
