//! Work for many keys at once, in order within each key: the lifecycle controller
//! handles the watch events of different RayJobs concurrently (each waits on its own
//! durable write, which group commit then shares), while one RayJob's events are still
//! applied one after another, in the order the watch delivered them (so a job's
//! history never skips a state its RayJob went through).
//!
//! This is only the bookkeeping — which key is busy, what waits behind it — so the
//! driver decides how its work runs.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Keys with work running, and the work waiting behind each.
#[derive(Debug)]
pub struct PerKey<W> {
    /// A key is present while its work runs; its queue holds what comes next.
    busy: FxHashMap<String, VecDeque<W>>,
}

impl<W> Default for PerKey<W> {
    fn default() -> Self {
        Self {
            busy: FxHashMap::default(),
        }
    }
}

impl<W> PerKey<W> {
    /// Offers `work` for `key`: returned when it may start now (the key was idle and is
    /// now busy), else kept until the work before it is [`done`](Self::done).
    pub fn offer(&mut self, key: &str, work: W) -> Option<W> {
        match self.busy.get_mut(key) {
            Some(waiting) => {
                waiting.push_back(work);
                None
            }
            None => {
                self.busy.insert(key.to_string(), VecDeque::new());
                Some(work)
            }
        }
    }

    /// The running work of `key` ended: the next work waiting for it, if any (the key
    /// stays busy), else the key is idle again.
    pub fn done(&mut self, key: &str) -> Option<W> {
        let waiting = self.busy.get_mut(key)?;
        let next = waiting.pop_front();
        if next.is_none() {
            self.busy.remove(key);
        }
        next
    }

    /// Whether `key` has work running (or waiting).
    pub fn is_busy(&self, key: &str) -> bool {
        self.busy.contains_key(key)
    }

    /// The keys with work running (or waiting).
    pub fn busy_keys(&self) -> impl Iterator<Item = &str> {
        self.busy.keys().map(String::as_str)
    }

    /// How many keys have work running.
    pub fn running(&self) -> usize {
        self.busy.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_of_one_key_runs_in_order_and_other_keys_run_at_once() {
        let mut keys = PerKey::default();
        assert_eq!(keys.offer("a", 1), Some(1));
        assert_eq!(keys.offer("b", 10), Some(10), "another key starts at once");
        assert_eq!(keys.offer("a", 2), None, "a is busy: 2 waits");
        assert_eq!(keys.offer("a", 3), None);
        assert_eq!(keys.running(), 2);
        assert!(keys.is_busy("a") && keys.is_busy("b") && !keys.is_busy("c"));
        let mut busy: Vec<&str> = keys.busy_keys().collect();
        busy.sort_unstable();
        assert_eq!(busy, ["a", "b"]);
        assert_eq!(keys.done("a"), Some(2), "then 2, in order");
        assert_eq!(keys.offer("a", 4), None, "still busy with 2");
        assert_eq!(keys.done("a"), Some(3));
        assert_eq!(keys.done("a"), Some(4));
        assert_eq!(keys.done("a"), None);
        assert_eq!(keys.done("b"), None);
        assert_eq!(keys.running(), 0);
        assert_eq!(
            keys.offer("a", 5),
            Some(5),
            "an idle key starts at once again"
        );
    }

    #[test]
    fn done_for_an_idle_key_is_nothing() {
        let mut keys: PerKey<u8> = PerKey::default();
        assert_eq!(keys.done("never"), None);
        assert_eq!(keys.running(), 0);
    }
}
