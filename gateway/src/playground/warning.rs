//! When a playground's users are told that it will be reclaimed: a fixed lead before
//! its next deadline (hard or idle TTL). One rule for the two places that tell them,
//! the TTL controller (`warnedAtMs` on the object) and an answer being streamed (an
//! SSE comment), so they never disagree on the moment.

/// How long before the reclaim the warning is given.
pub const WARN_LEAD_SECS: i64 = 300;

/// Whether, at `now_ms`, a reclaim due at `reclaim_at_ms` is to be announced.
pub fn warning_due(now_ms: i64, reclaim_at_ms: i64) -> bool {
    now_ms >= reclaim_at_ms - WARN_LEAD_SECS * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_is_due_from_the_lead_before_the_reclaim_on() {
        let at = 1_000_000_000;
        assert!(!warning_due(at - WARN_LEAD_SECS * 1000 - 1, at));
        assert!(warning_due(at - WARN_LEAD_SECS * 1000, at));
        assert!(warning_due(at + 1, at));
    }
}
