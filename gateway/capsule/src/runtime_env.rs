//! The RayJob `runtimeEnvYAML` string: `working_dir` (presigned URL or
//! `file://` path of the capsule) and `env_vars`, serialized with serde_yaml
//! (never hand-formatted: URLs carry `&`, `%`, `:` that YAML would misread).

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
) -> Result<String, serde_yaml::Error> {
    serde_yaml::to_string(&RuntimeEnv {
        working_dir: working_dir.to_owned(),
        env_vars: env_vars.clone(),
    })
}

/// Parse a `runtimeEnvYAML` string back (emulator, tests).
pub fn parse(yaml: &str) -> Result<RuntimeEnv, serde_yaml::Error> {
    serde_yaml::from_str(yaml)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_awkward_values() {
        let url = "http://s3:9000/b/capsules/ab.zip?X-Amz-Signature=a%2Fb&X-Amz-Expires=60: #x";
        let mut env = BTreeMap::new();
        env.insert("A".into(), "yes".into());
        env.insert("B".into(), "1: {x}".into());
        let y = runtime_env_yaml(url, &env).expect("serializes");
        let back: RuntimeEnv = serde_yaml::from_str(&y).expect("parses");
        assert_eq!(back.working_dir, url);
        assert_eq!(back.env_vars, env);
        // "yes" must stay a string, not become a YAML 1.1 boolean.
        let v: serde_yaml::Value = serde_yaml::from_str(&y).expect("parses");
        assert_eq!(v["env_vars"]["A"], serde_yaml::Value::String("yes".into()));
    }
}
