//! "A team's links may only narrow": the rule for the scheduling fields of a pool
//! placement (contract 0.2.0) — tolerations and node affinity — and for the fleets
//! (contract 0.3.0). A team link may not add a toleration (it would let the team's pods
//! onto nodes the cluster keeps them off), may not loosen the required node affinity it
//! was given, and may not allow a fleet it was not allowed. Preferred terms are soft
//! (they choose among nodes the pod may use anyway) and are not restricted.
//!
//! One function per field group, so the rule for the other placement fields can live
//! beside these without touching them; [`check_pool`] applies every group here.

use crate::error::PluginError;
use crate::model::{NodeAffinity, NodeSelectorTerm, PoolPlacement, Toleration};
use crate::narrowing::Widening;

/// Checks one pool's placement after a team link (`after`) against the one the link
/// was given (`before`); `at` is the pool's index.
pub fn check_pool(
    at: usize,
    before: &PoolPlacement,
    after: &PoolPlacement,
) -> Result<(), PluginError> {
    check_tolerations(at, &before.tolerations, &after.tolerations)?;
    check_affinity(at, &before.affinity, &after.affinity)?;
    check_fleets(at, &before.fleets, &after.fleets)
}

/// The fleets a team link allows must be among those it was allowed: an empty list
/// (any fleet) may become any list; a non-empty one only a non-empty subset of itself.
pub fn check_fleets(at: usize, before: &[String], after: &[String]) -> Result<(), PluginError> {
    if before.is_empty() {
        return Ok(());
    }
    let field = format!("placement.pools[{at}].fleets");
    if after.is_empty() {
        return Err(widened(
            field,
            "allows every fleet where it was given a list; only global policies may".into(),
        ));
    }
    match after.iter().find(|f| !before.contains(f)) {
        None => Ok(()),
        Some(added) => Err(widened(
            field,
            format!("allows the fleet `{added}` it was not given"),
        )),
    }
}

/// Every toleration a team link returns must have been given to it.
pub fn check_tolerations(
    at: usize,
    before: &[Toleration],
    after: &[Toleration],
) -> Result<(), PluginError> {
    match after.iter().find(|t| !before.contains(t)) {
        None => Ok(()),
        Some(added) => Err(widened(
            format!("placement.pools[{at}].tolerations"),
            format!(
                "adds the toleration {}; only global policies may add tolerations",
                describe(added)
            ),
        )),
    }
}

/// The required node affinity a team link returns must be at least as strict as the
/// one it was given: with no requirement given, any is stricter; otherwise every
/// returned term must contain every expression of some given term (a node matching
/// it then matches the given one), and the requirement may not be dropped.
pub fn check_affinity(
    at: usize,
    before: &NodeAffinity,
    after: &NodeAffinity,
) -> Result<(), PluginError> {
    if before.required.is_empty() {
        return Ok(());
    }
    let field = format!("placement.pools[{at}].affinity.required");
    if after.required.is_empty() {
        return Err(widened(
            field,
            "drops the required node affinity it was given".into(),
        ));
    }
    let narrower = |term: &NodeSelectorTerm| {
        before.required.iter().any(|given| {
            given
                .match_expressions
                .iter()
                .all(|e| term.match_expressions.contains(e))
        })
    };
    match after.required.iter().position(|t| !narrower(t)) {
        None => Ok(()),
        Some(i) => Err(widened(
            format!("{field}[{i}]"),
            "is looser than every required term it was given (a term may only add \
             requirements to a given one)"
                .into(),
        )),
    }
}

fn widened(field: String, reason: String) -> PluginError {
    PluginError::Widened(Box::new(Widening { field, reason }))
}

fn describe(t: &Toleration) -> String {
    let key = t.key.as_deref().unwrap_or("*");
    let value = t
        .value
        .as_deref()
        .map(|v| format!("={v}"))
        .unwrap_or_default();
    let effect = t
        .effect
        .map(|e| format!(":{}", e.as_str()))
        .unwrap_or_default();
    format!("`{key}{value}{effect}` ({:?})", t.operator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeSelectorRequirement, SelectorOperator, TolerationOperator};

    fn tol(key: &str) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: TolerationOperator::Exists,
            value: None,
            effect: None,
        }
    }

    fn term(exprs: &[(&str, &str)]) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: exprs
                .iter()
                .map(|(k, v)| NodeSelectorRequirement {
                    key: (*k).into(),
                    operator: SelectorOperator::In,
                    values: vec![(*v).into()],
                })
                .collect(),
        }
    }

    fn required(terms: Vec<NodeSelectorTerm>) -> NodeAffinity {
        NodeAffinity {
            required: terms,
            preferred: Vec::new(),
        }
    }

    #[test]
    fn tolerations_may_be_kept_or_dropped_never_added() {
        let given = [tol("a"), tol("b")];
        assert!(check_tolerations(0, &given, &[tol("a")]).is_ok());
        assert!(check_tolerations(0, &given, &given).is_ok());
        let err = check_tolerations(2, &given, &[tol("a"), tol("gpu")]).unwrap_err();
        assert!(
            matches!(&err, PluginError::Widened(w)
                if w.field == "placement.pools[2].tolerations" && w.reason.contains("`gpu`")),
            "{err}"
        );
    }

    #[test]
    fn required_affinity_may_only_get_stricter() {
        let none = NodeAffinity::default();
        let zone_a = required(vec![term(&[("zone", "a")])]);
        let zone_a_gen9 = required(vec![term(&[("zone", "a"), ("gen", "9")])]);
        let zone_b = required(vec![term(&[("zone", "b")])]);
        let a_or_b = required(vec![term(&[("zone", "a")]), term(&[("zone", "b")])]);

        assert!(
            check_affinity(0, &none, &zone_a).is_ok(),
            "adding is narrowing"
        );
        assert!(check_affinity(0, &zone_a, &zone_a_gen9).is_ok());
        assert!(
            check_affinity(0, &a_or_b, &zone_b).is_ok(),
            "dropping an alternative"
        );
        assert!(check_affinity(0, &zone_a, &zone_a).is_ok());
        assert!(
            check_affinity(0, &zone_a, &none).is_err(),
            "dropping the requirement"
        );
        assert!(
            check_affinity(0, &zone_a, &zone_b).is_err(),
            "a different term"
        );
        let err = check_affinity(1, &zone_a, &a_or_b).unwrap_err();
        assert!(
            matches!(&err, PluginError::Widened(w)
                if w.field == "placement.pools[1].affinity.required[1]"),
            "an added alternative widens: {err}"
        );
    }

    #[test]
    fn fleets_may_only_narrow() {
        let names = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // Any fleet → a pin is narrowing.
        assert!(check_fleets(0, &[], &names(&["eu"])).is_ok());
        assert!(check_fleets(0, &names(&["eu", "us"]), &names(&["eu"])).is_ok());
        let err = check_fleets(1, &names(&["eu"]), &names(&["eu", "us"])).unwrap_err();
        assert_eq!(err.field(), Some("placement.pools[1].fleets"));
        assert!(err.to_string().contains("`us`"), "{err}");
        let err = check_fleets(0, &names(&["eu"]), &[]).unwrap_err();
        assert!(err.to_string().contains("every fleet"), "{err}");
    }
}
