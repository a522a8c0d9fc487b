//! One periodic resync of the lifecycle controller as bookkeeping: the RayJobs a round
//! listed wait in a backlog and are looked at as the controller has room, alongside
//! the watch events, instead of the whole round running inline while every event
//! waits (a LIST of thousands of RayJobs takes seconds on a real API server).
//!
//! A round leaves a RayJob to the watch when the watch has said something newer about
//! it: a RayJob with an event in hand when the round began, or with an event offered
//! since, is skipped (the round's listed object and job record may be older than
//! what that event handling saw). A round is over once it listed, every item was
//! started or skipped, and every started item finished.
//!
//! Only the bookkeeping lives here, so the rules are tested without a cluster; the
//! controller ([`super::lifecycle`]) runs the work.

use std::collections::VecDeque;

use rustc_hash::FxHashSet;

/// The resync round in progress, if any; `T` is what one listed RayJob carries.
#[derive(Debug)]
pub struct ResyncRound<T> {
    round: Option<Round<T>>,
}

#[derive(Debug)]
struct Round<T> {
    /// The list arrived (or failed): no more items will come.
    listed: bool,
    /// RayJobs the watch spoke for since the round began (or was busy with then).
    touched: FxHashSet<String>,
    /// Listed RayJobs not started yet.
    backlog: VecDeque<(String, T)>,
    /// Items started and not finished.
    running: usize,
}

impl<T> Default for ResyncRound<T> {
    fn default() -> Self {
        Self { round: None }
    }
}

impl<T> ResyncRound<T> {
    /// Whether a round is in progress (a new one is not begun meanwhile).
    pub fn in_progress(&self) -> bool {
        self.round.is_some()
    }

    /// Begins a round; `busy` are the RayJobs whose watch events are in hand now.
    /// Returns `false` (and changes nothing) while a round is in progress.
    pub fn begin<'k>(&mut self, busy: impl IntoIterator<Item = &'k str>) -> bool {
        if self.round.is_some() {
            return false;
        }
        self.round = Some(Round {
            listed: false,
            touched: busy.into_iter().map(str::to_string).collect(),
            backlog: VecDeque::new(),
            running: 0,
        });
        true
    }

    /// The round's items started and not finished (0 without a round).
    pub fn running(&self) -> usize {
        self.round.as_ref().map_or(0, |r| r.running)
    }

    /// The watch offered an event for `key`: the round leaves that RayJob to it.
    pub fn touched(&mut self, key: &str) {
        if let Some(round) = &mut self.round
            && !round.touched.contains(key)
        {
            round.touched.insert(key.to_string());
        }
    }

    /// The round's list arrived: its RayJobs, each under its key.
    pub fn listed(&mut self, items: impl IntoIterator<Item = (String, T)>) {
        if let Some(round) = &mut self.round {
            round.backlog.extend(items);
            round.listed = true;
        }
    }

    /// The round's list failed: nothing will be looked at this round.
    pub fn list_failed(&mut self) {
        if let Some(round) = &mut self.round {
            round.listed = true;
        }
    }

    /// The next listed RayJob to look at now, counted as running until
    /// [`item_done`](Self::item_done); RayJobs the watch spoke for, or `busy` with
    /// now, are skipped.
    pub fn next(&mut self, busy: impl Fn(&str) -> bool) -> Option<(String, T)> {
        let round = self.round.as_mut()?;
        while let Some((key, item)) = round.backlog.pop_front() {
            if round.touched.contains(&key) || busy(&key) {
                continue;
            }
            round.running += 1;
            return Some((key, item));
        }
        None
    }

    /// A started item finished.
    pub fn item_done(&mut self) {
        if let Some(round) = &mut self.round {
            round.running = round.running.saturating_sub(1);
        }
    }

    /// `true` once, when the round in progress is over (it is then ended).
    pub fn take_finished(&mut self) -> bool {
        let over = self
            .round
            .as_ref()
            .is_some_and(|r| r.listed && r.backlog.is_empty() && r.running == 0);
        if over {
            self.round = None;
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(keys: &[&str]) -> Vec<(String, u32)> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), u32::try_from(i).expect("small")))
            .collect()
    }

    #[test]
    fn a_round_looks_at_what_it_listed_then_ends_once() {
        let mut r = ResyncRound::default();
        assert!(!r.in_progress() && !r.take_finished());
        assert!(r.begin([]));
        assert!(!r.begin([]), "one round at a time");
        assert!(!r.take_finished(), "not listed yet");
        r.listed(items(&["a", "b"]));
        assert_eq!(r.next(|_| false), Some(("a".into(), 0)));
        assert_eq!(r.next(|_| false), Some(("b".into(), 1)));
        assert_eq!(r.next(|_| false), None);
        assert!(!r.take_finished(), "two items still running");
        assert_eq!(r.running(), 2);
        r.item_done();
        assert!(!r.take_finished());
        r.item_done();
        assert!(r.take_finished());
        assert!(!r.take_finished(), "reported once");
        assert!(!r.in_progress() && r.begin([]), "a new round may begin");
    }

    #[test]
    fn rayjobs_the_watch_spoke_for_are_left_to_it() {
        let mut r = ResyncRound::default();
        assert!(r.begin(["busy-at-start"]));
        r.touched("event-since");
        r.listed(items(&[
            "busy-at-start",
            "event-since",
            "busy-now",
            "quiet",
        ]));
        r.touched("after-list"); // no such item: harmless
        assert_eq!(r.next(|k| k == "busy-now"), Some(("quiet".into(), 3)));
        assert_eq!(r.next(|_| false), None);
        r.item_done();
        assert!(r.take_finished());
    }

    #[test]
    fn a_failed_list_ends_the_round_with_nothing_looked_at() {
        let mut r: ResyncRound<u32> = ResyncRound::default();
        assert!(r.begin([]));
        r.list_failed();
        assert_eq!(r.next(|_| false), None);
        assert!(r.take_finished());
    }

    #[test]
    fn without_a_round_nothing_happens() {
        let mut r = ResyncRound::default();
        r.touched("a");
        r.listed(items(&["a"]));
        r.item_done();
        assert_eq!(r.next(|_| false), None);
        assert!(!r.take_finished());
    }
}
