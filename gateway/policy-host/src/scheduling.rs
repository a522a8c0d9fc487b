//! Scheduling vocabulary of the host's model: node taints, tolerations and node
//! affinity, with the Kubernetes matching rules the gateway's capacity and gang fit
//! apply (a node is usable only if its `NoSchedule`/`NoExecute` taints are tolerated
//! and it meets the required affinity).
//!
//! Version-independent like the rest of [`crate::model`]; serialized with the
//! Kubernetes spellings (`NoSchedule`, `Exists`, `In`) so decision traces and stored
//! placements read like the pod specs they become.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How a taint keeps pods away from a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }

    /// The effect a Kubernetes spelling names.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::NoSchedule, Self::PreferNoSchedule, Self::NoExecute]
            .into_iter()
            .find(|e| e.as_str() == s)
    }

    /// Whether a pod that does not tolerate it cannot be scheduled there.
    pub fn blocks_scheduling(self) -> bool {
        !matches!(self, TaintEffect::PreferNoSchedule)
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: TaintEffect,
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.value {
            Some(v) if !v.is_empty() => write!(f, "{}={v}:{}", self.key, self.effect.as_str()),
            _ => write!(f, "{}:{}", self.key, self.effect.as_str()),
        }
    }
}

/// A taint found on nodes of a series, and on how many of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesTaint {
    pub taint: Taint,
    pub nodes: u32,
}

/// How a toleration matches a taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    Equal,
    Exists,
}

/// A Kubernetes toleration.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub operator: TolerationOperator,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

impl Toleration {
    /// Kubernetes' `ToleratesTaint`: effects match (or the toleration names none),
    /// keys match (or an `Exists` toleration names none), and values match for `Equal`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        match (&self.key, self.operator) {
            (None, TolerationOperator::Exists) => true,
            (None, TolerationOperator::Equal) => false,
            (Some(k), _) if *k != taint.key => false,
            (Some(_), TolerationOperator::Exists) => true,
            (Some(_), TolerationOperator::Equal) => {
                self.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
        }
    }
}

/// The taints of a node that keep a pod with `tolerations` off it: the
/// `NoSchedule`/`NoExecute` taints none of them tolerates.
pub fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &'a [Toleration],
) -> impl Iterator<Item = &'a Taint> + 'a {
    taints
        .iter()
        .filter(|t| t.effect.blocks_scheduling())
        .filter(move |t| !tolerations.iter().any(|tol| tol.tolerates(t)))
}

/// How a node-selector requirement compares a node label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

/// One requirement on a node's labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// Whether a node with `labels` meets the requirement (Kubernetes semantics).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        let int = |s: &str| s.parse::<i64>().ok();
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Gt | SelectorOperator::Lt => {
                let (Some(have), Some(bound)) = (
                    value.and_then(|v| int(v)),
                    self.values.first().and_then(|v| int(v)),
                ) else {
                    return false;
                };
                if self.operator == SelectorOperator::Gt {
                    have > bound
                } else {
                    have < bound
                }
            }
        }
    }

    /// Why the requirement is malformed (values count and form per operator), if it is.
    pub fn problem(&self) -> Option<String> {
        let n = self.values.len();
        match self.operator {
            SelectorOperator::In | SelectorOperator::NotIn if n == 0 => {
                Some(format!("`{}`: In/NotIn need at least one value", self.key))
            }
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if n > 0 => Some(format!(
                "`{}`: Exists/DoesNotExist take no values",
                self.key
            )),
            SelectorOperator::Gt | SelectorOperator::Lt
                if n != 1 || self.values[0].parse::<i64>().is_err() =>
            {
                Some(format!("`{}`: Gt/Lt take exactly one integer", self.key))
            }
            _ if self.key.is_empty() => Some("a requirement needs a key".to_string()),
            _ => None,
        }
    }
}

/// A node matches a term when it meets every requirement of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorTerm {
    #[serde(default)]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

