//! A planned preemption as policy sees it (contract 0.3.0's `plan-preemption`), and
//! the rule that combines the links' verdicts into the order the host preempts in.
//!
//! The host lists the candidate victims (whole jobs) cheapest first; each global link
//! may accept, reorder (a permutation of what it was shown) or veto; a team's links
//! are asked only when a candidate is of their team and may only accept or veto. The
//! types are version-independent like [`crate::model`]; `wit_v0_3_0` converts them.

use serde::{Deserialize, Serialize};

use crate::error::PluginError;
use crate::model::JobView;

/// A running job the host would preempt, and what preempting it costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Victim {
    pub job_id: String,
    pub team: String,
    pub priority: i32,
    /// GPUs of the whole job, freed together.
    pub gpus: u32,
    pub series: String,
    pub fleet: String,
    pub running_seconds: u64,
    /// `None`: it never acknowledged a checkpoint.
    pub checkpoint_age_seconds: Option<u64>,
    pub checkpoint_step: Option<u64>,
    /// GPU-seconds since its last acknowledged checkpoint (or its start), plus
    /// GPUs × grace.
    pub lost_gpu_seconds: f64,
    pub grace_seconds: u32,
    pub preemptions_in_window: u32,
}

/// What the links are shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionPlan {
    pub preemptor: JobView,
    pub series: String,
    /// GPUs the preemptor needs beyond what is free.
    pub gpus_needed: u32,
    /// In the order the host would preempt them.
    pub candidates: Vec<Victim>,
}

/// One link's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PlanVerdict {
    /// Keep the order as given.
    Accept,
    /// The candidates' job ids in another order.
    Reorder { order: Vec<String> },
    /// No preemption for this preemptor now.
    Veto { code: String, message: String },
}

/// The chain's answer: the order to preempt in, or the veto that stopped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum PlanOutcome {
    /// Candidates' job ids, in the order to preempt them (the host takes the shortest
    /// prefix that frees enough GPUs).
    Proceed { order: Vec<String> },
    /// A link vetoed: `plugin` said why.
    Vetoed {
        plugin: String,
        code: String,
        message: String,
    },
}

impl PreemptionPlan {
    /// The candidates' job ids, in the plan's order.
    pub fn order(&self) -> Vec<String> {
        self.candidates.iter().map(|v| v.job_id.clone()).collect()
    }

    /// Whether a team's link has a say: some candidate is of `team`.
    pub fn concerns(&self, team: &str) -> bool {
        self.candidates.iter().any(|v| v.team == team)
    }

    /// The plan the next link sees once `order` (a permutation of this plan's
    /// candidates) was chosen.
    pub fn reordered(&self, order: &[String]) -> PreemptionPlan {
        let candidates = order
            .iter()
            .filter_map(|id| self.candidates.iter().find(|v| &v.job_id == id).cloned())
            .collect();
        PreemptionPlan {
            candidates,
            ..self.clone()
        }
    }
}

/// Check one link's verdict against the plan it was shown: a reorder must be a
/// permutation of the candidates (each exactly once), and a team link may not reorder.
pub(crate) fn check_verdict(
    plan: &PreemptionPlan,
    verdict: PlanVerdict,
    team_link: bool,
) -> Result<PlanVerdict, PluginError> {
    match &verdict {
        PlanVerdict::Reorder { .. } if team_link => Err(PluginError::BadOutput(
            "a team's policy may only accept or veto a preemption, not reorder it".into(),
        )),
        PlanVerdict::Reorder { order } => {
            let mut given = plan.order();
            let mut got = order.clone();
            given.sort();
            got.sort();
            if given == got {
                Ok(verdict)
            } else {
                Err(PluginError::BadOutput(format!(
                    "reorder must list each of the {} candidates exactly once, got {:?}",
                    plan.candidates.len(),
                    order
                )))
            }
        }
        PlanVerdict::Veto { code, .. } => {
            crate::contract_check::check_code(code)?;
            Ok(verdict)
        }
        PlanVerdict::Accept => Ok(verdict),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StorageMode;

    fn victim(id: &str, team: &str) -> Victim {
        Victim {
            job_id: id.into(),
            team: team.into(),
            priority: 0,
            gpus: 8,
            series: "h100".into(),
            fleet: "default".into(),
            running_seconds: 600,
            checkpoint_age_seconds: Some(60),
            checkpoint_step: Some(10),
            lost_gpu_seconds: 960.0,
            grace_seconds: 60,
            preemptions_in_window: 0,
        }
    }

    fn plan() -> PreemptionPlan {
        PreemptionPlan {
            preemptor: JobView {
                id: "p".into(),
                team: "a".into(),
                name: "p".into(),
                framework: "ray".into(),
                kind: Default::default(),
                priority: 100,
                pools: Vec::new(),
                storage: StorageMode::Shared,
                labels: Default::default(),
            },
            series: "h100".into(),
            gpus_needed: 8,
            candidates: vec![victim("x", "b"), victim("y", "c")],
        }
    }

    #[test]
    fn a_reorder_must_be_a_permutation_and_only_global() {
        let p = plan();
        let swap = PlanVerdict::Reorder {
            order: vec!["y".into(), "x".into()],
        };
        assert_eq!(check_verdict(&p, swap.clone(), false), Ok(swap.clone()));
        assert_eq!(p.reordered(&["y".into(), "x".into()]).order(), ["y", "x"]);
        let dropped = PlanVerdict::Reorder {
            order: vec!["y".into()],
        };
        assert!(check_verdict(&p, dropped, false).is_err());
        let doubled = PlanVerdict::Reorder {
            order: vec!["y".into(), "y".into()],
        };
        assert!(check_verdict(&p, doubled, false).is_err());
        let err = check_verdict(&p, swap, true).unwrap_err();
        assert!(err.to_string().contains("only accept or veto"), "{err}");
        let veto = PlanVerdict::Veto {
            code: "Bad Code".into(),
            message: "no".into(),
        };
        assert!(check_verdict(&p, veto, false).is_err());
        assert!(p.concerns("c") && !p.concerns("a"));
    }
}
