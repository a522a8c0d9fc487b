//! The JobSpec schema as the gateway publishes it (`/v1/schemas/jobspec` and the
//! OpenAPI document): the generated structural schema ([`super::json_schema`]) plus
//! every semantic rule of [`JobSpec::validate`](super::JobSpec::validate) that JSON
//! Schema can state exactly — name, label and variable patterns, reserved names, the
//! frameworks this gateway has an image for, the storage it offers, integer bounds —
//! so that a client or a fuzzer that follows the schema is refused only for what a
//! schema cannot say. Those rules are listed in the schema's `description`.
//!
//! Structural validation keeps using the generated schema: the semantic checks word
//! these problems better than a regular-expression mismatch would.

use serde_json::{Value, json};

use super::{
    MAX_ENV_VALUE_BYTES, RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES, RESERVED_LABEL_PREFIXES,
};
use crate::config::Config;

/// A DNS-1123 label (`names::is_dns1123_label`).
const DNS_LABEL: &str = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?";
/// The name part of a qualified name, non-empty (`names::is_label_name_part`).
const NAME_PART: &str = "([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]";
/// A positive Kubernetes quantity (`names::is_positive_quantity`): a number with a
/// non-zero digit, then a suffix or a decimal exponent.
const QUANTITY: &str = r"^(?=[0-9.]*[1-9])([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$";
/// What Rust's `str::trim` removes (Unicode `White_Space`), for "not only blanks".
const NOT_BLANK: &str =
    r"[^\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]";

/// What the published schema cannot state; a request that breaks one of these is
/// answered 422 `invalid-spec` although it follows the schema.
pub const UNSTATED_RULES: &str = "Rules the schema cannot state (answered 422 invalid-spec): \
pool names are unique; objectStoreMemory is less than memoryPerNode, memoryPerNode is at \
least 256Mi and objectStoreMemory at least 75Mi; env and secretEnv have at most 256 \
variables together, a name in one of them only, and env names and values at most 256 KiB \
in all; a secretEnv Secret is one of the caller's team (its name starts with `<team>.`); \
pip lines are at most 1024 bytes without control characters, their only options are \
pip's index and constraint options, and URLs carry no credentials other than ${VAR} \
references; lengths are in bytes where the schema counts characters.";

fn anchored(inner: &str) -> String {
    format!("^{inner}$")
}

fn alternation(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| regex_escape(s))
        .collect::<Vec<_>>()
        .join("|")
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\^$.|?*+()[]{}".contains(c);
            special
                .then_some('\\')
                .into_iter()
                .chain(std::iter::once(c))
        })
        .collect()
}

/// A DNS-1123 subdomain (`names::is_dns1123_subdomain`), without anchors; its length
/// is bounded by the caller.
fn subdomain() -> String {
    format!(r"{DNS_LABEL}(\.{DNS_LABEL})*")
}

/// A label key: a qualified name whose prefix is not reserved.
fn label_key() -> String {
    format!(
        r"^(?!({reserved}))((?=[^/]{{1,253}}/){sub}/)?{NAME_PART}$",
        reserved = alternation(RESERVED_LABEL_PREFIXES),
        sub = subdomain(),
    )
}

/// An environment variable name a job may set.
fn env_name() -> String {
    let prefixes = alternation(RESERVED_ENV_PREFIXES);
    let names = alternation(RESERVED_ENV_NAMES);
    format!("^(?!({prefixes})|({names})$)[A-Za-z_][A-Za-z0-9_]*$")
}

