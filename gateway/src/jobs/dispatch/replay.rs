//! Replaying the dispatch journal (issue 39, `store/dispatch_journal.rs`): each
//! recorded pass is ordered again by the dispatcher's own code ([`FairOrder`] and
//! [`Usage::weighted_rank`]) from the inputs the pass recorded.
//!
//! - **Replay** (no weights given): each job gets the outcome the pass recorded, so
//!   the replayed order must be the recorded one, byte for byte. It is not by
//!   construction: the order is recomputed from the recorded usage, weights and
//!   classes, so a pass that ordered by anything it did not record (or a change of the
//!   order's code) shows up as a difference. The answer carries a SHA-256 of each
//!   side's canonical JSON.
//! - **Preview** (weights given): the same passes ordered with the proposed weights.
//!   A job the policy admitted is dispatched if its GPUs fit what the pass had free
//!   per series less what the preview dispatched before it; one the policy kept
//!   waiting or rejected does so again. Each pass is previewed on its own recorded
//!   queue and usage: the preview does not re-run the day (a job it dispatches
//!   earlier is not removed from later passes, and run times are not simulated),
//!   and the fit is by GPU count per series, not by machine); and a pass recorded
//!   each team's next job after its last dispatch, not its whole backlog.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::fair_order::{Class, FairOrder};
use super::fair_share::Usage;
use crate::admission::usage::{self, Ledger};
use crate::domain::FairShareSettings;
use crate::jobs::fair_shares::Entitlement;
use crate::store::dispatch_journal::{DecidedJob, Outcome, PassRecord};

/// One pass's dispatches, in the order it made them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PassOrder {
    /// Unix milliseconds the pass began.
    pub at_ms: i64,
    /// The jobs it dispatched, in order.
    pub dispatched: Vec<String>,
}

/// One side of a replay: each pass's decisions in order (the compared bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
struct DecidedOrder<'a> {
    at_ms: i64,
    /// (job, outcome kind), in the order decided.
    decided: Vec<(&'a str, &'static str)>,
}

/// A replay or a preview of recorded passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Replay {
    /// The proposed weights of a preview; `None` for a replay.
    pub weights: Option<BTreeMap<String, f64>>,
    /// What the passes dispatched.
    pub recorded: Vec<PassOrder>,
    /// What ordering them again dispatched.
    pub replayed: Vec<PassOrder>,
    /// SHA-256 of the recorded decisions, in order, as canonical JSON.
    pub recorded_sha256: String,
    /// SHA-256 of the replayed ones.
    pub replayed_sha256: String,
    /// Whether the two are byte-identical.
    pub identical: bool,
    /// Passes whose dispatches differ.
    pub passes_changed: usize,
}

/// Replays `passes` (`preview: None`) or previews them with other weights.
pub fn replay(passes: &[PassRecord], preview: Option<&FairShareSettings>) -> Replay {
    let replayed: Vec<Vec<(&DecidedJob, Outcome)>> =
        passes.iter().map(|p| order_pass(p, preview)).collect();
    let recorded_sides: Vec<DecidedOrder<'_>> = passes
        .iter()
        .map(|p| DecidedOrder {
            at_ms: p.at_ms,
            decided: p
                .decided
                .iter()
                .map(|d| (d.job.as_str(), kind(&d.outcome)))
                .collect(),
        })
        .collect();
    let replayed_sides: Vec<DecidedOrder<'_>> = passes
        .iter()
        .zip(&replayed)
        .map(|(p, order)| DecidedOrder {
            at_ms: p.at_ms,
            decided: order
                .iter()
                .map(|(d, o)| (d.job.as_str(), kind(o)))
                .collect(),
        })
        .collect();
    let (a, b) = (canonical(&recorded_sides), canonical(&replayed_sides));
    let recorded: Vec<PassOrder> = passes
        .iter()
        .map(|p| dispatches(p.at_ms, p.decided.iter().map(|d| (d, &d.outcome))))
        .collect();
    let replayed: Vec<PassOrder> = passes
        .iter()
        .zip(&replayed)
        .map(|(p, order)| dispatches(p.at_ms, order.iter().map(|(d, o)| (*d, o))))
        .collect();
    let passes_changed = recorded
        .iter()
        .zip(&replayed)
        .filter(|(r, p)| r != p)
        .count();
    Replay {
        weights: preview.map(|w| w.weights.clone()),
        recorded,
        replayed,
        identical: a == b,
        recorded_sha256: hex::encode(Sha256::digest(&a)),
        replayed_sha256: hex::encode(Sha256::digest(&b)),
        passes_changed,
    }
}

