//! Fair-share weights (issue 39): how much of each series a team is entitled to,
//! relative to the other teams that want it. They are settings of the global policy
//! (`PUT /v1/policy`'s `fairShare`), so they are versioned, rolled back and picked up
//! by every replica with the chain they were stored with.
//!
//! A team's fair share of a series is the series' GPUs × its weight / the weights of
//! the teams that hold or want GPUs there; the dispatcher orders teams by their share
//! (decayed usage + GPUs held) over their weight. A weight must be a positive, finite
//! number: a zero weight would divide by zero and, in Kueue, let a team jump the queue
//! (kueue#13479), so it is refused, not read as "no share".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The largest weight accepted: a million to one is already more contrast than any
/// fair share can show.
pub const MAX_WEIGHT: f64 = 1_000_000.0;

/// The fair-share settings of a policy version.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FairShareSettings {
    /// Team → weight; teams not listed weigh 1.
    pub weights: BTreeMap<String, f64>,
}

/// The settings' fields as a document carries them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Fields {
    #[serde(default)]
    weights: BTreeMap<String, f64>,
}

impl<'de> Deserialize<'de> for FairShareSettings {
    /// From an object only (serde's derive would also read the fields from an array).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> serde::de::Visitor<'de> for Object {
            type Value = FairShareSettings;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of fair-share settings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                let fields =
                    Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(FairShareSettings {
                    weights: fields.weights,
                })
            }
        }
        d.deserialize_map(Object)
    }
}

/// Why settings were refused: the field and the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct InvalidWeights {
    /// The offending field, e.g. `fairShare.weights.team-a`.
    pub field: String,
    pub why: String,
}

impl FairShareSettings {
    /// `team`'s weight (1 if not listed).
    pub fn weight(&self, team: &str) -> f64 {
        self.weights.get(team).copied().unwrap_or(1.0)
    }

    /// True for the settings every team gets without any (all weights 1).
    pub fn is_default(&self) -> bool {
        self.weights.is_empty()
    }

    /// Refuses an empty team name and a weight that is not in `(0, MAX_WEIGHT]`.
    pub fn validate(&self) -> Result<(), InvalidWeights> {
        for (team, w) in &self.weights {
            let field = format!("fairShare.weights.{team}");
            if team.trim().is_empty() {
                return Err(InvalidWeights {
                    field,
                    why: "a team name must not be empty".into(),
                });
            }
            if !(w.is_finite() && *w > 0.0 && *w <= MAX_WEIGHT) {
                return Err(InvalidWeights {
                    field,
                    why: format!(
                        "a weight is a number above 0 and at most {MAX_WEIGHT}, not {w} \
                         (leave a team out for the default weight 1)"
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(pairs: &[(&str, f64)]) -> FairShareSettings {
        FairShareSettings {
            weights: pairs.iter().map(|(t, w)| ((*t).into(), *w)).collect(),
        }
    }

    #[test]
    fn settings_are_read_from_an_object_only() {
        let read = |t: &str| serde_json::from_str::<FairShareSettings>(t);
        assert_eq!(
            read(r#"{"weights": {"a": 2}}"#).unwrap(),
            weights(&[("a", 2.0)])
        );
        assert_eq!(read("{}").unwrap(), FairShareSettings::default());
        for bad in ["[]", r#"[{"a": 2}]"#, r#"{"weights": {}, "x": 1}"#, "null"] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn teams_not_listed_weigh_one() {
        let s = weights(&[("team-a", 2.0)]);
        assert_eq!(s.weight("team-a"), 2.0);
        assert_eq!(s.weight("team-b"), 1.0);
        assert!(s.validate().is_ok());
        assert!(FairShareSettings::default().is_default());
    }

    #[test]
    fn a_zero_negative_or_huge_weight_is_refused_with_its_field() {
        for w in [0.0, -1.0, f64::INFINITY, MAX_WEIGHT * 2.0] {
            let e = weights(&[("team-a", w)]).validate().expect_err("refused");
            assert_eq!(e.field, "fairShare.weights.team-a", "{w}");
        }
        let e = weights(&[(" ", 1.0)]).validate().expect_err("empty team");
        assert!(e.why.contains("must not be empty"), "{e}");
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<FairShareSettings>(r#"{"weight": {"a": 1}}"#);
        assert!(e.is_err());
    }
}
