//! The leader's side of the usage ledger (issue 39, `store/usage.rs`): each pass
//! charges every team the GPUs it held since the last pass, and the pass orders the
//! queue by what each team used (decayed) and holds now.
//!
//! - **Charging.** Between two passes the GPUs a team holds do not change (a job
//!   starts in a pass; one that ends wakes the next), so the GPUs of the last pass
//!   × the time since are what each team used. The charges gather in memory and
//!   are written every [`FLUSH_EVERY_MS`] in one fenced accrual; a deposed leader's
//!   accrual is refused whole, and its successor charges from its own first pass.
//! - **Reading.** The ledger is read from the store once per term (the leader is its
//!   only writer); after that the copy here is kept up to date with every charge.
//!
//! A team's *share* of a series is its decayed usage as GPUs held on average
//! ([`as_gpus`]) plus the GPUs it holds now; teams are ordered by their share over
//! their weight (the global policy's `fairShare.weights`, 1 if not listed), and each
//! is *entitled* to the series' GPUs × its weight / the weights of the teams that
//! hold or want GPUs there ([`Entitlement`](crate::jobs::fair_shares::Entitlement)).

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use crate::admission::usage::Ledger;
use crate::jobs::fair_shares::Entitlement;
use crate::store::usage::{Accrual, UsageCharge, UsageRecord, accrued, as_gpus, decayed, held};
use crate::store::{Fence, JobStore, StoreError};

/// The two calls of the store fair share makes: every store has them, and tests put
/// a failing one in its place.
#[async_trait::async_trait]
pub trait UsageStore: Send + Sync {
    /// [`JobStore::usage`].
    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError>;
    /// [`JobStore::accrue_usage`].
    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError>;
}

#[async_trait::async_trait]
impl<T: JobStore + ?Sized> UsageStore for T {
    async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError> {
        JobStore::usage(self).await
    }
    async fn accrue_usage(&self, a: Accrual, fence: Option<Fence>) -> Result<(), StoreError> {
        JobStore::accrue_usage(self, a, fence).await
    }
}

/// How often the charges are written to the store, in milliseconds.
pub const FLUSH_EVERY_MS: i64 = 10_000;

/// (team, series) → decayed GPU-seconds and the time they are as of.
type Rows = FxHashMap<String, FxHashMap<String, (f64, i64)>>;

/// The GPUs each team held of each series at a pass.
type Holding = Vec<(String, String, u32)>;

/// What the leader knows of the ledger during one term.
#[derive(Debug)]
pub struct FairShare {
    half_life_s: u64,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The ledger as the store has it plus what was charged since (`None`: not read
    /// in this term yet).
    rows: Option<Rows>,
    /// The GPUs each team held at the last pass, and when.
    last: Option<(i64, Holding)>,
    /// Charges not written yet.
    pending: FxHashMap<(String, String), f64>,
    /// When the charges were last written (or the term's first pass).
    flushed_ms: i64,
}

/// Each team's decayed usage per series, as GPUs held on average, for one pass.
#[derive(Debug, Default)]
pub struct Usage {
    gpus: FxHashMap<String, FxHashMap<String, f64>>,
}

/// What a GPU held now counts for in [`Usage::rank`], against a GPU used on average
/// over the decay's mean life: 1/1000 of a half-life's use (10 minutes at the
/// default week).
pub const HELD_WEIGHT: f64 = std::f64::consts::LN_2 / 1000.0;

impl Usage {
    /// `team`'s share of `series` as people read it: the GPUs it used on average
    /// plus those `ledger` says it holds now.
    pub fn share(&self, ledger: &Ledger, team: &str, series: &str) -> f64 {
        let (used, holds) = self.parts(ledger, team, series);
        used + holds
    }

    /// What orders the teams (before their weights): the GPUs used on average, plus
    /// the GPUs held now at [`HELD_WEIGHT`]. Running jobs are charged every pass,
    /// so use decides the order over a day (Slurm's fair tree does the same), and
    /// the GPUs held break ties: a pass that admits a job ranks its team after
    /// another with the same use, and of two teams that used the same, the one
    /// that holds GPUs goes second. Counted in full, held GPUs would outweigh a
    /// day's use at the default half-life, and weights 2:1 would give about 1.4:1.
    pub fn rank(&self, ledger: &Ledger, team: &str, series: &str) -> f64 {
        let (used, holds) = self.parts(ledger, team, series);
        used + holds * HELD_WEIGHT
    }

