//! The RayJob `runtimeEnvYAML` string: `working_dir` (presigned URL or `file://` path
//! of the capsule) and `env_vars`.
//!
//! It is written as JSON, which is valid YAML under every YAML version: every string is
//! double-quoted, so no value can be re-read as something else (`yes`/`y`/`on` as YAML
//! 1.1 booleans for PyYAML, `1e3` as a number, a URL's `: #` as structure). Never
//! hand-formatted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The subset of Ray's runtime_env Forge sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEnv {
    pub working_dir: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
}

/// Build the `runtimeEnvYAML` value for a RayJob.
pub fn runtime_env_yaml(
    working_dir: &str,
    env_vars: &BTreeMap<String, String>,
) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(&RuntimeEnv {
        working_dir: working_dir.to_owned(),
        env_vars: env_vars.clone(),
    })
}

/// Parse a `runtimeEnvYAML` string back (emulator, tests); any YAML is accepted.
pub fn parse(yaml: &str) -> Result<RuntimeEnv, serde_saphyr::Error> {
    serde_saphyr::from_str(yaml)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_awkward_values() {
        let url = "http://s3:9000/b/capsules/ab.zip?X-Amz-Signature=a%2Fb&X-Amz-Expires=60: #x";
        let mut env = BTreeMap::new();
        for (k, v) in [
            ("A", "yes"),
            ("B", "1: {x}"),
            ("C", "y"),
            ("D", "1e3"),
            ("E", "~"),
        ] {
            env.insert(k.to_string(), v.to_string());
        }
        let y = runtime_env_yaml(url, &env).expect("serializes");
        let back = parse(&y).expect("parses");
        assert_eq!(back.working_dir, url);
        assert_eq!(back.env_vars, env);
        // Every value stays a string, whatever a YAML 1.1 reader would make of it.
        for v in env.values() {
            assert!(y.contains(&format!("\"{v}\"")), "{v} is quoted in {y}");
        }
    }
}
