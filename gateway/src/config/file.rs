//! The optional config file named by `FORGE_CONFIG_FILE`: a flat map of the same
//! variable names to scalars, TOML (`.toml`) or YAML (`.yaml`/`.yml`), read into a
//! variable map that the environment is layered over. Keys not in the table
//! (`vars.rs`) are rejected as typos. The file is size-capped and YAML is parsed by
//! `serde-saphyr` under a small resource budget (no alias bombs); parse errors carry
//! the position but never a snippet of the file, which may hold secrets.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::Value;

use super::error::ConfigError;
use super::reading::{parse_yaml_within, read_capped};
use super::vars::is_known;

/// Reads the file into a variable map, or every problem with it.
pub fn read(path: &Path) -> Result<HashMap<String, String>, Vec<ConfigError>> {
    let shown = path.display().to_string();
    let file_err = |reason: String| {
        vec![ConfigError::File {
            path: shown.clone(),
            reason,
        }]
    };
    let text = read_capped(path).map_err(file_err)?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let table = match ext {
        "toml" => parse_toml(&text),
        "yaml" | "yml" => parse_yaml(&text),
        _ => Err("unknown format: the name must end in .toml, .yaml or .yml".to_string()),
    }
    .map_err(file_err)?;
    let mut out = HashMap::new();
    let mut errors = Vec::new();
    for (key, value) in table {
        if !is_known(&key) {
            errors.push(ConfigError::UnknownKey {
                path: shown.clone(),
                key,
            });
            continue;
        }
        let text = match value {
            Value::String(s) => s,
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                errors.push(ConfigError::Invalid {
                    var: key,
                    reason: format!("in {shown}: must be a string, number or boolean"),
                });
                continue;
            }
        };
        out.insert(key, text);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

/// TOML; the error names the line and the problem, without quoting the line.
fn parse_toml(text: &str) -> Result<BTreeMap<String, Value>, String> {
    toml::from_str(text).map_err(|e: toml::de::Error| match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("line {line}: {}", e.message())
        }
        None => e.message().to_string(),
    })
}

/// YAML 1.2 (`yes`/`no` stay strings, as `0755` and `1_000` do) under a budget sized
/// for a flat map, without snippets in errors.
fn parse_yaml(text: &str) -> Result<BTreeMap<String, Value>, String> {
    parse_yaml_within(text, 10_000)
}
