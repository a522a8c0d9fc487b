//! The policy runner's queue: waiting jobs per scope, taken in turn across scopes, a
//! scope never running more than its share at once.
//!
//! A team flooding admissions (or slow plugins) fills its own line; every other scope
//! with work keeps its turn, so one tenant's backlog delays nobody else's decision.
//! Scopes with nothing waiting or running are forgotten, so the map does not grow
//! with every team ever seen.

use std::collections::{HashMap, VecDeque};

/// One scope's line.
#[derive(Debug)]
struct Line<J> {
    waiting: VecDeque<J>,
    running: usize,
}

/// Jobs of type `J` per scope; see the module header.
#[derive(Debug)]
pub(crate) struct FairQueue<J> {
    /// Jobs one scope may run at once (at least 1).
    share: usize,
    lines: HashMap<String, Line<J>>,
    /// Scopes with waiting jobs, in the order their turn comes.
    turns: VecDeque<String>,
}

impl<J> FairQueue<J> {
    /// A queue where one scope may run `share` jobs at once (at least one).
    pub(crate) fn new(share: usize) -> Self {
        FairQueue {
            share: share.max(1),
            lines: HashMap::new(),
            turns: VecDeque::new(),
        }
    }

    /// Jobs one scope may run at once.
    pub(crate) fn share(&self) -> usize {
        self.share
    }

    /// Queues `job` at the end of `scope`'s line.
    pub(crate) fn push(&mut self, scope: &str, job: J) {
        let line = match self.lines.get_mut(scope) {
            Some(line) => line,
            None => self.lines.entry(scope.to_owned()).or_insert(Line {
                waiting: VecDeque::new(),
                running: 0,
            }),
        };
        if line.waiting.is_empty() {
            self.turns.push_back(scope.to_owned());
        }
        line.waiting.push_back(job);
    }

    /// The next job to run and its scope: the first scope in turn that is under its
    /// share gives its oldest job and goes to the back. The caller reports the job's
    /// end with [`FairQueue::done`].
    pub(crate) fn take(&mut self) -> Option<(String, J)> {
        for _ in 0..self.turns.len() {
            let scope = self.turns.pop_front()?;
            let Some(line) = self.lines.get_mut(&scope) else {
                continue;
            };
            if line.running >= self.share {
                self.turns.push_back(scope);
                continue;
            }
            let job = line.waiting.pop_front()?;
            line.running += 1;
            if !line.waiting.is_empty() {
                self.turns.push_back(scope.clone());
            }
            return Some((scope, job));
        }
        None
    }

    /// A job of `scope` that [`FairQueue::take`] gave has ended.
    pub(crate) fn done(&mut self, scope: &str) {
        if let Some(line) = self.lines.get_mut(scope) {
            line.running = line.running.saturating_sub(1);
            if line.running == 0 && line.waiting.is_empty() {
                self.lines.remove(scope);
            }
        }
    }

    /// Removes every waiting job (a stopping runner fails them).
    pub(crate) fn drain(&mut self) -> Vec<J> {
        self.turns.clear();
        let mut jobs = Vec::new();
        self.lines.retain(|_, line| {
            jobs.extend(line.waiting.drain(..));
            line.running > 0
        });
        jobs
    }

    /// Jobs of `scope` running now.
    #[cfg(test)]
    pub(crate) fn running(&self, scope: &str) -> usize {
        self.lines.get(scope).map_or(0, |l| l.running)
    }

    /// Jobs waiting, in all scopes.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lines.values().map(|l| l.waiting.len()).sum()
    }

    /// Scopes the queue remembers (waiting or running).
    #[cfg(test)]
    pub(crate) fn scopes(&self) -> usize {
        self.lines.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_take_turns() {
        let mut q = FairQueue::new(4);
        for i in 0..3 {
            q.push("a", format!("a{i}"));
        }
        q.push("b", "b0".to_string());
        q.push("c", "c0".to_string());
        let order: Vec<String> = std::iter::from_fn(|| q.take().map(|(_, j)| j)).collect();
        assert_eq!(order, ["a0", "b0", "c0", "a1", "a2"]);
    }

    #[test]
    fn a_scope_at_its_share_waits_while_others_run() {
        let mut q = FairQueue::new(2);
        for i in 0..4 {
            q.push("a", i);
        }
        assert_eq!(q.take().map(|(s, _)| s).as_deref(), Some("a"));
        assert_eq!(q.take().map(|(s, _)| s).as_deref(), Some("a"));
        assert!(q.take().is_none(), "a holds its share");
        assert_eq!(q.running("a"), 2);
        q.push("b", 9);
        assert_eq!(q.take(), Some(("b".to_string(), 9)), "b is not behind a");
        q.done("a");
        assert_eq!(q.take(), Some(("a".to_string(), 2)), "a's next, in order");
        assert!(q.take().is_none());
    }

    #[test]
    fn idle_scopes_are_forgotten() {
        let mut q = FairQueue::new(1);
        q.push("a", ());
        q.push("b", ());
        let (a, ()) = q.take().expect("a");
        let (b, ()) = q.take().expect("b");
        assert_eq!(q.scopes(), 2);
        q.done(&a);
        q.done(&b);
        assert_eq!(q.scopes(), 0);
    }

    #[test]
    fn drain_returns_the_waiting_and_keeps_the_running() {
        let mut q = FairQueue::new(1);
        q.push("a", 1);
        q.push("a", 2);
        q.push("b", 3);
        let (scope, 1) = q.take().expect("a's first") else {
            panic!("a's first job comes first")
        };
        let mut left = q.drain();
        left.sort_unstable();
        assert_eq!(left, [2, 3]);
        assert!(q.take().is_none());
        assert_eq!(q.running("a"), 1);
        q.done(&scope);
        assert_eq!(q.scopes(), 0);
    }
}
