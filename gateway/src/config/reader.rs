//! Applies the variable table ([`VARS`]) to a map of variables: each set (non-blank,
//! trimmed) value goes through its entry's parser, each unset one gets its default,
//! every pattern entry takes all variables matching it, and an all-or-nothing group
//! set only in part is one problem. Every problem is collected, none stops the read;
//! a value that fails leaves its field at the default.

use std::collections::HashMap;

use super::descriptor::{Fallback, Name, Var};
use super::draft::Draft;
use super::error::ConfigError;
use super::model::Config;
use super::vars::VARS;

/// Builds the config from `vars`, appending every problem to `errors`.
pub fn read(vars: &HashMap<String, String>, errors: &mut Vec<ConfigError>) -> Config {
    let skipped = partial_groups(vars, errors);
    let mut draft = Draft::blank();
    for var in VARS {
        if var.group.is_some_and(|g| skipped.contains(&g)) {
            continue;
        }
        match var.name {
            Name::Exact(name) => match set_value(vars, name) {
                Some(value) => {
                    if let Err(reason) = (var.apply)(&mut draft, name, value) {
                        errors.push(invalid(var, name, value, reason));
                        apply_fallback(var, name, &mut draft, errors);
                    }
                }
                None => apply_fallback(var, name, &mut draft, errors),
            },
            Name::Prefix { prefix, .. } => {
                let mut names: Vec<&String> =
                    vars.keys().filter(|k| k.starts_with(prefix)).collect();
                names.sort();
                for name in names {
                    let value = vars[name].trim();
                    if let Err(reason) = (var.apply)(&mut draft, name, value) {
                        errors.push(invalid(var, name, value, reason));
                    }
                }
            }
        }
    }
    draft.finish()
}

/// A set, non-blank value (trimmed).
fn set_value<'a>(vars: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    vars.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Applies the default of an unset (or invalid) variable.
fn apply_fallback(var: &Var, name: &str, draft: &mut Draft, errors: &mut Vec<ConfigError>) {
    let value = match var.fallback {
        Fallback::Unset(_) => return,
        Fallback::Value(v) => v.to_string(),
        Fallback::Computed { value, .. } => value(),
    };
    if let Err(reason) = (var.apply)(draft, name, &value) {
        // A bug in the table; `every_default_parses` keeps it from shipping.
        errors.push(ConfigError::Invalid {
            var: name.to_string(),
            reason: format!("the built-in default is invalid: {reason}"),
        });
    }
}

/// The problem with a value; a secret's value is cut out of the reason.
fn invalid(var: &Var, name: &str, value: &str, reason: String) -> ConfigError {
    let reason = if var.secret && !value.is_empty() {
        reason.replace(value, "<redacted>")
    } else {
        reason
    };
    ConfigError::Invalid {
        var: name.to_string(),
        reason,
    }
}

/// The groups set only in part, each reported once with its missing members.
fn partial_groups(
    vars: &HashMap<String, String>,
    errors: &mut Vec<ConfigError>,
) -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for group in VARS.iter().filter_map(|v| v.group) {
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    let mut partial = Vec::new();
    for group in groups {
        let members = VARS.iter().filter(|v| v.group == Some(group));
        let (set, missing): (Vec<&Var>, Vec<&Var>) =
            members.partition(|v| set_value(vars, v.name.shown()).is_some());
        if !set.is_empty() && !missing.is_empty() {
            errors.push(ConfigError::Partial {
                group: group.to_string(),
                missing: missing.iter().map(|v| v.name.shown().to_string()).collect(),
            });
            partial.push(group);
        }
    }
    partial
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_are_cut_out_of_reasons() {
        let var = VARS
            .iter()
            .find(|v| v.secret)
            .expect("the table has secrets");
        let e = invalid(var, "X", "hunter2", "`hunter2` is bad".to_string());
        assert_eq!(e.to_string(), "X: `<redacted>` is bad");
        let plain = VARS
            .iter()
            .find(|v| !v.secret)
            .expect("the table has plain variables");
        let e = invalid(plain, "X", "abc", "`abc` is bad".to_string());
        assert_eq!(e.to_string(), "X: `abc` is bad");
    }
}
