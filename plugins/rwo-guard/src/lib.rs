//! `rwo-guard`: refuse multi-node jobs when the storage claim is ReadWriteOnce.
//!
//! A ReadWriteOnce claim (`FORGE_K8S_STORAGE_SHARED=false`) can be mounted by one node
//! only, so a job spanning several machines would hang with pods stuck on the volume.
//! Such a job is rejected up front, saying why and what to change.
//!
//! Settings: `{ "max_nodes": 1 }` (the default).

use forge_plugin_sdk::prelude::*;

/// Settings of `rwo-guard`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Most machines a job may span on ReadWriteOnce storage.
    #[serde(default = "one")]
    pub max_nodes: u32,
}

fn one() -> u32 {
    1
}

/// The policy.
pub struct RwoGuard;

impl Policy for RwoGuard {
    type Settings = Settings;

    fn validate(s: &Settings) -> Result<(), String> {
        if s.max_nodes == 0 {
            return Err("max_nodes must be at least 1".into());
        }
        Ok(())
    }

    fn evaluate(s: &Settings, req: &Request<'_>) -> Decision {
        let nodes = req.job().total_nodes();
        if req.job().storage == StorageMode::ReadWriteOnce && nodes > u64::from(s.max_nodes) {
            return Decision::reject(
                "storage.rwo-multi-node",
                format!(
                    "the storage claim is ReadWriteOnce (FORGE_K8S_STORAGE_SHARED=false): only {} node(s) \
                     can mount it, but this job spans {nodes}; run it on {} node(s) or ask the platform \
                     team for a ReadWriteMany claim",
                    s.max_nodes, s.max_nodes
                ),
                Some("pools"),
            );
        }
        Decision::admit()
    }
}

export_policy!(RwoGuard);

#[cfg(test)]
mod tests {
    use forge_plugin_sdk::harness::{Harness, RequestBuilder, validate};

    use super::*;

    #[test]
    fn rejects_multi_node_on_rwo() {
        let h = Harness::<RwoGuard>::new("{}").unwrap();
        let req = RequestBuilder::new()
            .storage(StorageMode::ReadWriteOnce)
            .pool("train", 1, 8, None)
            .pool("rollout", 1, 8, None)
            .build();
        let Decision::Reject(r) = h.evaluate(&req) else {
            panic!("expected reject")
        };
        assert_eq!(r.code, "storage.rwo-multi-node");
        assert_eq!(r.field.as_deref(), Some("pools"));
        assert!(r.message.contains("spans 2"), "{}", r.message);
    }

    #[test]
    fn admits_single_node_on_rwo_and_anything_on_shared() {
        let h = Harness::<RwoGuard>::new("").unwrap();
        let single = RequestBuilder::new()
            .storage(StorageMode::ReadWriteOnce)
            .pool("t", 1, 8, None)
            .build();
        assert!(matches!(h.evaluate(&single), Decision::Admit(_)));
        let shared = RequestBuilder::new().pool("t", 16, 8, None).build();
        assert!(matches!(h.evaluate(&shared), Decision::Admit(_)));
    }

    #[test]
    fn settings_are_checked() {
        assert_eq!(
            validate::<RwoGuard>(r#"{"max_nodes": 0}"#).unwrap_err(),
            "max_nodes must be at least 1"
        );
        assert!(validate::<RwoGuard>(r#"{"max_nodes": 2}"#).is_ok());
    }
}
