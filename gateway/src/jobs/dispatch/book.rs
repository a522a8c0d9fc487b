//! What a dispatcher pass knows of recent preemptions (issue 38), read once per pass
//! from the store's records of the policy's window (and every open notice): how often
//! each job was preempted in the window (so nothing cycles), which preemptors hold
//! GPUs freed for them, and how each released victim answered its last notice — the
//! planner costs a job that checkpointed on it at the seconds that took
//! ([`LastNotice`]).

use rustc_hash::FxHashMap;

use crate::jobs::preemption_plan::LastNotice;
use crate::store::preemptions::PreemptionRecord;

/// How long a preemptor keeps its hold once its last victim was released (the
/// victims' pods still have to go).
const HOLD_AFTER_RELEASE_MS: i64 = 5 * 60 * 1000;

/// What a pass knows of recent preemptions (read once per pass).
#[derive(Debug, Default)]
pub(super) struct Book {
    /// Job → times it was preempted within the window.
    pub(super) in_window: FxHashMap<String, u32>,
    /// Preemptor → how many of its victims' notices run or ended within the hold.
    pub(super) holding: FxHashMap<String, u32>,
    /// Job → how it answered its last notice of the window whose loss was measured
    /// at its release, and when that notice was given (and to which attempt).
    answered: FxHashMap<String, ((i64, u32), LastNotice)>,
}

impl Book {
    /// The book of `records` (those of the window, and every open one) at `now`.
    pub(super) fn of(records: &[PreemptionRecord], now: i64) -> Book {
        let mut book = Book::default();
        for p in records {
            *book.in_window.entry(p.job_id.clone()).or_default() += 1;
            if p.released_ms
                .is_none_or(|r| now - r < HOLD_AFTER_RELEASE_MS)
            {
                *book.holding.entry(p.by_job.clone()).or_default() += 1;
            }
            if let Some(answer) = answer(p) {
                let given = (p.at_ms, p.attempt);
                let last = book
                    .answered
                    .entry(p.job_id.clone())
                    .or_insert((given, answer));
                if given >= last.0 {
                    *last = (given, answer);
                }
            }
        }
        book
    }

    /// How `job` answered its last notice of the window.
    pub(super) fn last_notice(&self, job: &str) -> LastNotice {
        self.answered
            .get(job)
            .map_or(LastNotice::Unknown, |(_, answer)| *answer)
    }

    /// Whether `job` holds freed GPUs (its victims' notices run or just ended).
    pub(super) fn holds(&self, job: &str) -> bool {
        self.holding.contains_key(job)
    }
}

/// How a released victim answered its notice: it saved its work if what its release
/// lost is no more than its GPUs × the time from the notice to the release — that
/// is, its last acknowledged checkpoint came after the notice. A release stamped
/// before its notice (clocks of two leaders apart) tells nothing.
fn answer(p: &PreemptionRecord) -> Option<LastNotice> {
    let after_ms = p.released_ms?.checked_sub(p.at_ms).filter(|ms| *ms >= 0)?;
    let lost = p.lost_gpu_seconds?;
    let after_s = u32::try_from(after_ms.saturating_add(999) / 1000).unwrap_or(u32::MAX);
    let held = f64::from(p.gpus) * (after_ms as f64 / 1000.0);
    Some(if lost <= held + 1e-3 {
        LastNotice::Saved { after_s }
    } else {
        LastNotice::Lost { after_s }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(job: &str, by: &str, at_ms: i64, released_ms: Option<i64>) -> PreemptionRecord {
        PreemptionRecord {
            job_id: job.into(),
            attempt: 0,
            by_job: by.into(),
            at_ms,
            notice_ms: 60_000,
            released_ms,
            checkpoint_step: None,
            lost_gpu_seconds: None,
            released_by: None,
            gpus: 8,
            series: "h100".into(),
            attempt_started_ms: 0,
        }
    }

    #[test]
    fn the_book_counts_the_window_and_holds_for_preemptors() {
        let now = 10_000_000;
        let book = Book::of(
            &[
                record("v1", "p1", now - 1_000, None),
                record("v1", "p2", now - 500_000, Some(now - 400_000)),
                record("v2", "p3", now - 10_000, Some(now - 5_000)),
            ],
            now,
        );
        assert_eq!(book.in_window.get("v1"), Some(&2));
        assert!(book.holds("p1"), "its victim's notice runs");
        assert!(book.holds("p3"), "its victim was released a moment ago");
        assert!(!book.holds("p2"), "released long ago: the hold is over");
        assert!(!book.holds("v1"));
        assert_eq!(book.last_notice("v1"), LastNotice::Unknown, "lost unknown");
    }

    #[test]
    fn the_book_remembers_how_each_job_answered_its_last_notice() {
        let now = 10_000_000;
        let released = |job: &str, at_ms: i64, after_ms: i64, lost: f64| PreemptionRecord {
            lost_gpu_seconds: Some(lost),
            ..record(job, "p", at_ms, Some(at_ms + after_ms))
        };
        let book = Book::of(
            &[
                // Acknowledged a checkpoint 20 s after the notice, released 1 s later:
                // only that second is lost (8 GPUs).
                released("saver", now - 100_000, 21_000, 8.0),
                // Killed at the grace: everything since its checkpoint before it.
                released("ignorer", now - 100_000, 60_000, 8.0 * 400.0),
                // Saved once, then not: the last notice counts, in any order.
                released("changed", now - 200_000, 2_500, 8.0 * 300.0),
                released("changed", now - 900_000, 20_000, 0.0),
                record("open", "p", now - 1_000, None),
            ],
            now,
        );
        assert_eq!(book.last_notice("saver"), LastNotice::Saved { after_s: 21 });
        assert_eq!(
            book.last_notice("ignorer"),
            LastNotice::Lost { after_s: 60 }
        );
        assert_eq!(book.last_notice("changed"), LastNotice::Lost { after_s: 3 });
        assert_eq!(
            book.last_notice("open"),
            LastNotice::Unknown,
            "its notice runs"
        );
        assert_eq!(book.last_notice("never"), LastNotice::Unknown);
        let skewed = Book::of(&[released("skewed", now - 100_000, -5_000, 0.0)], now);
        assert_eq!(
            skewed.last_notice("skewed"),
            LastNotice::Unknown,
            "released before its notice: no answer"
        );
    }
}
