//! How both backends turn stored text into records and back: job states, JSON
//! columns (specs, placements, chains, traces) and the integer conversions between
//! the API's unsigned counters and the databases' signed 64-bit integers. One place,
//! so the backends cannot read the same row differently.

use forge_policy_host::model::Placement;
use serde::Serialize;

use super::{
    Fence, JobRecord, ListQuery, MAX_PAGE, NewVersion, Page, PolicyVersion, StoreError, Transition,
};
use crate::domain::{Digest, JobState, UnknownState};

/// The columns a job row is read with, in the order both backends' row readers expect.
pub const JOB_COLUMNS: &str = "seq, id, team, name, spec, state, reason, capsule_sha256, \
                               rayjob_name, queue_series, created_at_ms, updated_at_ms, placement, \
                               trace_parent, checkpoint_step, checkpoint_at_ms, attempt, terms, \
                               fleet";

/// The select of a plugin record, in the order both backends' row readers expect.
pub const PLUGIN_COLUMNS: &str = "SELECT owner, name, version, digest, size, description, \
                                  world, uploaded_by, uploaded_at_ms, memory_mib, deadline_ms \
                                  FROM plugins";

/// The select of a policy version, in the order both backends' row readers expect.
pub const VERSION_COLUMNS: &str = "SELECT scope, version, links, from_version, action, \
                                   author, comment, at_ms, fair_share FROM policy_versions";

/// A stored optional limit (signed in the database) as the record's unsigned one.
pub fn opt_u64(v: Option<i64>) -> Option<u64> {
    v.and_then(|v| u64::try_from(v).ok())
}

/// A stored job state.
pub fn parse_state(s: &str) -> Result<JobState, StoreError> {
    s.parse()
        .map_err(|e: UnknownState| StoreError::Corrupt(e.to_string()))
}

/// A `job_history` row's change, from its stored columns.
pub fn history_entry(
    from: Option<&str>,
    to: &str,
    reason: Option<String>,
    at_ms: i64,
) -> Result<crate::store::HistoryEntry, StoreError> {
    Ok(crate::store::HistoryEntry {
        from: from.map(parse_state).transpose()?,
        to: parse_state(to)?,
        reason,
        at_ms,
    })
}

/// A stored optional capsule digest.
pub fn parse_digest(d: Option<String>) -> Result<Option<Digest>, StoreError> {
    d.map(|d| Digest::parse(&d))
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("capsule digest: {e}")))
}

/// A value as the JSON text a column holds.
pub fn json_text<T: Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// A JSON column read back (`what` names it in the error).
/// A job row `lives_since` reads: `(id, series, spec JSON, created at)`.
pub type LifeJobRow = (String, Option<String>, String, i64);
/// A history row `lives_since` reads: `(job id, from, to, reason, at)`.
pub type LifeHistoryRow = (String, Option<String>, String, Option<String>, i64);

/// What `lives_since` assembles: the jobs (newest first) and their history rows
/// (oldest first).
pub fn assemble_lives(
    jobs: Vec<LifeJobRow>,
    rows: Vec<LifeHistoryRow>,
) -> Result<Vec<crate::store::JobLife>, StoreError> {
    let mut index = std::collections::HashMap::with_capacity(jobs.len());
    let mut lives = Vec::with_capacity(jobs.len());
    for (id, series, spec, created_at_ms) in jobs {
        let spec: crate::jobspec::JobSpec = from_json(&spec, "spec")?;
        index.insert(id.clone(), lives.len());
        lives.push(crate::store::JobLife {
            id,
            series,
            gpus: u32::try_from(spec.total_gpus()).unwrap_or(u32::MAX),
            created_at_ms,
            history: Vec::new(),
        });
    }
    for (job_id, from, to, reason, at_ms) in rows {
        // A job chosen between the two reads is left out of both or, here, skipped.
        if let Some(&i) = index.get(&job_id) {
            lives[i]
                .history
                .push(history_entry(from.as_deref(), &to, reason, at_ms)?);
        }
    }
    Ok(lives)
}

