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
use forge_capsule::requirements::{ALLOWED_OPTIONS, MAX_REQUIREMENT_BYTES, MAX_REQUIREMENTS};

/// A DNS-1123 label (`names::is_dns1123_label`).
const DNS_LABEL: &str = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?";
/// The name part of a qualified name, non-empty (`names::is_label_name_part`).
const NAME_PART: &str = "([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]";
/// A positive Kubernetes quantity Forge can compute with (`names::is_positive_quantity`):
/// a number with a non-zero digit and at most 9 fractional digits, then a suffix or a
/// one-digit decimal exponent, with at most as many integer digits as the suffix allows
/// (below ~10^18 base units); no `E`/`Ei`.
const QUANTITY: &str = concat!(
    r"^(?=[0-9.]*[1-9])(?:",
    r"(?:[0-9]{1,18}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:m|u|n)?",
    r"|(?:[0-9]{1,15}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:Ki|k)",
    r"|(?:[0-9]{1,12}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:Mi|M)",
    r"|(?:[0-9]{1,9}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:Gi|G)",
    r"|(?:[0-9]{1,6}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:Ti|T)",
    r"|(?:[0-9]{1,3}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})(?:Pi|P)",
    r"|(?:[0-9]{1,9}(?:\.[0-9]{0,9})?|\.[0-9]{1,9})[eE][-+]?[0-9]",
    r")$"
);
/// What Rust's `str::trim` removes (Unicode `White_Space`), as a character-class body.
macro_rules! white_space {
    () => {
        r"\t\n\u000b\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
    };
}
/// Not only blanks.
const NOT_BLANK: &str = concat!("[^", white_space!(), "]");
/// What `char::is_control` is (Unicode `Cc`), as a character-class body.
const CONTROL: &str = r"\u0000-\u001f\u007f-\u009f";
/// No URL with credentials other than `${VAR}` references (`check_requirement`).
const NO_CREDENTIALS: &str =
    r"(?![\s\S]*://(?=[^/?# \t]*@)(?!(?::|\$\{[^}/?# \t]*\})*@[^@/?# \t]*(?:[/?# \t]|$)))";

/// A pip line as the gateway takes it (`forge_capsule::requirements::check_requirement`
/// of the trimmed line): not blank, no control characters inside its blanks, an option
/// only of the allowed ones, and no credentials in a URL.
fn pip_line() -> String {
    let ws = white_space!();
    let options: Vec<&str> = ALLOWED_OPTIONS.iter().map(|o| &o[1..]).collect();
    let options = options.join("|");
    format!(
        "^{NO_CREDENTIALS}[{ws}]*(?=[^{ws}])(?!-(?!(?:{options})(?:[={ws}]|$)))[^{CONTROL}]*[{ws}]*$"
    )
}

/// What the published schema cannot state; a request that breaks one of these is
/// answered 422 `invalid-spec` although it follows the schema.
pub const UNSTATED_RULES: &str = "Rules the schema cannot state (answered 422 invalid-spec): \
pool names are unique; objectStoreMemory is less than memoryPerNode, memoryPerNode is at \
least 256Mi and objectStoreMemory at least 75Mi; env and secretEnv have at most 256 \
variables together, a name in one of them only, and env names and values at most 256 KiB \
in all; a secretEnv Secret is one of the caller's team (its name starts with `<team>.`); \
pip lines are at most 1024 bytes; lengths are in bytes where the schema counts \
characters.";

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
    props["pip"]["maxItems"] = json!(MAX_REQUIREMENTS);
    props["pip"]["items"] =
        json!({"type": "string", "maxLength": MAX_REQUIREMENT_BYTES, "pattern": pip_line()});
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
    if let Some(deadlines) = s.pointer_mut("/$defs/Deadlines/properties") {
        // This gateway's bound (FORGE_PREEMPTION_MAX_GRACE_S).
        deadlines["checkpointGraceSeconds"]["maximum"] = json!(cfg.gateway.preemption_max_grace_s);
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

    /// The pattern, the semantic check and the arithmetic agree on `s`: what the
    /// pattern accepts is a positive byte count.
    fn assert_quantity(s: &str) {
        let ok = names::is_positive_quantity(s);
        assert_eq!(matches(QUANTITY, s), ok, "quantity {s:?}");
        if ok {
            assert!(
                crate::domain::quantity::bytes(s).is_some_and(|b| b > 0),
                "quantity {s:?} has no byte count"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn quantities_agree_with_the_pattern_and_the_arithmetic(
            s in "[0-9.]{0,21}(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]{1,2})?"
        ) {
            assert_quantity(&s);
        }
    }

    #[test]
    fn pip_lines_follow_the_capsule_check() {
        use forge_capsule::requirements::check_requirement;
        let pattern = pip_line();
        for s in [
            "numpy",
            " numpy==1.26 ",
            "",
            "   ",
            "\t",
            "numpy\u{1}",
            "numpy \n",
            "\u{3000}numpy\u{3000}",
            "-i https://pypi.internal/simple",
            "--index-url=https://x",
            "--pre",
            "--no-deps",
            "-e .",
            "--index-urlx",
            "https://user:pw@host/x.whl",
            "https://${USER}:${PW}@host/x.whl",
            "https://:@host/x.whl",
            "pkg @ git+https://github.com/a/b",
            "pkg @ https://u@h/x.whl",
            "pkg; python_version < '3.8'",
        ] {
            let expected = !s.trim().is_empty() && check_requirement(s.trim()).is_ok();
            assert_eq!(matches(&pattern, s), expected, "pip {s:?}");
        }
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
            "64Gi",
            "1.5Gi",
            "1e9",
            "500M",
            ".5",
            "0",
            "0Gi",
            "00.0",
            "1x",
            "Gi",
            "",
            "1e",
            "1.2.3",
            "1Ei",
            "1E",
            "1e10",
            "999Pi",
            "1000Pi",
            "999999999999999999",
            "9999999999999999999",
            "0.123456789",
            "0.1234567891",
            "1.",
            "123456789.123456789e9",
        ] {
            assert_quantity(s);
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
