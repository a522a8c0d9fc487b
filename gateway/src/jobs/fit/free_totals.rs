//! Free GPUs per series over the nodes one set of tolerations lets Forge's pods use,
//! kept up to date by every reservation instead of recounted.
//!
//! The dispatcher rebuilds the cluster view a request carries after each job it admits
//! (what that job takes changes the view for every job after it). Recounting every
//! node for that made admitting a job cost O(nodes): with 5 000 nodes, most of a
//! drained queue's decision time. A reservation changes a handful of nodes, so the
//! totals follow those changes: the sum per series, and the largest free block from
//! a count of nodes per free-GPU value.

use std::collections::BTreeMap;

/// One series' free GPUs: the total, and how many nodes have each number free.
#[derive(Debug, Clone, Default)]
struct SeriesFree {
    free: u32,
    /// Free GPUs on a node → how many usable nodes have that many (no zero counts
    /// kept, so the last key is the largest free block).
    nodes_with: BTreeMap<u32, u32>,
}

impl SeriesFree {
    fn add(&mut self, gpus: u32) {
        self.free += gpus;
        *self.nodes_with.entry(gpus).or_default() += 1;
    }

    fn remove(&mut self, gpus: u32) {
        self.free -= gpus;
        if let Some(n) = self.nodes_with.get_mut(&gpus) {
            *n -= 1;
            if *n == 0 {
                self.nodes_with.remove(&gpus);
            }
        }
    }
}

/// The free-GPU totals of the usable nodes, per series.
#[derive(Debug, Clone, Default)]
pub(super) struct FreeTotals {
    /// Whether node `i` is usable (its taints are tolerated).
    usable: Vec<bool>,
    series: BTreeMap<String, SeriesFree>,
}

impl FreeTotals {
    /// Counts the nodes `usable` selects: `nodes` gives each node's series and free GPUs.
    pub(super) fn new<'a>(
        nodes: impl ExactSizeIterator<Item = (&'a str, u32)>,
        usable: impl Fn(usize) -> bool,
    ) -> Self {
        let mut totals = FreeTotals {
            usable: Vec::with_capacity(nodes.len()),
            series: BTreeMap::new(),
        };
        for (i, (series, gpus)) in nodes.enumerate() {
            let ok = usable(i);
            totals.usable.push(ok);
            if !ok {
                continue;
            }
            match totals.series.get_mut(series) {
                Some(s) => s.add(gpus),
                None => {
                    let mut s = SeriesFree::default();
                    s.add(gpus);
                    totals.series.insert(series.to_string(), s);
                }
            }
        }
        totals
    }

    /// Node `i` of `series` went from `before` to `after` free GPUs.
    pub(super) fn changed(&mut self, i: usize, series: &str, before: u32, after: u32) {
        if before == after || !self.usable.get(i).copied().unwrap_or(false) {
            return;
        }
        if let Some(s) = self.series.get_mut(series) {
            s.remove(before);
            s.add(after);
        }
    }

    /// Per series: (free GPUs in total, the most free on one node).
    pub(super) fn get(&self) -> BTreeMap<String, (u32, u32)> {
        self.series
            .iter()
            .map(|(name, s)| {
                let largest = s.nodes_with.last_key_value().map_or(0, |(g, _)| *g);
                (name.clone(), (s.free, largest))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(nodes: &[(&'static str, u32)], usable: &[bool]) -> FreeTotals {
        let usable = usable.to_vec();
        FreeTotals::new(nodes.iter().copied(), move |i| usable[i])
    }

    #[test]
    fn counts_only_usable_nodes() {
        let t = totals(
            &[("h100", 8), ("h100", 4), ("a100", 2)],
            &[true, false, true],
        );
        let got = t.get();
        assert_eq!(got["h100"], (8, 8));
        assert_eq!(got["a100"], (2, 2));
    }

    #[test]
    fn follows_changes_and_the_largest_block_shrinks() {
        let mut t = totals(
            &[("h100", 8), ("h100", 8), ("h100", 2)],
            &[true, true, true],
        );
        t.changed(0, "h100", 8, 1);
        assert_eq!(t.get()["h100"], (11, 8));
        t.changed(1, "h100", 8, 0);
        assert_eq!(t.get()["h100"], (3, 2), "both 8-GPU nodes are taken");
    }

    #[test]
    fn ignores_changes_on_unusable_nodes() {
        let mut t = totals(&[("h100", 8), ("h100", 8)], &[true, false]);
        t.changed(1, "h100", 8, 0);
        assert_eq!(t.get()["h100"], (8, 8));
    }

    #[test]
    fn a_series_with_every_node_full_reports_zero() {
        let mut t = totals(&[("h100", 4)], &[true]);
        t.changed(0, "h100", 4, 0);
        assert_eq!(t.get()["h100"], (0, 0));
    }
}