    /// [`Usage::rank`] over `team`'s weight: what orders the teams.
    pub fn weighted_rank(
        &self,
        ledger: &Ledger,
        entitled: &Entitlement,
        team: &str,
        series: &str,
    ) -> f64 {
        self.rank(ledger, team, series) / entitled.weight(team)
    }

    /// Every team's usage at `now_ms` from the ledger's stored rows (a follower's
    /// view: the leader's last write).
    pub fn of_rows(rows: &[UsageRecord], half_life_s: u64, now_ms: i64) -> Usage {
        let mut gpus: FxHashMap<String, FxHashMap<String, f64>> = FxHashMap::default();
        for r in rows {
            gpus.entry(r.team.clone()).or_default().insert(
                r.series.clone(),
                as_gpus(r.at(now_ms, half_life_s), half_life_s),
            );
        }
        Usage { gpus }
    }

    /// Usage as GPUs used on average, team → series → GPUs (a replayed pass's,
    /// as the dispatch journal recorded it).
    pub fn of_gpus<M>(gpus: impl IntoIterator<Item = (String, M)>) -> Usage
    where
        M: IntoIterator<Item = (String, f64)>,
    {
        Usage {
            gpus: gpus
                .into_iter()
                .map(|(team, by_series)| (team, by_series.into_iter().collect()))
                .collect(),
        }
    }

    /// The GPUs `team` used of `series` on average (decayed).
    pub fn used(&self, team: &str, series: &str) -> f64 {
        self.gpus
            .get(team)
            .and_then(|s| s.get(series))
            .copied()
            .unwrap_or(0.0)
    }

    /// (GPUs used on average, GPUs held now).
    fn parts(&self, ledger: &Ledger, team: &str, series: &str) -> (f64, f64) {
        let used = self.used(team, series);
        let holds = ledger
            .get(team)
            .and_then(|s| s.get(series))
            .map_or(0, |(running, _)| *running);
        (used, f64::from(holds))
    }
}

impl FairShare {
    pub fn new(half_life_s: u64) -> Self {
        FairShare {
            half_life_s,
            state: Mutex::new(State::default()),
        }
    }

    /// One pass's part: charges what each team held since the last pass (`ledger`:
    /// what they hold now), writes the charges when due, and answers every team's
    /// decayed usage at `now_ms`. A store that fails leaves the charges for the next
    /// write (and the usage as known here).
    pub async fn pass<S: UsageStore + ?Sized>(
        &self,
        store: &S,
        fence: Option<Fence>,
        ledger: &Ledger,
        now_ms: i64,
    ) -> Usage {
        if self.lock().rows.is_none() {
            match self.read(store).await {
                Ok(rows) => {
                    let mut st = self.lock();
                    st.rows = Some(rows);
                    st.flushed_ms = now_ms;
                }
                Err(e) => tracing::warn!("reading the usage ledger (fair share): {e}"),
            }
        }
        let due = self.charge(ledger, now_ms);
        if let Some(accrual) = due {
            self.flush(store, accrual, fence).await;
        }
        self.usage(now_ms)
    }

    /// Whether the ledger was read from the store (a failed read is tried again by
    /// the next pass; until then the usage is what this leader charged).
    pub fn ledger_read(&self) -> bool {
        self.lock().rows.is_some()
    }

    /// The ledger as this leader knows it (the store's rows plus what it charged
    /// since), each row as of its own time.
    pub fn records(&self) -> Vec<UsageRecord> {
        let st = self.lock();
        st.rows
            .iter()
            .flatten()
            .flat_map(|(team, by_series)| {
                by_series
                    .iter()
                    .map(move |(series, (gpu_seconds, at_ms))| UsageRecord {
                        team: team.clone(),
                        series: series.clone(),
                        gpu_seconds: *gpu_seconds,
                        at_ms: *at_ms,
                    })
            })
            .collect()
    }

