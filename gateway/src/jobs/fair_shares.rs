//! Who is entitled to what (issue 39): each team's fair share of each series, and
//! where every team stands against it (`GET /v1/fair-share`).
//!
//! A team's *fair share* of a series is its GPUs × the team's weight / the weights of
//! the teams that hold or want GPUs there (a team that wants none is shown what it
//! would get if it asked now). Its *share* is its decayed usage as GPUs held on
//! average plus the GPUs it holds now; the dispatcher orders teams by share / weight.
//! The weights are the global policy's (`fairShare.weights`, 1 if not listed).
//!
//! The table is built on any replica from what every replica has: the capacity
//! caches, the published usage ledger and the usage ledger in the store (written by
//! the leader every 10 s, so the decayed figures may be that much behind).

use std::collections::BTreeMap;
use std::sync::Arc;

use forge_policy_host::model::{ClusterView, Shares, TeamShare as PolicyTeamShare};
use rustc_hash::FxHashMap;
use serde::Serialize;

use crate::admission::usage::Ledger;
use crate::domain::FairShareSettings;
use crate::store::usage::{UsageRecord, as_gpus};

/// Each team's weight and fair share of each series.
#[derive(Debug, Default)]
pub struct Entitlement {
    weights: Arc<FairShareSettings>,
    /// Series → (its GPUs, the weights of the teams that hold or want some).
    series: FxHashMap<String, (f64, f64)>,
}

impl Entitlement {
    /// The series of `view` divided among the teams of `ledger` that hold or want
    /// GPUs there, by `weights`.
    pub fn new(view: &ClusterView, ledger: &Ledger, weights: Arc<FairShareSettings>) -> Self {
        let mut sums: FxHashMap<&str, f64> = FxHashMap::default();
        for (team, by_series) in ledger {
            for (series, (running, queued)) in by_series {
                if running + queued > 0 {
                    *sums.entry(series.as_str()).or_default() += weights.weight(team);
                }
            }
        }
        let series = view
            .series
            .iter()
            .map(|s| {
                let sum = sums.get(s.series.as_str()).copied().unwrap_or(0.0);
                (s.series.clone(), (f64::from(s.total), sum))
            })
            .collect();
        Entitlement { weights, series }
    }

    /// Only the weights, no series: what a replayed pass ranks teams with.
    pub fn of_weights(weights: Arc<FairShareSettings>) -> Self {
        Entitlement {
            weights,
            series: FxHashMap::default(),
        }
    }

    /// `team`'s weight.
    pub fn weight(&self, team: &str) -> f64 {
        self.weights.weight(team)
    }

    /// `team`'s fair share of `series` in GPUs: `wants` — whether it holds or wants
    /// GPUs there (counted among the teams that do); if not, what it would get if
    /// it asked now.
    pub fn fair_share(&self, team: &str, series: &str, wants: bool) -> f64 {
        let Some((total, sum)) = self.series.get(series) else {
            return 0.0;
        };
        let w = self.weight(team);
        let of = if wants { sum.max(w) } else { sum + w };
        total * w / of
    }
}

/// One series and every team's standing there.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesShares {
    pub series: String,
    /// Its GPUs (schedulable nodes).
    pub gpus: u32,
    /// The teams that hold, want or used GPUs there, by team name.
    pub teams: Vec<TeamShare>,
}

/// One team's standing on one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamShare {
    pub team: String,
    pub weight: f64,
    /// Its GPU-seconds there, decayed with `FORGE_FAIR_SHARE_HALF_LIFE_S`.
    pub decayed_gpu_seconds: f64,
    /// The same as GPUs held on average.
    pub used_gpus: f64,
    /// GPUs its dispatched jobs hold now.
    pub allocated_gpus: u32,
    /// GPUs its queued jobs want.
    pub queued_gpus: u32,
    /// `usedGpus + allocatedGpus`: what the dispatcher orders teams by (over weight).
    pub share_gpus: f64,
    /// What its weight entitles it to, in GPUs.
    pub fair_share_gpus: f64,
}

/// The table as plugins read it (contract 0.3.0's `team-share`): per series, each
/// team's (decayed use + allocation) / weight over the sum of the teams' there, and
/// its weight over the teams' weights (its fair share of the series' GPUs as a
/// fraction).
pub fn for_policies(table: &[SeriesShares]) -> Shares {
    let mut out = Vec::new();
    for s in table {
        let weighted: f64 = s.teams.iter().map(|t| t.share_gpus / t.weight).sum();
        for t in &s.teams {
            let share = if weighted > 0.0 {
                t.share_gpus / t.weight / weighted
            } else {
                0.0
            };
            let fair_share = if s.gpus > 0 {
                (t.fair_share_gpus / f64::from(s.gpus)).min(1.0)
            } else {
                0.0
            };
            out.push(PolicyTeamShare {
                team: t.team.clone(),
                series: s.series.clone(),
                decayed_gpu_seconds: t.decayed_gpu_seconds,
                allocated_gpus: t.allocated_gpus,
                weight: t.weight,
                share,
                fair_share,
            });
        }
    }
    Shares(Arc::new(out))
}

