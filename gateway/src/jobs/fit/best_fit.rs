//! The nodes one kind of pool may use, and the best fit among them for one machine:
//! the node with the least room left that still fits it (fewest GPUs, then CPU, then
//! memory; the lowest node index among equals).
//!
//! A pass asks this once per machine it places. With a long queue, or many dispatched
//! jobs whose machines are not bound yet (every pass reserves their room again), that
//! is thousands of asks over thousands of nodes, and a scan of every node per ask made
//! the fit a visible share of the dispatcher's CPU. So once a kind of pool has been
//! asked [`ORDER_AFTER`] times in a pass, its nodes are kept ordered by room left, and
//! a fit is a lookup from the machine's GPUs up — the first node there with enough
//! CPU and memory — instead of a scan. A pass of a few placements never pays for
//! ordering the nodes. Both ways give the same node.

use std::collections::BTreeSet;

use super::{Left, Taken};

/// Asks of one kind of pool in a pass after which its nodes are ordered by room.
const ORDER_AFTER: u32 = 16;

/// The nodes one kind of pool may use (ascending indexes into the rooms), and, once
/// asked often enough, the same nodes ordered by what is left on them.
#[derive(Debug, Clone, Default)]
pub(super) struct Candidates {
    nodes: Vec<usize>,
    asked: u32,
    /// `(room left, node)`, kept up to date by [`Candidates::moved`].
    by_room: Option<BTreeSet<(Left, usize)>>,
}

impl Candidates {
    /// The nodes, ascending.
    pub(super) fn nodes(&self) -> &[usize] {
        &self.nodes
    }

    /// `nodes` in ascending order.
    pub(super) fn new(nodes: Vec<usize>) -> Self {
        debug_assert!(nodes.is_sorted());
        Candidates {
            nodes,
            asked: 0,
            by_room: None,
        }
    }

    /// The best node for a machine needing `need`, with `left` the committed room of
    /// every node and `taken` what the trial in progress already took.
    pub(super) fn best(&mut self, left: &[Left], need: Left, taken: &Taken) -> Option<usize> {
        self.asked = self.asked.saturating_add(1);
        if self.by_room.is_none() && self.asked > ORDER_AFTER {
            self.by_room = Some(self.nodes.iter().map(|&i| (left[i], i)).collect());
        }
        let room = |i: usize| match taken.get(&i) {
            Some(&t) => left[i] - t,
            None => left[i],
        };
        let fits = |l: &Left| {
            l.gpus >= need.gpus
                && l.cpu_millis >= need.cpu_millis
                && l.memory_bytes >= need.memory_bytes
        };
        let Some(by_room) = &self.by_room else {
            return self
                .nodes
                .iter()
                .map(|&i| (room(i), i))
                .filter(|(l, _)| fits(l))
                .min()
                .map(|(_, i)| i);
        };
        // The nodes this trial took from: their place in the order is stale.
        let mut best = taken
            .keys()
            .filter(|i| self.nodes.binary_search(i).is_ok())
            .map(|&i| (room(i), i))
            .filter(|(l, _)| fits(l))
            .min();
        let from = Left {
            gpus: need.gpus,
            cpu_millis: 0,
            memory_bytes: 0,
        };
        for &(l, i) in by_room.range((from, 0)..) {
            if best.is_some_and(|b| (l, i) >= b) {
                break;
            }
            if !taken.contains_key(&i) && fits(&l) {
                best = Some((l, i));
                break;
            }
        }
        best.map(|(_, i)| i)
    }