/// One pass ordered again: each job with the outcome it gets.
fn order_pass<'p>(
    p: &'p PassRecord,
    preview: Option<&FairShareSettings>,
) -> Vec<(&'p DecidedJob, Outcome)> {
    let recorded = FairShareSettings {
        weights: p.weights.clone(),
    };
    let weights = preview.cloned().unwrap_or(recorded);
    let entitled = Entitlement::of_weights(std::sync::Arc::new(weights));
    let mut rows: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    let mut ledger = Ledger::new();
    for t in &p.teams {
        rows.entry(t.team.clone())
            .or_default()
            .insert(t.series.clone(), t.used);
        usage::add(&mut ledger, &t.team, &t.series, u64::from(t.held), true);
    }
    let used = Usage::of_gpus(rows);
    let mut free = p.free.clone();
    let mut out = Vec::with_capacity(p.decided.len());
    let class = |d: &DecidedJob| Class::new(d.holding, d.priority);
    let rank = |team: &str, series: &str, ledger: &Ledger| {
        used.weighted_rank(ledger, &entitled, team, series)
    };
    let mut order = FairOrder::new(&p.decided, class, |team, series| {
        rank(team, series, &ledger)
    });
    while let Some(job) = order.next(|team, series| rank(team, series, &ledger)) {
        let outcome = match preview {
            None => job.outcome.clone(),
            Some(_) => fit(&job.outcome, &mut free),
        };
        if let Outcome::Dispatched { gpus } = &outcome {
            for g in gpus {
                usage::add(&mut ledger, &job.team, &g.series, u64::from(g.gpus), true);
            }
        }
        out.push((job, outcome));
    }
    out
}

/// A preview's outcome: a job the policy admitted is dispatched if its GPUs fit
/// `free` (which it then takes), else it has no room; the rest keep theirs.
fn fit(recorded: &Outcome, free: &mut BTreeMap<String, u32>) -> Outcome {
    let gpus = match recorded {
        Outcome::Dispatched { gpus } | Outcome::NoRoom { gpus, .. } => gpus,
        other => return other.clone(),
    };
    let mut wanted: BTreeMap<&str, u32> = BTreeMap::new();
    for g in gpus {
        *wanted.entry(g.series.as_str()).or_default() += g.gpus;
    }
    let fits = wanted
        .iter()
        .all(|(s, n)| free.get(*s).copied().unwrap_or(0) >= *n);
    if !fits {
        return Outcome::NoRoom {
            gpus: gpus.clone(),
            code: "preview.no-room".into(),
        };
    }
    for (s, n) in wanted {
        if let Some(left) = free.get_mut(s) {
            *left -= n;
        }
    }
    Outcome::Dispatched { gpus: gpus.clone() }
}

/// The outcome's kind, as the compared bytes name it.
fn kind(o: &Outcome) -> &'static str {
    match o {
        Outcome::Dispatched { .. } => "dispatched",
        Outcome::NoRoom { .. } => "no-room",
        Outcome::Waits { .. } => "waits",
        Outcome::Rejected => "rejected",
    }
}

/// The dispatched jobs of one pass's decisions, in order.
fn dispatches<'a>(
    at_ms: i64,
    decided: impl Iterator<Item = (&'a DecidedJob, &'a Outcome)>,
) -> PassOrder {
    PassOrder {
        at_ms,
        dispatched: decided
            .filter(|(_, o)| matches!(o, Outcome::Dispatched { .. }))
            .map(|(d, _)| d.job.clone())
            .collect(),
    }
}