    /// The ledger as the store has it.
    async fn read<S: UsageStore + ?Sized>(&self, store: &S) -> Result<Rows, StoreError> {
        let mut rows = Rows::default();
        for r in store.usage().await? {
            rows.entry(r.team)
                .or_default()
                .insert(r.series, (r.gpu_seconds, r.at_ms));
        }
        Ok(rows)
    }

    /// Charges the GPUs of the last pass up to `now_ms` and remembers this pass's;
    /// the charges to write if it is time.
    fn charge(&self, ledger: &Ledger, now_ms: i64) -> Option<Accrual> {
        let h = self.half_life_s;
        let mut guard = self.lock();
        let st = &mut *guard;
        let holding: Holding = ledger
            .iter()
            .flat_map(|(team, by_series)| {
                by_series
                    .iter()
                    .filter(|(_, (running, _))| *running > 0)
                    .map(move |(series, (running, _))| (team.clone(), series.clone(), *running))
            })
            .collect();
        let rows = st.rows.as_mut()?;
        if let Some((since, held_then)) = st.last.replace((now_ms, holding)) {
            for (team, series, gpus) in held_then {
                let add = held(f64::from(gpus), since, now_ms, h);
                let row = rows.entry(team.clone()).or_default();
                let old = row.get(&series).copied();
                row.insert(series.clone(), accrued(old, add, now_ms, h));
                let pending = st.pending.entry((team, series)).or_default();
                *pending = decayed(*pending, since, now_ms, h) + add;
            }
        }
        if now_ms - st.flushed_ms < FLUSH_EVERY_MS || st.pending.is_empty() {
            return None;
        }
        st.flushed_ms = now_ms;
        let charges = std::mem::take(&mut st.pending)
            .into_iter()
            .map(|((team, series), gpu_seconds)| UsageCharge {
                team,
                series,
                gpu_seconds,
            })
            .collect();
        Some(Accrual {
            charges,
            at_ms: now_ms,
            half_life_s: h,
        })
    }

    /// Writes `accrual` with the term's fence; on failure its charges wait for the
    /// next write (a refused fence drops them: the next leader charges its own).
    async fn flush<S: UsageStore + ?Sized>(
        &self,
        store: &S,
        accrual: Accrual,
        fence: Option<Fence>,
    ) {
        let keep = accrual.charges.clone();
        match store.accrue_usage(accrual, fence).await {
            Ok(()) => {}
            Err(e @ StoreError::Fenced { .. }) => {
                tracing::info!("usage charges of a past term dropped: {e}");
            }
            Err(e) => {
                tracing::warn!("writing the usage ledger (retried with the next charges): {e}");
                let mut st = self.lock();
                for c in keep {
                    *st.pending.entry((c.team, c.series)).or_default() += c.gpu_seconds;
                }
            }
        }
    }

    /// Every team's decayed usage at `now_ms`, as GPUs held on average.
    fn usage(&self, now_ms: i64) -> Usage {
        Usage::of_rows(&self.records(), self.half_life_s, now_ms)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::usage;
    use crate::store::Database;

    fn holding(teams: &[(&str, u64)]) -> Ledger {
        let mut l = Ledger::new();
        for (team, gpus) in teams {
            usage::add(&mut l, team, "h100", *gpus, true);
        }
        l
    }

    #[tokio::test]
    async fn what_a_team_holds_between_passes_is_charged_and_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Database::open_sqlite(&dir.path().join("forge.sqlite3")).expect("sqlite");
        let fair = FairShare::new(3_600);
        let store = db.jobs.as_ref();
        let busy = holding(&[("team-b", 16)]);
        let u = fair.pass(store, None, &busy, 0).await;
        assert_eq!(u.share(&busy, "team-b", "h100"), 16.0, "what it holds");
        assert_eq!(u.share(&busy, "team-c", "h100"), 0.0);
        // 10 s of 16 GPUs: charged, and written (the flush is due).
        let idle = holding(&[]);
        let u = fair.pass(store, None, &idle, FLUSH_EVERY_MS).await;
        let used = u.share(&idle, "team-b", "h100");
        let expected = as_gpus(held(16.0, 0, FLUSH_EVERY_MS, 3_600), 3_600);
        assert!((used - expected).abs() < 1e-9, "{used} vs {expected}");
        let rows = store.usage().await.expect("read");
        assert_eq!(rows.len(), 1, "{rows:?}");
        let written = held(16.0, 0, FLUSH_EVERY_MS, 3_600);
        assert!((rows[0].gpu_seconds - written).abs() < 1e-9, "{rows:?}");
        assert!(
            written > 159.0 && written < 160.0,
            "16 GPUs × 10 s, decayed a little"
        );
        // A later term reads it back, decayed to its time.
        let next = FairShare::new(3_600);
        let u = next
            .pass(store, None, &idle, 3_600_000 + FLUSH_EVERY_MS)
            .await;
        let half = u.share(&idle, "team-b", "h100");
        assert!((half - expected / 2.0).abs() < 1e-6, "{half}");
    }

