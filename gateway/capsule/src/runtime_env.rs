//! The RayJob `runtimeEnvYAML` string: `working_dir` (presigned URL or `file://` path
//! of the capsule), `env_vars` and the `pip` packages (see [`crate::requirements`]).
//!
//! It is written as JSON, which is valid YAML under every YAML version: every string is
//! double-quoted, so no value can be re-read as something else (`yes`/`y`/`on` as YAML
//! 1.1 booleans for PyYAML, `1e3` as a number, a URL's `: #` as structure). Never
//! hand-formatted. Characters JSON may leave raw but YAML may not (DEL, C1 controls,
//! `U+FFFE`/`U+FFFF`) or that YAML 1.1 reads as line breaks inside a quoted scalar
//! (NEL, `U+2028`, `U+2029`; and the BOM) are written as `\uXXXX` escapes, which
//! both read back as the same character.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The subset of Ray's runtime_env Forge sets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeEnv {
    pub working_dir: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env_vars: BTreeMap<String, String>,
    /// Packages Ray installs with pip in every Ray pod (requirements-file lines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pip: Vec<String>,
}

/// Build the `runtimeEnvYAML` value for a RayJob.
pub fn runtime_env_yaml(
    working_dir: &str,
    env_vars: &BTreeMap<String, String>,
) -> Result<String, serde_json::Error> {
    runtime_env_yaml_of(&RuntimeEnv {
        working_dir: working_dir.to_owned(),
        env_vars: env_vars.clone(),
        pip: Vec::new(),
    })
}

/// Build the `runtimeEnvYAML` value for a RayJob from a whole runtime env.
pub fn runtime_env_yaml_of(env: &RuntimeEnv) -> Result<String, serde_json::Error> {
    let json = serde_json::to_string_pretty(env)?;
    Ok(escape_for_yaml(&json))
}

/// Whether YAML readers need `c` escaped inside a double-quoted scalar.
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// `json` with every character of [`needs_escape`] as a `\uXXXX` escape (they only
/// occur inside string literals, where that escape means the same in JSON and YAML).
fn escape_for_yaml(json: &str) -> String {
    if !json.chars().any(needs_escape) {
        return json.to_owned();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if needs_escape(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
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

    #[test]
    fn characters_yaml_forbids_are_escaped_and_read_back() {
        let mut env = BTreeMap::new();
        env.insert(
            "A".to_string(),
            "del\u{7f} c1\u{85}\u{9f} ls\u{2028} ok é".to_string(),
        );
        let y = runtime_env_yaml("file:///x.zip", &env).expect("serializes");
        assert!(!y.chars().any(needs_escape), "{y:?}");
        assert!(y.contains("\\u007f") && y.contains("\\u2028"), "{y}");
        assert_eq!(parse(&y).expect("parses").env_vars, env);
        let back: RuntimeEnv = serde_json::from_str(&y).expect("still JSON");
        assert_eq!(back.env_vars, env);
    }
}
