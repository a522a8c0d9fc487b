//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!` not-exists) and field
//! selectors (`=`, `==`, `!=` on a per-resource set of fields), parsed from the
//! `labelSelector` / `fieldSelector` query parameters and matched against JSON objects.

use serde_json::Value;

use crate::resources::Resource;

/// Selector parse errors (rendered as 400 BadRequest).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    /// Syntax error in a label selector.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// Syntax error or unsupported field in a field selector.
    #[error("{0}")]
    Field(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '(' => {
                depth += 1;
                cur.push(ch);
            }
            ')' => {
                depth -= 1;
                cur.push(ch);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(ch),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Label(format!("{whole}: found '{rest}', expected: '('")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a label selector string.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let bad = || SelectorError::Label(part.clone());
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().to_owned(), parse_set(rest, &part)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelReq::In(k.trim().to_owned(), parse_set(rest, &part)?)
            } else if valid_key(&part) {
                LabelReq::Exists(part.clone())
            } else {
                return Err(bad());
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::NotEq(k, _)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _)
                | LabelReq::Exists(k)
                | LabelReq::NotExists(k) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// The `key=value` equality requirements (`=`, `==`, and `in` with one value):
    /// every match carries all of them, so a label index can narrow a list to the
    /// objects carrying one of them before [`LabelSelector::matches`] runs.
    pub fn equalities(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().filter_map(|r| match r {
            LabelReq::Eq(k, v) => Some((k.as_str(), v.as_str())),
            LabelReq::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }

    /// Whether `obj`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// Value of a selectable field as the API server renders it (`""` when absent).
fn field_value(obj: &Value, field: &str) -> String {
    let is_events_v1 = obj.get("apiVersion").and_then(Value::as_str) == Some("events.k8s.io/v1");
    // Core events call it involvedObject, events.k8s.io regarding; accept both.
    let field = if is_events_v1 {
        field.replacen("involvedObject.", "regarding.", 1)
    } else {
        field.replacen("regarding.", "involvedObject.", 1)
    };
    let field = match field.as_str() {
        "source" if is_events_v1 => "reportingController".to_owned(),
        "source" => "source.component".to_owned(),
        "reportingComponent" if !is_events_v1 => "reportingComponent".to_owned(),
        _ => field,
    };
    let pointer = format!("/{}", field.replace('.', "/"));
    match obj.pointer(&pointer) {
        None | Some(Value::Null) => match field.as_str() {
            "spec.unschedulable" => "false".to_owned(),
            _ => String::new(),
        },
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses a field selector, rejecting fields `res` does not support like the real
    /// server (`field label not supported: x`).
    pub fn parse(s: &str, res: &Resource) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError::Field(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            let supported = matches!(k, "metadata.name" | "metadata.namespace")
                || res.field_selectors.contains(&k);
            if !supported {
                return Err(SelectorError::Field(format!(
                    "field label not supported: {k}"
                )));
            }
            reqs.push((k.to_owned(), eq, v.trim().to_owned()));
        }
        Ok(Self(reqs))
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }

    /// The name this selector pins with `metadata.name=x`, if any.
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{PODS, res};
    use serde_json::json;

    #[test]
    fn label_selector_operators() {
        let obj = json!({"metadata": {"labels": {"app": "ray", "tier": "head"}}});
        for (sel, want) in [
            ("app=ray", true),
            ("app==ray", true),
            ("app!=ray", false),
            ("app in (ray, web)", true),
            ("app notin (ray)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("missing notin (x)", true),
            ("app=ray,tier in (worker)", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).expect(sel).matches(&obj),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("app in ray").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn field_selector_supports_known_fields_only() {
        let pods = res(PODS);
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", pods)
                .expect("valid")
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("spec.nodeName=", pods)
                .expect("valid")
                .matches(&pod)
        );
        assert!(FieldSelector::parse("spec.bogus=1", pods).is_err());
    }
}