/// The canonical JSON bytes of `v` (serde's order of fields; no maps involved).
fn canonical<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("a replay side serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::dispatch_journal::{SeriesGpus, TeamUsageAtPass};

    fn job(id: &str, team: &str, seq: i64, outcome: Outcome) -> DecidedJob {
        DecidedJob {
            job: id.into(),
            team: team.into(),
            series: "h100".into(),
            priority: 0,
            holding: false,
            seq,
            outcome,
        }
    }

    fn dispatched(gpus: u32) -> Outcome {
        Outcome::Dispatched {
            gpus: vec![SeriesGpus::new("h100", gpus)],
        }
    }

    fn no_room(gpus: u32) -> Outcome {
        Outcome::NoRoom {
            gpus: vec![SeriesGpus::new("h100", gpus)],
            code: "capacity.no-room".into(),
        }
    }

    fn usage(team: &str, used: f64, held: u32) -> TeamUsageAtPass {
        TeamUsageAtPass {
            team: team.into(),
            series: "h100".into(),
            used,
            held,
        }
    }

    /// team-b used 16 GPUs on average (team-c 4) and queued two jobs before
    /// team-c's one; 8 GPUs are free: the pass dispatched team-c's job.
    fn pass() -> PassRecord {
        PassRecord {
            at_ms: 1_000,
            weights: BTreeMap::new(),
            free: BTreeMap::from([("h100".into(), 8)]),
            teams: vec![usage("team-b", 16.0, 8), usage("team-c", 4.0, 0)],
            omitted: 0,
            decided: vec![
                job("c1", "team-c", 3, dispatched(8)),
                job("b1", "team-b", 1, no_room(8)),
                job("b2", "team-b", 2, no_room(8)),
            ],
        }
    }

    #[test]
    fn a_recorded_pass_replays_byte_for_byte() {
        let r = replay(&[pass()], None);
        assert!(r.identical, "{r:?}");
        assert_eq!(r.recorded_sha256, r.replayed_sha256);
        assert_eq!(r.replayed[0].dispatched, ["c1"]);
        assert_eq!(r.passes_changed, 0);
    }

    #[test]
    fn a_record_its_inputs_do_not_explain_is_not_identical() {
        // The record says team-b's job was decided first, but the usage it recorded
        // ranks team-c first: the replay decides c1 first (each job keeps its
        // recorded outcome), and the bytes differ.
        let mut p = pass();
        p.decided.swap(0, 1);
        let r = replay(&[p.clone()], None);
        assert!(!r.identical);
        assert_ne!(r.recorded_sha256, r.replayed_sha256);
        // Usage that ranks team-b first explains its two jobs before c1.
        let mut p = pass();
        p.decided.rotate_left(1);
        p.teams = vec![usage("team-b", 1.0, 0), usage("team-c", 4.0, 0)];
        assert!(replay(&[p], None).identical);
    }

    #[test]
    fn a_preview_orders_with_the_proposed_weights_and_fits_by_gpus() {
        let heavy = FairShareSettings {
            weights: BTreeMap::from([("team-b".into(), 100.0)]),
        };
        let r = replay(&[pass()], Some(&heavy));
        assert_eq!(r.recorded[0].dispatched, ["c1"]);
        assert_eq!(r.replayed[0].dispatched, ["b1"], "b1 takes the 8 free GPUs");
        assert_eq!(r.passes_changed, 1);
        assert!(!r.identical);
        assert_eq!(r.weights, Some(heavy.weights.clone()));
        // With 16 free GPUs team-b, still ranked first after b1, takes them all.
        let mut roomy = pass();
        roomy.free.insert("h100".into(), 16);
        let r = replay(&[roomy], Some(&heavy));
        assert_eq!(r.replayed[0].dispatched, ["b1", "b2"]);
    }

    #[test]
    fn a_preview_keeps_what_the_policy_decided() {
        let mut p = pass();
        p.decided[0].outcome = Outcome::Waits {
            code: "quota.exceeded".into(),
        };
        p.decided[1].outcome = Outcome::Rejected;
        let r = replay(&[p], Some(&FairShareSettings::default()));
        assert_eq!(r.replayed[0].dispatched, ["b2"], "c1 waits, b1 is rejected");
    }
}