/// The JobSpec schema for clients of this gateway (its configured frameworks and
/// storage).
pub fn published_schema(cfg: &Config) -> Value {
    let mut s = super::json_schema();
    let props = &mut s["properties"];
    props["name"]["pattern"] = json!(anchored(DNS_LABEL));
    let frameworks: Vec<&str> = cfg.images.keys().map(String::as_str).collect();
    props["framework"]["enum"] = json!(frameworks);
    props["entrypoint"]["pattern"] = json!(NOT_BLANK);
    props["env"]["propertyNames"] = json!({"pattern": env_name()});
    props["env"]["additionalProperties"] =
        json!({"type": "string", "maxLength": MAX_ENV_VALUE_BYTES});
    props["secretEnv"]["propertyNames"] = json!({"pattern": env_name()});
    props["labels"]["propertyNames"] = json!({"pattern": label_key()});
    props["labels"]["additionalProperties"] =
        json!({"type": "string", "pattern": format!("^({NAME_PART})?$")});
    props["priority"]["minimum"] = json!(i32::MIN);
    props["priority"]["maximum"] = json!(i32::MAX);
    if cfg.storage.pvc.is_none() {
        props["sharedStorage"]["enum"] = json!([false]);
        props["sharedStorage"]["description"] =
            json!("this gateway has no storage claim (FORGE_K8S_STORAGE_PVC)");
    }
    if cfg.storage.corpus_pvc.is_none() {
        props["corpus"]["enum"] = json!([false]);
        props["corpus"]["description"] =
            json!("this gateway has no corpus claim (FORGE_K8S_CORPUS_PVC)");
    }
    if let Some(pool) = s.pointer_mut("/$defs/PoolSpec/properties") {
        pool["name"]["pattern"] = json!(anchored(DNS_LABEL));
        pool["series"]["pattern"] = json!(anchored(NAME_PART));
        pool["memoryPerNode"]["pattern"] = json!(QUANTITY);
        pool["objectStoreMemory"]["pattern"] = json!(QUANTITY);
    }
    if let Some(secret) = s.pointer_mut("/$defs/SecretRef") {
        // Both are checked as required (defaulted only so every problem is reported).
        secret["required"] = json!(["secret", "key"]);
    }
    if let Some(secret) = s.pointer_mut("/$defs/SecretRef/properties") {
        secret["secret"]["pattern"] = json!(anchored(&subdomain()));
        secret["key"]["pattern"] = json!("^[-._a-zA-Z0-9]+$");
    }
    let description = s["description"].as_str().unwrap_or_default().to_string();
    s["description"] = json!(
        format!("{description}\n\n{UNSTATED_RULES}")
            .trim()
            .to_string()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobspec::names;

    fn matches(pattern: &str, s: &str) -> bool {
        // The document's patterns are ECMA-262 regular expressions; `fancy-regex`-free
        // check: compile through the same JSON Schema validator the gateway uses.
        let v = jsonschema::validator_for(&json!({"type": "string", "pattern": pattern}))
            .expect("pattern compiles");
        v.is_valid(&json!(s))
    }

    #[test]
    fn patterns_agree_with_the_semantic_checks() {
        let label = anchored(DNS_LABEL);
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        for s in [
            "a",
            "a-b",
            "0",
            "ab9",
            long.as_str(),
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            too_long.as_str(),
            "é",
        ] {
            assert_eq!(
                matches(&label, s),
                names::is_dns1123_label(s),
                "label {s:?}"
            );
        }
        let key = label_key();
        for s in [
            "app",
            "team/app",
            "a.b.c/x_y-z.1",
            "forge.dev/x",
            "ray.io/x",
            "x/",
            "/x",
            "A.B/x",
            "a/b/c",
            "-x",
            "x.",
            long.as_str(),
            too_long.as_str(),
        ] {
            let expected = names::is_qualified_name(s)
                && !RESERVED_LABEL_PREFIXES.iter().any(|r| s.starts_with(r));
            assert_eq!(matches(&key, s), expected, "label key {s:?}");
        }
        let env = env_name();
        for s in [
            "A",
            "_x",
            "a9",
            "FORGE_X",
            "RAY_ADDRESS",
            "CUDA_VISIBLE_DEVICES",
            "CUDA_VISIBLE_DEVICES_2",
            "9a",
            "a-b",
            "",
            "FORGEX",
        ] {
            let expected = names::is_c_identifier(s)
                && !RESERVED_ENV_PREFIXES.iter().any(|r| s.starts_with(r))
                && !RESERVED_ENV_NAMES.contains(&s);
            assert_eq!(matches(&env, s), expected, "env name {s:?}");
        }
        for s in [
            "64Gi", "1.5Gi", "1e9", "500M", ".5", "0", "0Gi", "00.0", "1x", "Gi", "", "1e", "1.2.3",
        ] {
            assert_eq!(
                matches(QUANTITY, s),
                names::is_positive_quantity(s),
                "quantity {s:?}"
            );
        }
        for s in ["python x.py", " x ", "\t", " \u{3000} ", "", "\u{1c}"] {
            assert_eq!(
                matches(NOT_BLANK, s),
                !s.trim().is_empty(),
                "entrypoint {s:?}"
            );
        }
        let sub = anchored(&subdomain());
        for s in ["team-a.wandb", "a", "a..b", ".a", "A.b", "a.b-"] {
            assert_eq!(
                matches(&sub, s),
                names::is_dns1123_subdomain(s),
                "secret {s:?}"
            );
        }
    }

    #[test]
    fn frameworks_and_storage_follow_the_configuration() {
        let mut env = crate::config::dev_defaults();
        env.insert("FORGE_DATA_DIR".into(), "/tmp/x".into());
        env.insert("FORGE_IMAGE_NEMO_RL".into(), "ray:1".into());
        let cfg = Config::from_env_map(env).expect("config");
        let s = published_schema(&cfg);
        // The dev defaults configure the vLLM image too (playgrounds).
        assert_eq!(
            s["properties"]["framework"]["enum"],
            json!(["nemo-rl", "vllm"])
        );
        assert_eq!(s["properties"]["sharedStorage"]["enum"], json!([false]));
    }
}