    /// Node `i`'s committed room went from `from` to `to`.
    pub(super) fn moved(&mut self, i: usize, from: Left, to: Left) {
        if let Some(by_room) = &mut self.by_room
            && self.nodes.binary_search(&i).is_ok()
        {
            by_room.remove(&(from, i));
            by_room.insert((to, i));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn left(gpus: u32, cpu_millis: u64, memory_bytes: u64) -> Left {
        Left {
            gpus,
            cpu_millis,
            memory_bytes,
        }
    }

    /// The scan the order stands in for: the least room that fits, lowest index first.
    fn scanned(nodes: &[usize], left: &[Left], need: Left, taken: &Taken) -> Option<usize> {
        let mut best: Option<(Left, usize)> = None;
        for &i in nodes {
            let l = left[i] - taken.get(&i).copied().unwrap_or_default();
            if l.gpus >= need.gpus
                && l.cpu_millis >= need.cpu_millis
                && l.memory_bytes >= need.memory_bytes
                && best.is_none_or(|(b, _)| l < b)
            {
                best = Some((l, i));
            }
        }
        best.map(|(_, i)| i)
    }

    #[test]
    fn the_order_is_built_only_after_enough_asks() {
        let left = vec![left(8, 8, 8); 4];
        let mut c = Candidates::new(vec![0, 2, 3]);
        for _ in 0..ORDER_AFTER {
            assert_eq!(
                c.best(&left, self::left(1, 1, 1), &Taken::default()),
                Some(0)
            );
        }
        assert!(c.by_room.is_none(), "a few asks scan");
        assert_eq!(
            c.best(&left, self::left(1, 1, 1), &Taken::default()),
            Some(0)
        );
        assert_eq!(c.by_room.as_ref().map(BTreeSet::len), Some(3));
    }

    #[test]
    fn the_order_skips_nodes_short_of_cpu_and_counts_the_trial() {
        // Node 1 has the fewest GPUs that fit but too little CPU; node 2 fits; node 0
        // would, with more room left.
        let left = vec![left(8, 64, 64), left(2, 1, 64), left(4, 64, 64)];
        let mut c = Candidates::new(vec![0, 1, 2]);
        c.asked = ORDER_AFTER;
        let need = self::left(2, 8, 8);
        assert_eq!(c.best(&left, need, &Taken::default()), Some(2));
        // The trial took 2 GPUs from node 0: 6 left, still more than node 2's 4.
        let mut taken = Taken::default();
        taken.insert(0, self::left(2, 8, 8));
        assert_eq!(c.best(&left, need, &taken), Some(2));
        // It took 4 from node 0: 4 left, as node 2; the lower index wins.
        taken.insert(0, self::left(4, 8, 8));
        assert_eq!(c.best(&left, need, &taken), Some(0));
        // It took all of node 2: node 0 is the only fit.
        taken.insert(2, self::left(4, 8, 8));
        assert_eq!(c.best(&left, need, &taken), Some(0));
    }

    fn arb_left() -> impl Strategy<Value = Left> {
        (0u32..=8, 0u64..=4, 0u64..=4).prop_map(|(g, c, m)| left(g, c, m))
    }

    proptest! {
        /// Ordered or scanned, the same node is chosen, through trials and commits, this
        /// kind's and other kinds' (which move nodes this kind may not use).
        #[test]
        fn the_order_chooses_what_the_scan_does(
            mut rooms in prop::collection::vec(arb_left(), 1..40),
            members in prop::collection::vec(any::<bool>(), 40),
            steps in prop::collection::vec(
                (arb_left(), 1u32..4, any::<bool>(), 0usize..40, arb_left()),
                1..60,
            ),
        ) {
            let nodes: Vec<usize> = (0..rooms.len()).filter(|&i| members[i]).collect();
            let mut ordered = Candidates::new(nodes.clone());
            ordered.asked = ORDER_AFTER;
            for (need, machines, commit, elsewhere, room) in steps {
                // One trial of `machines` machines, as `Rooms::reserve` makes.
                let mut taken = Taken::default();
                for _ in 0..machines {
                    let want = scanned(&nodes, &rooms, need, &taken);
                    prop_assert_eq!(ordered.best(&rooms, need, &taken), want);
                    let Some(i) = want else { break };
                    *taken.entry(i).or_default() += need;
                }
                if commit {
                    for (&i, &t) in &taken {
                        let to = rooms[i] - t;
                        ordered.moved(i, rooms[i], to);
                        rooms[i] = to;
                    }
                }
                // Another kind's commit moved a node, one of these or not.
                if elsewhere < rooms.len() {
                    ordered.moved(elsewhere, rooms[elsewhere], room);
                    rooms[elsewhere] = room;
                }
            }
        }
    }
}