impl NodeSelectorTerm {
    /// Whether a node with `labels` matches every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

/// A soft preference: nodes matching `term` score `weight` (1..=100) more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreferredTerm {
    pub weight: i32,
    pub term: NodeSelectorTerm,
}

/// Node affinity of a pool's pods.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAffinity {
    /// A node must match at least one term; empty = no requirement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<NodeSelectorTerm>,
    /// Preferences among the nodes that qualify.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preferred: Vec<PreferredTerm>,
}

impl NodeAffinity {
    /// No requirement and no preference.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }

    /// Whether a node with `labels` meets the required terms (any of them).
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        self.required.is_empty() || self.required.iter().any(|t| t.matches(labels))
    }

    /// Why the affinity is malformed, if it is.
    pub fn problem(&self) -> Option<String> {
        let terms = self
            .required
            .iter()
            .chain(self.preferred.iter().map(|p| &p.term));
        for term in terms {
            if term.match_expressions.is_empty() {
                return Some("a node-selector term needs at least one requirement".into());
            }
            if let Some(p) = term.match_expressions.iter().find_map(|r| r.problem()) {
                return Some(p);
            }
        }
        self.preferred
            .iter()
            .find(|p| !(1..=100).contains(&p.weight))
            .map(|p| format!("preferred weight {} is not 1..=100", p.weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
        }
    }

    fn tol(key: Option<&str>, op: TolerationOperator, value: Option<&str>) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op,
            value: value.map(Into::into),
            effect: None,
        }
    }

    #[test]
    fn tolerations_follow_kubernetes_rules() {
        use TolerationOperator::{Equal, Exists};
        let gpu = taint("nvidia.com/gpu", Some("present"), TaintEffect::NoSchedule);
        assert!(tol(Some("nvidia.com/gpu"), Exists, None).tolerates(&gpu));
        assert!(tol(Some("nvidia.com/gpu"), Equal, Some("present")).tolerates(&gpu));
        assert!(!tol(Some("nvidia.com/gpu"), Equal, Some("absent")).tolerates(&gpu));
        assert!(!tol(Some("other"), Exists, None).tolerates(&gpu));
        assert!(tol(None, Exists, None).tolerates(&gpu));
        let mut wrong_effect = tol(Some("nvidia.com/gpu"), Exists, None);
        wrong_effect.effect = Some(TaintEffect::NoExecute);
        assert!(!wrong_effect.tolerates(&gpu));

        let soft = taint("spot", None, TaintEffect::PreferNoSchedule);
        let taints = [gpu.clone(), soft];
        let left: Vec<_> = untolerated(&taints, &[]).collect();
        assert_eq!(left, vec![&gpu], "PreferNoSchedule never blocks");
        assert_eq!(gpu.to_string(), "nvidia.com/gpu=present:NoSchedule");
    }

    #[test]
    fn affinity_matches_and_checks_its_shape() {
        let labels: BTreeMap<String, String> = [("zone", "a"), ("gen", "9")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let req = |key: &str, op, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let a = NodeAffinity {
            required: vec![NodeSelectorTerm {
                match_expressions: vec![
                    req("zone", SelectorOperator::In, &["a", "b"]),
                    req("gen", SelectorOperator::Gt, &["8"]),
                    req("spot", SelectorOperator::DoesNotExist, &[]),
                ],
            }],
            preferred: Vec::new(),
        };
        assert!(a.admits(&labels));
        assert!(a.problem().is_none());
        let b = NodeAffinity {
            required: vec![NodeSelectorTerm {
                match_expressions: vec![req("zone", SelectorOperator::NotIn, &["a"])],
            }],
            preferred: vec![PreferredTerm {
                weight: 0,
                term: NodeSelectorTerm::default(),
            }],
        };
        assert!(!b.admits(&labels));
        assert!(b.problem().is_some());
        assert!(
            req("x", SelectorOperator::Lt, &["nine"])
                .problem()
                .is_some(),
            "Lt needs an integer"
        );
        assert!(NodeAffinity::default().admits(&labels));
    }
}