/// Every series' table at `now_ms` (`only`: one team's rows, for a member).
pub fn table(
    view: &ClusterView,
    ledger: &Ledger,
    usage: &[UsageRecord],
    weights: Arc<FairShareSettings>,
    half_life_s: u64,
    now_ms: i64,
    only: Option<&str>,
) -> Vec<SeriesShares> {
    let entitled = Entitlement::new(view, ledger, weights);
    let mut used: BTreeMap<(&str, &str), f64> = BTreeMap::new();
    for r in usage {
        used.insert(
            (r.series.as_str(), r.team.as_str()),
            r.at(now_ms, half_life_s),
        );
    }
    let mut teams: BTreeMap<&str, BTreeMap<&str, (u32, u32)>> = BTreeMap::new();
    for (team, by_series) in ledger {
        for (series, held) in by_series {
            teams
                .entry(series.as_str())
                .or_default()
                .insert(team.as_str(), *held);
        }
    }
    for (series, team) in used.keys() {
        teams.entry(series).or_default().entry(team).or_default();
    }
    view.series
        .iter()
        .map(|s| {
            let rows = teams
                .get(s.series.as_str())
                .into_iter()
                .flatten()
                .filter(|(team, _)| only.is_none_or(|o| o == **team))
                .map(|(team, (running, queued))| {
                    let gpu_seconds = used.get(&(s.series.as_str(), *team)).copied();
                    let gpu_seconds = gpu_seconds.unwrap_or(0.0);
                    let used_gpus = as_gpus(gpu_seconds, half_life_s);
                    TeamShare {
                        team: (*team).to_string(),
                        weight: entitled.weight(team),
                        decayed_gpu_seconds: gpu_seconds,
                        used_gpus,
                        allocated_gpus: *running,
                        queued_gpus: *queued,
                        share_gpus: used_gpus + f64::from(*running),
                        fair_share_gpus: entitled.fair_share(team, &s.series, running + queued > 0),
                    }
                })
                .collect();
            SeriesShares {
                series: s.series.clone(),
                gpus: s.total,
                teams: rows,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::usage;
    use forge_policy_host::model::SeriesCapacity;

    fn view(series: &[(&str, u32)]) -> ClusterView {
        ClusterView {
            fleets: Vec::new(),
            series: series
                .iter()
                .map(|(s, total)| SeriesCapacity {
                    series: (*s).into(),
                    total: *total,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn weights(pairs: &[(&str, f64)]) -> Arc<FairShareSettings> {
        Arc::new(FairShareSettings {
            weights: pairs.iter().map(|(t, w)| ((*t).into(), *w)).collect(),
        })
    }

    #[test]
    fn weights_divide_a_series_among_the_teams_that_want_it() {
        let mut ledger = Ledger::new();
        usage::add(&mut ledger, "team-a", "h100", 8, true);
        usage::add(&mut ledger, "team-b", "h100", 8, false);
        let e = Entitlement::new(&view(&[("h100", 24)]), &ledger, weights(&[("team-a", 2.0)]));
        assert_eq!(e.fair_share("team-a", "h100", true), 16.0);
        assert_eq!(e.fair_share("team-b", "h100", true), 8.0);
        // A third team that asked now would get a quarter (weights 2 + 1 + 1).
        assert_eq!(e.fair_share("team-c", "h100", false), 6.0);
        assert_eq!(e.fair_share("team-a", "a100", true), 0.0, "no such series");
    }

    #[test]
    fn plugins_read_shares_as_fractions_of_the_series() {
        // team-a holds 8 of 16 GPUs and weighs 2; team-b wants 8; team-c holds none.
        let mut ledger = Ledger::new();
        usage::add(&mut ledger, "team-a", "h100", 8, true);
        usage::add(&mut ledger, "team-b", "h100", 8, false);
        let rows = table(
            &view(&[("h100", 16)]),
            &ledger,
            &[],
            weights(&[("team-a", 2.0)]),
            3_600,
            0,
            None,
        );
        let shares = for_policies(&rows);
        let of = |team: &str| {
            let s = shares.0.iter().find(|s| s.team == team).expect("listed");
            (s.share, s.fair_share, s.allocated_gpus, s.weight)
        };
        // (8 / 2) over (8 / 2 + 0): all of the weighted use is team-a's.
        assert_eq!(of("team-a"), (1.0, 2.0 / 3.0, 8, 2.0));
        assert_eq!(of("team-b"), (0.0, 1.0 / 3.0, 0, 1.0));
        assert!(for_policies(&[]).0.is_empty());
    }

    #[test]
    fn a_member_sees_only_their_teams_rows_and_usage_is_decayed_to_now() {
        let mut ledger = Ledger::new();
        usage::add(&mut ledger, "team-a", "h100", 8, true);
        usage::add(&mut ledger, "team-b", "h100", 8, false);
        let rows = [UsageRecord {
            team: "team-c".into(),
            series: "h100".into(),
            gpu_seconds: 7_200.0,
            at_ms: 0,
        }];
        let all = table(
            &view(&[("h100", 16)]),
            &ledger,
            &rows,
            weights(&[]),
            3_600,
            3_600_000,
            None,
        );
        let teams: Vec<&str> = all[0].teams.iter().map(|t| t.team.as_str()).collect();
        assert_eq!(teams, ["team-a", "team-b", "team-c"]);
        let c = &all[0].teams[2];
        assert_eq!(c.decayed_gpu_seconds, 3_600.0, "one half-life later");
        assert_eq!(c.allocated_gpus, 0);
        assert!(
            c.fair_share_gpus > 5.3 && c.fair_share_gpus < 5.4,
            "16 / 3: {c:?}"
        );
        assert_eq!(all[0].teams[0].fair_share_gpus, 8.0, "16 / 2: {all:?}");
        assert_eq!(all[0].teams[0].share_gpus, 8.0);
        let mine = table(
            &view(&[("h100", 16)]),
            &ledger,
            &rows,
            weights(&[]),
            3_600,
            0,
            Some("team-b"),
        );
        assert_eq!(mine[0].teams.len(), 1);
        assert_eq!(mine[0].teams[0].team, "team-b");
        assert_eq!(mine[0].teams[0].queued_gpus, 8);
    }
}
