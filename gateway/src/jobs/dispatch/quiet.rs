//! A pass with nothing to decide. A pass decides from three inputs that change
//! only by events: the store (any job or usage written, by this replica or another:
//! its change version), the cluster (any Node or Pod event: the capacity caches'
//! generation) and the policy (any chain or setting changed: its generation). When
//! none moved since a pass that *settled* — it dispatched, rejected and preempted
//! nothing, no chain failed, and nobody waits on a preemption — a new pass would
//! decide exactly what that one did: every queued job still does not fit, or is still
//! told to wait by the same decision. So it is skipped, and an idle pass costs a
//! store read however long the queue is.
//!
//! What moves by time alone is caught up by a full pass at least every
//! [`FULL_EVERY`]: the decay of the teams' usage (the order and the standings' shares;
//! the charges of the skipped interval are made then, from the same holdings), and
//! the preemption windows and protections that expire. That is kube-scheduler's rule
//! too: pods it could not place are retried on cluster events, and all of them every
//! 30 s.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A full pass runs at least this often, even when nothing changed.
pub const FULL_EVERY: Duration = Duration::from_secs(30);

/// What a pass decides from, as versions (read before the pass reads the inputs
/// themselves, so that a change during the pass shows as a change next time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// The store's change version.
    pub store: u64,
    /// The capacity caches' generation.
    pub cluster: u64,
    /// The policy's generation.
    pub policy: u64,
}

/// The last settled pass's inputs and when it ran (one dispatcher's, one term's).
#[derive(Debug, Default)]
pub struct QuietPasses {
    settled: Mutex<Option<(Inputs, Instant)>>,
}

impl QuietPasses {
    /// Whether a pass on `inputs` at `now` has nothing to decide.
    pub fn nothing_to_decide(&self, inputs: &Inputs, now: Instant) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|(last, at)| last == inputs && now.duration_since(*at) < FULL_EVERY)
    }

    /// A full pass on `inputs` (`None`: the store has no change version) ended at
    /// `at`, `settled` or not.
    pub fn full_pass(&self, inputs: Option<Inputs>, settled: bool, at: Instant) {
        *self.lock() = inputs.filter(|_| settled).map(|i| (i, at));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Inputs, Instant)>> {
        self.settled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INPUTS: Inputs = Inputs {
        store: 7,
        cluster: 3,
        policy: 2,
    };

    #[test]
    fn only_a_settled_pass_on_the_same_inputs_within_the_interval_is_quiet() {
        let quiet = QuietPasses::default();
        let t0 = Instant::now();
        assert!(!quiet.nothing_to_decide(&INPUTS, t0), "no pass yet");
        quiet.full_pass(Some(INPUTS), true, t0);
        assert!(quiet.nothing_to_decide(&INPUTS, t0 + Duration::from_secs(1)));
        for moved in [
            Inputs { store: 8, ..INPUTS },
            Inputs {
                cluster: 4,
                ..INPUTS
            },
            Inputs {
                policy: 3,
                ..INPUTS
            },
        ] {
            assert!(!quiet.nothing_to_decide(&moved, t0), "{moved:?}");
        }
        assert!(
            !quiet.nothing_to_decide(&INPUTS, t0 + FULL_EVERY),
            "time alone moves the usage: a full pass is due"
        );
    }

    #[test]
    fn an_unsettled_pass_or_a_store_without_versions_is_never_followed_by_a_quiet_one() {
        let quiet = QuietPasses::default();
        let t0 = Instant::now();
        quiet.full_pass(Some(INPUTS), true, t0);
        quiet.full_pass(Some(INPUTS), false, t0);
        assert!(!quiet.nothing_to_decide(&INPUTS, t0), "it dispatched");
        quiet.full_pass(Some(INPUTS), true, t0);
        quiet.full_pass(None, true, t0);
        assert!(!quiet.nothing_to_decide(&INPUTS, t0), "no change version");
    }
}
