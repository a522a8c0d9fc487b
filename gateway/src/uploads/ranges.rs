//! [`RangeSet`]: which byte ranges of an upload have arrived — half-open
//! `[start, end)` intervals, kept sorted and merged, so that chunks may come in any
//! order, overlap or repeat (a retried PUT) and the set still says exactly what is
//! present and what is missing.

use serde::{Deserialize, Serialize};

/// Sorted, disjoint, non-adjacent half-open byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RangeSet(Vec<[u64; 2]>);

impl RangeSet {
    /// Adds `[start, end)`, merging with what it touches.
    pub fn insert(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        let mut out = Vec::with_capacity(self.0.len() + 1);
        let mut placed = false;
        for &[a, b] in &self.0 {
            if b < s {
                out.push([a, b]);
            } else if a > e {
                if !placed {
                    out.push([s, e]);
                    placed = true;
                }
                out.push([a, b]);
            } else {
                s = s.min(a);
                e = e.max(b);
            }
        }
        if !placed {
            out.push([s, e]);
        }
        self.0 = out;
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> &[[u64; 2]] {
        &self.0
    }

    /// Bytes covered.
    pub fn covered(&self) -> u64 {
        self.0.iter().map(|[a, b]| b - a).sum()
    }

    /// The gaps in `[0, size)`.
    pub fn missing(&self, size: u64) -> Vec<[u64; 2]> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for &[a, b] in &self.0 {
            if a > at {
                gaps.push([at, a.min(size)]);
            }
            at = at.max(b);
        }
        if at < size {
            gaps.push([at, size]);
        }
        gaps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_overlapping_and_repeated_chunks_merge() {
        let mut r = RangeSet::default();
        r.insert(20, 30);
        r.insert(0, 10);
        assert_eq!(r.ranges(), &[[0, 10], [20, 30]]);
        assert_eq!(r.missing(40), vec![[10, 20], [30, 40]]);
        r.insert(0, 10);
        assert_eq!(r.covered(), 20, "a repeated chunk counts once");
        r.insert(10, 20);
        assert_eq!(r.ranges(), &[[0, 30]], "adjacent ranges merge");
        r.insert(25, 40);
        assert_eq!(r.ranges(), &[[0, 40]]);
        assert!(r.missing(40).is_empty());
        r.insert(5, 5);
        assert_eq!(r.ranges(), &[[0, 40]], "an empty range changes nothing");
    }

    #[test]
    fn a_range_spanning_several_merges_them_all() {
        let mut r = RangeSet::default();
        for (a, b) in [(0, 1), (3, 4), (6, 7), (9, 10)] {
            r.insert(a, b);
        }
        r.insert(2, 8);
        assert_eq!(r.ranges(), &[[0, 1], [2, 8], [9, 10]]);
        assert_eq!(r.missing(12), vec![[1, 2], [8, 9], [10, 12]]);
    }
}
