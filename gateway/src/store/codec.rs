//! How both backends turn stored text into records and back: job states, JSON
//! columns (specs, placements, chains, traces) and the integer conversions between
//! the API's unsigned counters and the databases' signed 64-bit integers. One place,
//! so the backends cannot read the same row differently.

use forge_policy_host::model::Placement;
use serde::Serialize;

use super::StoreError;
use crate::domain::{Digest, JobState, UnknownState};

/// A stored job state.
pub fn parse_state(s: &str) -> Result<JobState, StoreError> {
    s.parse()
        .map_err(|e: UnknownState| StoreError::Corrupt(e.to_string()))
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

/// A stored optional placement.
pub fn parse_placement(text: Option<String>) -> Result<Option<Placement>, StoreError> {
    text.as_deref().map(placement_from_json).transpose()
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