pub fn from_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// An unsigned count as a database integer.
pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A database integer as an unsigned count (negative: 0).
pub fn to_u64(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A stored placement. Rows written before the placement had one model (gateway 0.1)
/// stored each map as a list of `[key, value]` pairs; those are read as maps.
pub fn placement_from_json(text: &str) -> Result<Placement, StoreError> {
    let mut value: serde_json::Value = from_json(text, "placement")?;
    if let Some(pools) = value.get_mut("pools").and_then(|p| p.as_array_mut()) {
        for pool in pools {
            for key in ["nodeSelector", "rayResources", "labels", "annotations"] {
                let Some(field) = pool.get_mut(key) else {
                    continue;
                };
                if let Some(pairs) = field.as_array() {
                    let map: serde_json::Map<String, serde_json::Value> = pairs
                        .iter()
                        .filter_map(|pair| {
                            let k = pair.get(0)?.as_str()?.to_string();
                            Some((k, pair.get(1)?.clone()))
                        })
                        .collect();
                    *field = serde_json::Value::Object(map);
                }
            }
        }
    }
    serde_json::from_value(value).map_err(|e| StoreError::Corrupt(format!("placement: {e}")))
}

/// A stored job's admitted terms (`None`: not dispatched yet).
pub fn parse_terms(
    text: Option<String>,
) -> Result<Option<super::preemptions::AdmittedTerms>, StoreError> {
    text.as_deref().map(|t| from_json(t, "terms")).transpose()
}

/// Whether a transition releases a preempted job into the queue (its attempt counter
/// goes up), as the stored increment.
pub fn attempt_step(t: &Transition) -> i64 {
    i64::from(t.from == JobState::Preempting && t.to == JobState::Queued)
}

/// A stored optional placement.
pub fn parse_placement(text: Option<String>) -> Result<Option<Placement>, StoreError> {
    text.as_deref().map(placement_from_json).transpose()
}

/// A transition's JSON columns (placement, decision trace), once it is known to be a
/// legal move.
pub fn transition_columns(t: &Transition) -> Result<(Option<String>, Option<String>), StoreError> {
    if !t.from.can_transition_to(t.to) {
        return Err(StoreError::IllegalTransition {
            from: t.from,
            to: t.to,
        });
    }
    let placement = t.placement.as_ref().map(json_text).transpose()?;
    let plugins = t
        .decision
        .as_ref()
        .map(|d| json_text(&d.plugins))
        .transpose()?;
    Ok((placement, plugins))
}

/// Whether a fenced write may commit with the lease at `current` (0: no lease).
pub fn fence_holds(fence: &Fence, current: u64) -> Result<(), StoreError> {
    if current == fence.epoch {
        Ok(())
    } else {
        Err(StoreError::Fenced {
            lease: fence.lease.clone(),
            epoch: fence.epoch,
            current,
        })
    }
}

/// A list query's page size and keyset bound (`seq` below it).
pub fn page_bounds(q: &ListQuery) -> Result<(u32, i64), StoreError> {
    let limit = match q.limit {
        0 => 50,
        n => n.min(MAX_PAGE),
    };
    let after = match &q.after {
        None => i64::MAX,
        Some(c) => c
            .parse::<i64>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or(StoreError::BadCursor)?,
    };
    Ok((limit, after))
}

/// A page from up to `limit + 1` rows (the extra one says there is a next page).
pub fn page_of(mut jobs: Vec<JobRecord>, limit: u32) -> Page {
    let next = if jobs.len() > limit as usize {
        jobs.truncate(limit as usize);
        jobs.last().map(|j| j.seq.to_string())
    } else {
        None
    };
    Page { jobs, next }
}

/// The compare-and-set of an append: the next version, or the conflict.
pub fn next_version(v: &NewVersion, current: u64) -> Result<u64, StoreError> {
    if current == v.expected {
        Ok(current + 1)
    } else {
        Err(StoreError::VersionConflict {
            scope: v.scope.clone(),
            expected: v.expected,
            current,
        })
    }
}

/// The version an append stored.
pub fn appended(v: NewVersion, version: u64, at_ms: i64) -> PolicyVersion {
    PolicyVersion {
        scope: v.scope,
        version,
        plugins: v.plugins,
        fair_share: v.fair_share,
        from_version: version - 1,
        action: v.action.to_string(),
        author: v.author,
        comment: v.comment,
        at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement() -> Placement {
        Placement {
            pools: vec![forge_policy_host::model::PoolPlacement {
                pool: "train".into(),
                series: Some("h200".into()),
                node_selector: [("gpu".to_string(), "h200".to_string())].into(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn reads_placements_stored_as_pairs() {
        let legacy = r#"{"pools":[{"pool":"train","series":"h200","nodeSelector":[["gpu","h200"]],"rayResources":[["forge-pool-train",8.0]],"labels":[],"annotations":[]}]}"#;
        let p = placement_from_json(legacy).expect("legacy placement");
        assert_eq!(
            p.pools[0].node_selector.get("gpu").map(String::as_str),
            Some("h200")
        );
        assert_eq!(p.pools[0].ray_resources.get("forge-pool-train"), Some(&8.0));
        let current = json_text(&placement()).expect("json");
        assert_eq!(placement_from_json(&current).expect("current"), placement());
        assert!(matches!(
            placement_from_json("{"),
            Err(StoreError::Corrupt(m)) if m.starts_with("placement")
        ));
    }

    #[test]
    fn states_and_counts() {
        assert_eq!(parse_state("queued").expect("state"), JobState::Queued);
        assert!(matches!(parse_state("nope"), Err(StoreError::Corrupt(_))));
        assert_eq!(to_u64(-1), 0);
        assert_eq!(to_i64(u64::MAX), i64::MAX);
    }
}
