//! The contract a plugin's answer must keep, enforced on every decision (in a chain or
//! a single call): an admit places exactly the job's pools, in order, with non-negative
//! finite Ray resources, well-formed tolerations and node affinity, fleets that exist;
//! queue and reject
//! codes are stable identifiers. A violation is
//! a [`PluginError::BadOutput`] and fails the admission closed.

use crate::error::PluginError;
use crate::model::{Decision, PolicyRequest, TolerationOperator};

/// Stable codes are short lowercase identifiers: `[a-z0-9][a-z0-9.-]*`, ≤ 64 chars.
fn valid_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && code.as_bytes()[0].is_ascii_alphanumeric()
}

/// Enforce the contract on a plugin's answer.
pub(crate) fn check_decision(
    request: &PolicyRequest,
    d: Decision,
) -> Result<Decision, PluginError> {
    match &d {
        Decision::Admit { placement, .. } => {
            let pools = &request.job.pools;
            if placement.pools.len() != pools.len() {
                return Err(PluginError::BadOutput(format!(
                    "placement has {} pools, the job has {}",
                    placement.pools.len(),
                    pools.len()
                )));
            }
            for (i, (pp, pool)) in placement.pools.iter().zip(pools).enumerate() {
                if pp.pool != pool.name {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}] is `{}`, expected `{}`",
                        pp.pool, pool.name
                    )));
                }
                if let Some((k, v)) = pp
                    .ray_resources
                    .iter()
                    .find(|(_, v)| !v.is_finite() || **v < 0.0)
                {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}].rayResources[{k}] = {v} is not a non-negative number"
                    )));
                }
                for (j, t) in pp.tolerations.iter().enumerate() {
                    let bad = match t.operator {
                        TolerationOperator::Equal => t.key.is_none(),
                        TolerationOperator::Exists => t.value.is_some(),
                    };
                    if bad {
                        return Err(PluginError::BadOutput(format!(
                            "placement.pools[{i}].tolerations[{j}]: Equal needs a key, Exists takes no value"
                        )));
                    }
                }
                if let Some(f) = pp.fleets.iter().find(|f| !request.cluster.has_fleet(f)) {
                    let known: Vec<String> = request
                        .cluster
                        .fleet_views()
                        .iter()
                        .map(|f| format!("`{}`", f.name))
                        .collect();
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}].fleets names `{f}`, which is not a fleet \
                         (this gateway's: {})",
                        known.join(", ")
                    )));
                }
                if let Some(problem) = pp.affinity.problem() {
                    return Err(PluginError::BadOutput(format!(
                        "placement.pools[{i}].affinity: {problem}"
                    )));
                }
            }
        }
        Decision::Queue { code, .. } | Decision::Reject { code, .. } => check_code(code)?,
    }
    Ok(d)
}

/// A hold's, rejection's or veto's code must be a stable identifier.
pub(crate) fn check_code(code: &str) -> Result<(), PluginError> {
    if valid_code(code) {
        return Ok(());
    }
    Err(PluginError::BadOutput(format!(
        "code `{code}` is not a stable identifier ([a-z0-9.-], at most 64 characters)"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_must_be_stable_identifiers() {
        assert!(valid_code("quota.exceeded"));
        assert!(valid_code("storage.rwo-multi-node"));
        assert!(!valid_code(""));
        assert!(!valid_code("Quota"));
        assert!(!valid_code(".x"));
        assert!(!valid_code("has space"));
        assert!(!valid_code(&"a".repeat(65)));
    }
}
