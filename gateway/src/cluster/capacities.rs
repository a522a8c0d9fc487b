//! The capacity of every fleet, read as one (issue 42): what the dispatcher, admission
//! and people see when the gateway drives several clusters. Each fleet keeps its own
//! Node and Pod caches ([`Capacity`]); this reads them together:
//!
//! - the gang fit's rooms are every fleet's nodes, each tagged with its fleet (a gang
//!   is then fitted in one fleet: `jobs::fit::fleets`), cached until any fleet moves;
//! - the generation moves when any fleet's does, and [`Changes`] wakes on any;
//! - the snapshot sums each series over the fleets and lists each fleet with its own
//!   series ([`merged`]);
//! - synced means every fleet's caches have listed.
//!
//! With one fleet every read is that fleet's own, unchanged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use forge_policy_host::model::{ClusterView, SeriesCapacity};

use super::Capacity;
use super::nodes::{NodeCell, NodeRoom};

/// Every fleet's capacity, first fleet to last (cheap to clone).
#[derive(Clone, Debug)]
pub struct Capacities {
    each: Arc<[Capacity]>,
    /// The union of rooms at a generation (several fleets only).
    rooms: Arc<arc_swap::ArcSwapOption<(u64, Arc<Vec<NodeRoom>>)>>,
}

impl Capacities {
    /// The capacities of `each`, in fleet order (at least one).
    pub fn new(each: Vec<Capacity>) -> Self {
        assert!(!each.is_empty(), "a gateway drives at least one fleet");
        Capacities {
            each: each.into(),
            rooms: Arc::default(),
        }
    }

    /// Each fleet's capacity, in fleet order.
    pub fn each(&self) -> &[Capacity] {
        &self.each
    }

    /// Whether the caches are ready to decide on (readiness): every available fleet's
    /// have listed, and at least one fleet's (an unavailable fleet does not hold the
    /// others back).
    pub fn is_synced(&self) -> bool {
        self.each.iter().any(Capacity::is_synced)
            && self.each.iter().all(|c| c.is_synced() || !c.is_available())
    }

    /// Whether fleet `name` answers (a fleet not configured does not).
    pub fn is_available(&self, name: &str) -> bool {
        self.each
            .iter()
            .any(|c| c.fleet() == name && c.is_available())
    }

    /// The fleets marked unavailable (their API servers do not answer).
    pub fn unavailable(&self) -> Vec<&str> {
        self.each
            .iter()
            .filter(|c| !c.is_available())
            .map(Capacity::fleet)
            .collect()
    }

