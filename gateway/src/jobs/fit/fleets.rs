//! Which fleet a gang goes to. A job runs in exactly one fleet (cluster): every machine
//! of every pool is placed on nodes of one fleet, never split. Of the fleets all of the
//! job's pools allow (their placement's `fleets`; empty: any), each is tried, and the
//! best fit wins: the fleet left with the fewest free GPUs of the job's series, so large
//! holes stay whole for large jobs; ties go to the fleet configured first.
//!
//! Fleets are indexes into the rooms' fleet list here, so a pass over a long queue
//! compares numbers, not names, and allocates nothing to choose; only a reservation
//! that succeeds names its fleet. With one fleet, one trial runs and nothing is
//! compared.

use super::{NoFit, NoFitCause, PoolDemand, Rooms, Taken};

/// A fleet, by its index in [`Rooms`]' fleets (configured order).
pub(super) type FleetIx = usize;

impl Rooms {
    /// Places every machine of `demands` in one fleet, subtracting what it takes, and
    /// returns that fleet. On success the rooms are updated; on failure they are
    /// unchanged and why the job does not fit is returned (of the fleets tried, the
    /// one with the most room).
    pub fn reserve(&mut self, demands: &[PoolDemand]) -> Result<String, NoFit> {
        let allowed = (0..self.fleets.len())
            .filter(|&f| self.allows(demands, f))
            .count();
        let mut best: Option<(u64, FleetIx, Taken)> = None;
        let mut why: Option<NoFit> = None;
        for fleet in 0..self.fleets.len() {
            if !self.allows(demands, fleet) {
                continue;
            }
            match self.trial(demands, fleet) {
                // One fleet to choose from (the common case): no comparison to make.
                Ok(taken) if allowed == 1 => best = Some((0, fleet, taken)),
                Ok(taken) => {
                    let left = self.left_after(demands, fleet, &taken);
                    if best.as_ref().is_none_or(|(fewest, _, _)| left < *fewest) {
                        best = Some((left, fleet, taken));
                    }
                }
                Err(e) => {
                    if why.as_ref().is_none_or(|w| e.free > w.free) {
                        why = Some(e);
                    }
                }
            }
        }
        match best {
            Some((_, fleet, taken)) => {
                self.take(&taken);
                Ok(self.fleets[fleet].clone())
            }
            None => Err(why.unwrap_or_else(|| self.no_fleet(demands))),
        }
    }

    /// Places as many machines of `pool` as fit in `fleet` (a dispatched job's
    /// machines the scheduler has not bound yet: they will take room, though where
    /// exactly is its choice). `None`: a job recorded without its fleet, dispatched
    /// before fleets were recorded, when the gateway drove one cluster — the first.
    /// A fleet with no nodes here has no room to take.
    pub fn reserve_partially(&mut self, pool: &PoolDemand, fleet: Option<&str>) {
        let fleet = match fleet {
            Some(name) => self.fleets.iter().position(|f| f == name),
            None => (!self.fleets.is_empty()).then_some(0),
        };
        let Some(fleet) = fleet else {
            return;
        };
        let kind = self.kind(pool, fleet);
        let mut taken = Taken::default();
        for _ in 0..pool.nodes {
            if !self.place_one(pool, kind, &mut taken) {
                break;
            }
        }
        self.take(&taken);
    }

    /// Whether every pool of `demands` may run in `fleet`.
    fn allows(&self, demands: &[PoolDemand], fleet: FleetIx) -> bool {
        let name = &self.fleets[fleet];
        demands
            .iter()
            .all(|d| d.fleets.is_empty() || d.fleets.contains(name))
    }

    /// Why `demands` fit in no fleet when none is allowed: the rooms have no node at
    /// all (no GPUs free), or the pools' fleets exclude each other.
    fn no_fleet(&mut self, demands: &[PoolDemand]) -> NoFit {
        let first = demands.first().cloned().unwrap_or_default();
        if self.fleets.is_empty() {
            return self.explain(demands, &first, 0);
        }
        NoFit {
            needed: demands
                .iter()
                .filter(|d| d.series == first.series)
                .map(PoolDemand::gpus)
                .sum(),
            series: first.series,
            free: 0,
            cause: NoFitCause::Fleets {
                known: self.fleets.clone(),
            },
        }
    }

    /// Free GPUs of the series of `demands` left in `fleet` once `taken` (a trial of
    /// `demands` there: on nodes of those series only) is taken: the best fit across
    /// fleets is the fleet with the fewest.
    fn left_after(&self, demands: &[PoolDemand], fleet: FleetIx, taken: &Taken) -> u64 {
        let mut series: Vec<&str> = demands.iter().map(|d| d.series.as_str()).collect();
        series.sort_unstable();
        series.dedup();
        let free: u64 = series
            .iter()
            .filter_map(|s| self.fleet_free[fleet].get(*s))
            .sum();
        let took: u64 = taken.values().map(|t| u64::from(t.gpus)).sum();
        free - took
    }
}