    #[test]
    fn held_gpus_rank_a_team_only_a_little_behind_one_that_used_the_same() {
        let mut usage = Usage::default();
        for team in ["team-a", "team-b"] {
            usage
                .gpus
                .entry(team.into())
                .or_default()
                .insert("h100".into(), 4.0);
        }
        let busy = holding(&[("team-b", 16)]);
        let (a, b) = (
            usage.rank(&busy, "team-a", "h100"),
            usage.rank(&busy, "team-b", "h100"),
        );
        assert_eq!(a, 4.0);
        assert!(b > a && b < 4.1, "{b}: behind, by 16 × HELD_WEIGHT");
        assert_eq!(
            usage.share(&busy, "team-b", "h100"),
            20.0,
            "what people read"
        );
    }

    /// A store whose ledger writes fail with `fail` (while set) and that keeps what
    /// the others wrote.
    #[derive(Default)]
    struct Flaky {
        fail: Mutex<Option<fn() -> StoreError>>,
        written: Mutex<Vec<Accrual>>,
    }

    #[async_trait::async_trait]
    impl UsageStore for Flaky {
        async fn usage(&self) -> Result<Vec<UsageRecord>, StoreError> {
            Ok(Vec::new())
        }
        async fn accrue_usage(&self, a: Accrual, _: Option<Fence>) -> Result<(), StoreError> {
            if let Some(fail) = *self.fail.lock().expect("lock") {
                return Err(fail());
            }
            self.written.lock().expect("lock").push(a);
            Ok(())
        }
    }

    fn written(store: &Flaky) -> Vec<f64> {
        let w = store.written.lock().expect("lock");
        w.iter()
            .map(|a| a.charges.iter().map(|c| c.gpu_seconds).sum())
            .collect()
    }

    #[tokio::test]
    async fn a_failed_write_keeps_its_charges_for_the_next() {
        let store = Flaky::default();
        *store.fail.lock().expect("lock") = Some(|| StoreError::Corrupt("disk".into()));
        let fair = FairShare::new(1_000_000);
        let busy = holding(&[("team-b", 8)]);
        fair.pass(&store, None, &busy, 0).await;
        fair.pass(&store, None, &busy, FLUSH_EVERY_MS).await;
        assert!(written(&store).is_empty(), "the write failed");
        *store.fail.lock().expect("lock") = None;
        fair.pass(&store, None, &busy, 2 * FLUSH_EVERY_MS).await;
        let w = written(&store);
        assert_eq!(w.len(), 1, "{w:?}");
        // Both intervals' 8 GPUs × 10 s, in one write.
        assert!((w[0] - 160.0).abs() < 0.01, "{w:?}");
    }

    #[tokio::test]
    async fn a_deposed_leaders_charges_are_dropped_not_retried() {
        let store = Flaky::default();
        *store.fail.lock().expect("lock") = Some(|| StoreError::Fenced {
            lease: "dispatcher".into(),
            epoch: 1,
            current: 2,
        });
        let fair = FairShare::new(1_000_000);
        let busy = holding(&[("team-b", 8)]);
        fair.pass(&store, None, &busy, 0).await;
        fair.pass(&store, None, &busy, FLUSH_EVERY_MS).await;
        *store.fail.lock().expect("lock") = None;
        fair.pass(&store, None, &busy, 2 * FLUSH_EVERY_MS).await;
        let w = written(&store);
        assert_eq!(w.len(), 1, "{w:?}");
        // Only the second interval: the refused term's charges were not carried over.
        assert!((w[0] - 80.0).abs() < 0.01, "{w:?}");
    }
}
