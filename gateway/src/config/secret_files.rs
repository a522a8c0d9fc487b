//! `<SECRET>_FILE`: every secret variable (`FORGE_K8S_TOKEN`, `FORGE_S3_SECRET_KEY`,
//! `FORGE_METRICS_TOKEN`, …) may instead name a file that holds its value — a
//! Kubernetes Secret mounted as a volume — so the value is not in the process's
//! environment, where `kubectl describe`, `/proc/<pid>/environ` and crash reports see
//! it. One trailing line break is not part of the value. Setting both the variable and
//! its `_FILE` is an error, as is a file that cannot be read (the error names the
//! variable and the path, never the content). Environment only: the config file names
//! values, not files.

use std::collections::HashMap;

use super::descriptor::Name;
use super::error::ConfigError;
use super::vars::VARS;

/// The suffix of a secret's file variable.
pub const SUFFIX: &str = "_FILE";

/// Replaces each set `<SECRET>_FILE` in `vars` with `<SECRET>` holding the file's
/// content; problems go to `errors`.
pub fn resolve(vars: &mut HashMap<String, String>, errors: &mut Vec<ConfigError>) {
    for var in VARS.iter().filter(|v| v.secret) {
        let Name::Exact(name) = var.name else {
            continue;
        };
        let file_var = format!("{name}{SUFFIX}");
        let Some(path) = vars.remove(&file_var).filter(|p| !p.trim().is_empty()) else {
            continue;
        };
        if vars.get(name).is_some_and(|v| !v.is_empty()) {
            errors.push(ConfigError::Invalid {
                var: file_var,
                reason: format!("set {name} or {name}{SUFFIX}, not both"),
            });
            continue;
        }
        match std::fs::read_to_string(path.trim()) {
            Ok(content) => {
                let value = content
                    .strip_suffix('\n')
                    .map(|v| v.strip_suffix('\r').unwrap_or(v))
                    .unwrap_or(&content);
                vars.insert(name.to_string(), value.to_string());
            }
            Err(e) => errors.push(ConfigError::Invalid {
                var: file_var,
                reason: format!("cannot read {}: {e}", path.trim()),
            }),
        }
    }
}
