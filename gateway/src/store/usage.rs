//! The fair-share usage ledger (issue 39): the GPU-seconds each team used of each
//! series, decayed with a half-life (`FORGE_FAIR_SHARE_HALF_LIFE_S`, 7 days by
//! default) so that what a team used a half-life ago counts half as much as what it
//! uses now. A team idle for a few half-lives stands where a new one does.
//!
//! One row per team and series holds its decayed GPU-seconds *as of* the row's time;
//! every read and every write decays it to its own time first ([`decayed`]), so no
//! sweep ever has to age the rows. Only the leader writes it ([`Accrual`], fenced with
//! its term by [`super::JobStore::accrue_usage`]): its dispatcher charges the GPUs each
//! team held between two passes.

use std::f64::consts::LN_2;

use serde::Serialize;

/// One team's decayed usage of one series, as of `at_ms`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// The team.
    pub team: String,
    /// The GPU series.
    pub series: String,
    /// Decayed GPU-seconds at `at_ms`.
    pub gpu_seconds: f64,
    /// Unix milliseconds the value is as of.
    pub at_ms: i64,
}

impl UsageRecord {
    /// Its GPU-seconds as they stand at `now_ms`.
    pub fn at(&self, now_ms: i64, half_life_s: u64) -> f64 {
        decayed(self.gpu_seconds, self.at_ms, now_ms, half_life_s)
    }
}

/// GPU-seconds a team used of a series, to add to its row.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageCharge {
    /// The team.
    pub team: String,
    /// The GPU series.
    pub series: String,
    /// GPU-seconds as they stand at the accrual's time.
    pub gpu_seconds: f64,
}

/// One write to the ledger: charges as of `at_ms`, each row decayed to that time
/// before its charge is added, in one transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Accrual {
    /// What to add.
    pub charges: Vec<UsageCharge>,
    /// Unix milliseconds the charges are as of.
    pub at_ms: i64,
    /// The half-life the rows decay with.
    pub half_life_s: u64,
}

/// `value` as of `from_ms`, decayed to `to_ms` (no decay backwards: a clock that
/// went back leaves the value as it was).
pub fn decayed(value: f64, from_ms: i64, to_ms: i64, half_life_s: u64) -> f64 {
    if to_ms <= from_ms || half_life_s == 0 {
        return value;
    }
    let halvings = (to_ms - from_ms) as f64 / (half_life_s as f64 * 1000.0);
    value * (-halvings).exp2()
}

/// The decayed GPU-seconds that holding `gpus` from `from_ms` to `to_ms` adds, as they
/// stand at `to_ms`: each second counted decayed from when it was used (the integral,
/// so charging often or rarely gives the same ledger).
pub fn held(gpus: f64, from_ms: i64, to_ms: i64, half_life_s: u64) -> f64 {
    if to_ms <= from_ms || half_life_s == 0 {
        return 0.0;
    }
    let h = half_life_s as f64;
    let seconds = (to_ms - from_ms) as f64 / 1000.0;
    gpus * h / LN_2 * (1.0 - (-seconds / h).exp2())
}

/// Decayed GPU-seconds as the GPUs a team held on average over its recent past: one
/// that held `g` GPUs for ever stands at `g`, so usage and the GPUs held now add up.
pub fn as_gpus(gpu_seconds: f64, half_life_s: u64) -> f64 {
    if half_life_s == 0 {
        return 0.0;
    }
    gpu_seconds * LN_2 / half_life_s as f64
}

/// A row after an accrual: `old` (value, as of) decayed to `at_ms` plus `add`, and the
/// time it is then as of (never earlier than the row's own).
pub fn accrued(old: Option<(f64, i64)>, add: f64, at_ms: i64, half_life_s: u64) -> (f64, i64) {
    match old {
        Some((value, old_at)) => {
            let at = at_ms.max(old_at);
            (decayed(value, old_at, at, half_life_s) + add, at)
        }
        None => (add, at_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY_S: u64 = 86_400;
    const DAY_MS: i64 = 86_400_000;

    #[test]
    fn a_half_life_halves_the_usage() {
        assert_eq!(decayed(100.0, 0, 7 * DAY_MS, 7 * DAY_S), 50.0);
        assert_eq!(decayed(100.0, 0, 14 * DAY_MS, 7 * DAY_S), 25.0);
        assert_eq!(decayed(100.0, 5, 5, 7 * DAY_S), 100.0);
        assert_eq!(decayed(100.0, 10, 5, 7 * DAY_S), 100.0, "never backwards");
    }

    #[test]
    fn holding_for_ever_stands_at_the_gpus_held() {
        // 8 GPUs for 20 half-lives: as good as for ever.
        let h = 60;
        let total = held(8.0, 0, 20 * 60_000, h);
        assert!(
            (as_gpus(total, h) - 8.0).abs() < 0.001,
            "{}",
            as_gpus(total, h)
        );
        // Short of the half-life, about the GPU-seconds themselves.
        let short = held(8.0, 0, 1_000, 7 * DAY_S);
        assert!((short - 8.0).abs() < 0.001, "{short}");
    }

    #[test]
    fn charging_often_or_rarely_gives_one_ledger() {
        let h = 3_600;
        let once = held(4.0, 0, 3_600_000, h);
        let mut row = None;
        for i in 0..60 {
            let (from, to) = (i * 60_000, (i + 1) * 60_000);
            row = Some(accrued(row, held(4.0, from, to, h), to, h));
        }
        let (often, at) = row.expect("charged");
        assert_eq!(at, 3_600_000);
        assert!((once - often).abs() < 1e-6, "{once} vs {often}");
    }

    #[test]
    fn an_accrual_never_moves_a_row_back_in_time() {
        assert_eq!(accrued(Some((10.0, 2_000)), 1.0, 1_000, 60), (11.0, 2_000));
        assert_eq!(accrued(None, 3.0, 1_000, 60), (3.0, 1_000));
    }
}