    /// Waits until [`Capacities::is_synced`].
    pub async fn synced(&self) {
        if let [one] = &*self.each {
            return one.synced().await;
        }
        let mut changes = self.changes();
        while !self.is_synced() {
            // A cache's first list and a fleet marked unavailable both move the
            // generation; the bound covers a synced flag set just after its last event.
            tokio::select! {
                r = changes.changed() => if r.is_err() { return },
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }

    /// Waits at most `within` for every fleet's caches; whether they are synced.
    pub async fn synced_within(&self, within: Duration) -> bool {
        tokio::time::timeout(within, self.synced()).await.is_ok() && self.is_synced()
    }

    /// Moves whenever any fleet's caches move (each fleet's only counts up, so the sum
    /// never comes back to a value it had).
    pub fn generation(&self) -> u64 {
        self.each
            .iter()
            .fold(0u64, |g, c| g.wrapping_add(c.generation()))
    }

    /// Wakes whenever any fleet's caches move.
    pub fn changes(&self) -> Changes {
        Changes {
            each: self.each.iter().map(Capacity::changes).collect(),
        }
    }

    /// Every fleet's node rooms, fleet after fleet (one fleet: its cached rooms; several:
    /// their union, cached until any moves).
    pub fn rooms(&self) -> Arc<Vec<NodeRoom>> {
        if let [one] = &*self.each {
            return one.rooms();
        }
        let generation = self.generation();
        if let Some(hit) = self.rooms.load().as_ref()
            && hit.0 == generation
        {
            return hit.1.clone();
        }
        let rooms: Arc<Vec<NodeRoom>> = Arc::new(
            self.each
                .iter()
                .flat_map(|c| c.rooms().iter().cloned().collect::<Vec<_>>())
                .collect(),
        );
        self.rooms
            .store(Some(Arc::new((generation, rooms.clone()))));
        rooms
    }

    /// The rooms as they would be without the pods of `jobs`, over every fleet.
    pub fn rooms_without(&self, jobs: &BTreeSet<&str>) -> Vec<NodeRoom> {
        self.each
            .iter()
            .flat_map(|c| c.rooms_without(jobs))
            .collect()
    }

    /// Every GPU node and its room, fleet after fleet.
    pub fn node_cells(&self) -> Vec<NodeCell> {
        self.each.iter().flat_map(Capacity::node_cells).collect()
    }

    /// Bound machines of every Forge job, per group, over the fleets (a job runs in one
    /// fleet, so no two fleets count the same job).
    pub fn bound_machines(&self) -> BTreeMap<(String, String), u32> {
        if let [one] = &*self.each {
            return one.bound_machines();
        }
        let mut out = BTreeMap::new();
        for c in self.each.iter() {
            for (key, n) in c.bound_machines() {
                *out.entry(key).or_default() += n;
            }
        }
        out
    }

    /// `team`'s playground GPUs per series, `(running, pending)`, over the fleets.
    pub fn playground_gpus(&self, team: &str) -> BTreeMap<String, (u32, u32)> {
        let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for c in self.each.iter() {
            for (series, (running, pending)) in c.playground_gpus(team) {
                let e = out.entry(series).or_default();
                e.0 = e.0.saturating_add(running);
                e.1 = e.1.saturating_add(pending);
            }
        }
        out
    }

    /// The snapshot policies and people see: one fleet's, or every fleet's merged.
    pub fn snapshot(&self) -> ClusterView {
        if let [one] = &*self.each {
            return one.snapshot();
        }
        merged(self.each.iter().map(Capacity::snapshot))
    }
}

/// Wakes when any fleet's capacity changes ([`Capacities::changes`]).
pub struct Changes {
    each: Vec<tokio::sync::watch::Receiver<u64>>,
}

impl Changes {
    /// Resolves at the next change of any fleet; an error once every fleet's caches are
    /// gone (shutdown). A fleet whose caches are gone is no longer waited on.
    pub async fn changed(&mut self) -> Result<(), tokio::sync::watch::error::RecvError> {
        loop {
            if self.each.is_empty() {
                let mut closed = gone();
                return closed.changed().await;
            }
            let waits = self.each.iter_mut().map(|rx| Box::pin(rx.changed()));
            let (result, index, _) = futures::future::select_all(waits).await;
            match result {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.each.swap_remove(index);
                }
            }
        }
    }
}

/// A receiver whose sender is gone (its `changed` fails at once).
fn gone() -> tokio::sync::watch::Receiver<u64> {
    tokio::sync::watch::channel(0).1
}

/// One view of several fleets' views: each fleet listed with its own capacity, and
/// each series summed over the fleets (its largest free block the largest of any
/// fleet: a machine is never split across clusters either).
pub fn merged(views: impl IntoIterator<Item = ClusterView>) -> ClusterView {
    let mut out = ClusterView::default();
    let mut series: BTreeMap<String, SeriesCapacity> = BTreeMap::new();
    for view in views {
        if out.gpu_node_label.is_empty() {
            out.gpu_node_label.clone_from(&view.gpu_node_label);
        }
        for s in &view.series {
            match series.get_mut(&s.series) {
                None => {
                    series.insert(s.series.clone(), s.clone());
                }
                Some(sum) => add(sum, s),
            }
        }
        out.fleets.extend(view.fleets.iter().cloned());
    }
    out.series = series.into_values().collect();
    out
}

/// `s` added to `sum` (one series of another fleet).
fn add(sum: &mut SeriesCapacity, s: &SeriesCapacity) {
    sum.total += s.total;
    sum.allocatable += s.allocatable;
    sum.in_use += s.in_use;
    sum.blocked += s.blocked;
    sum.free += s.free;
    sum.nodes += s.nodes;
    sum.tainted += s.tainted;
    sum.largest_free_block = sum.largest_free_block.max(s.largest_free_block);
    for t in &s.taints {
        match sum.taints.iter_mut().find(|m| m.taint == t.taint) {
            Some(m) => m.nodes += t.nodes,
            None => sum.taints.push(t.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use forge_policy_host::model::FleetView;

    use super::*;

    fn series(name: &str, free: u32, block: u32) -> SeriesCapacity {
        SeriesCapacity {
            series: name.into(),
            total: 16,
            allocatable: 16,
            free,
            largest_free_block: block,
            nodes: 2,
            ..SeriesCapacity::default()
        }
    }

    fn view(fleet: &str, series: Vec<SeriesCapacity>) -> ClusterView {
        ClusterView {
            gpu_node_label: "starforge/gpu-series".into(),
            fleets: vec![FleetView {
                name: fleet.into(),
                available: true,
                series: series.clone(),
                ..FleetView::default()
            }],
            series,
        }
    }

    #[test]
    fn fleets_are_listed_and_each_series_summed() {
        let v = merged([
            view("eu", vec![series("h100", 8, 8)]),
            view("us", vec![series("h100", 4, 4), series("a100", 16, 8)]),
        ]);
        let names: Vec<&str> = v.fleets.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["eu", "us"]);
        let h100 = v.series.iter().find(|s| s.series == "h100").expect("h100");
        assert_eq!((h100.total, h100.free, h100.nodes), (32, 12, 4));
        assert_eq!(h100.largest_free_block, 8, "a machine is in one fleet");
        assert_eq!(v.fleets[1].series.len(), 2, "each fleet keeps its own");
        assert_eq!(v.series.len(), 2, "a series of one fleet is listed too");
    }

    #[tokio::test]
    async fn changes_wake_on_any_fleet_and_end_when_every_fleet_is_gone() {
        let (a_tx, a) = tokio::sync::watch::channel(0u64);
        let (b_tx, b) = tokio::sync::watch::channel(0u64);
        let mut changes = Changes { each: vec![a, b] };
        b_tx.send_replace(1);
        changes.changed().await.expect("the second fleet moved");
        drop(a_tx);
        b_tx.send_replace(2);
        changes
            .changed()
            .await
            .expect("the first is gone, the second moved");
        drop(b_tx);
        assert!(changes.changed().await.is_err(), "every fleet is gone");
    }
}
