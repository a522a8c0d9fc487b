//! Where a pool's pods may run, as Kubernetes objects: the tolerations (the configured
//! `FORGE_K8S_GPU_TOLERATIONS` plus the placement's, once each) and the node affinity
//! of the placement, checked as Kubernetes would check them (keys are qualified names,
//! `In`/`NotIn` values are label values, `Gt`/`Lt` take one integer).

use forge_policy_host::model::{self, NodeAffinity, SelectorOperator, TolerationOperator};
use k8s_openapi::api::core::v1::{
    Affinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    Toleration,
};

use super::BuildError;
use crate::jobspec::names;

fn invalid(pool: &str, field: &'static str, reason: String) -> BuildError {
    BuildError::InvalidPlacement {
        pool: pool.to_string(),
        field,
        reason,
    }
}

/// The pods' tolerations: `configured` then the placement's, without repeats.
pub fn tolerations(
    pool: &str,
    configured: &[model::Toleration],
    placed: &[model::Toleration],
) -> Result<Option<Vec<Toleration>>, BuildError> {
    let mut out: Vec<Toleration> = Vec::new();
    for t in configured.iter().chain(placed) {
        if let Some(k) = &t.key
            && !names::is_qualified_name(k)
        {
            return Err(invalid(
                pool,
                "tolerations",
                format!("`{k}` is not a taint key"),
            ));
        }
        if let Some(v) = &t.value
            && !names::is_label_value(v)
        {
            return Err(invalid(
                pool,
                "tolerations",
                format!("`{v}` is not a taint value"),
            ));
        }
        let k8s = Toleration {
            key: t.key.clone(),
            operator: Some(
                match t.operator {
                    TolerationOperator::Equal => "Equal",
                    TolerationOperator::Exists => "Exists",
                }
                .to_string(),
            ),
            value: t.value.clone(),
            effect: t.effect.map(|e| e.as_str().to_string()),
            toleration_seconds: None,
        };
        if !out.contains(&k8s) {
            out.push(k8s);
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

fn term(pool: &str, t: &model::NodeSelectorTerm) -> Result<NodeSelectorTerm, BuildError> {
    let mut exprs = Vec::with_capacity(t.match_expressions.len());
    for r in &t.match_expressions {
        if !names::is_qualified_name(&r.key) {
            return Err(invalid(
                pool,
                "affinity",
                format!("`{}` is not a label key", r.key),
            ));
        }
        let numeric = matches!(r.operator, SelectorOperator::Gt | SelectorOperator::Lt);
        if let Some(v) = r.values.iter().find(|v| {
            if numeric {
                v.parse::<i64>().is_err()
            } else {
                !names::is_label_value(v)
            }
        }) {
            return Err(invalid(
                pool,
                "affinity",
                format!("`{v}` is not a valid value"),
            ));
        }
        exprs.push(NodeSelectorRequirement {
            key: r.key.clone(),
            operator: match r.operator {
                SelectorOperator::In => "In",
                SelectorOperator::NotIn => "NotIn",
                SelectorOperator::Exists => "Exists",
                SelectorOperator::DoesNotExist => "DoesNotExist",
                SelectorOperator::Gt => "Gt",
                SelectorOperator::Lt => "Lt",
            }
            .to_string(),
            values: (!r.values.is_empty()).then(|| r.values.clone()),
        });
    }
    Ok(NodeSelectorTerm {
        match_expressions: Some(exprs),
        match_fields: None,
    })
}

/// The pods' node affinity, if the placement has any.
pub fn affinity(pool: &str, a: &NodeAffinity) -> Result<Option<Affinity>, BuildError> {
    if a.is_empty() {
        return Ok(None);
    }
    if let Some(problem) = a.problem() {
        return Err(invalid(pool, "affinity", problem));
    }
    let required = if a.required.is_empty() {
        None
    } else {
        Some(NodeSelector {
            node_selector_terms: a
                .required
                .iter()
                .map(|t| term(pool, t))
                .collect::<Result<_, _>>()?,
        })
    };
    let preferred = if a.preferred.is_empty() {
        None
    } else {
        Some(
            a.preferred
                .iter()
                .map(|p| {
                    Ok(PreferredSchedulingTerm {
                        weight: p.weight,
                        preference: term(pool, &p.term)?,
                    })
                })
                .collect::<Result<_, BuildError>>()?,
        )
    };
    Ok(Some(Affinity {
        node_affinity: Some(k8s_openapi::api::core::v1::NodeAffinity {
            required_during_scheduling_ignored_during_execution: required,
            preferred_during_scheduling_ignored_during_execution: preferred,
        }),
        ..Affinity::default()
    }))
}
