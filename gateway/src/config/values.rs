//! Value parsers of the variable table: each turns one trimmed value into a typed one
//! or says why it cannot (the reason never repeats more than the value itself, and
//! the reader redacts it for secret variables). They are plain functions so that a
//! table entry reads `put(&mut d.cfg.k8s.namespace, dns_label(v))`.

use std::net::SocketAddr;

use forge_policy_host::Isolation;
use forge_policy_host::model::{TaintEffect, Toleration, TolerationOperator};

use crate::domain::quantity;
use crate::jobspec::names;

use super::model::FleetKind;
use super::per_series::PerSeries;

/// The result of one parser: the value, or why it is invalid.
pub type Parsed<T> = Result<T, String>;

/// Any text, as given.
pub fn text(v: &str) -> Parsed<String> {
    Ok(v.to_string())
}

/// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off` (any case).
pub fn boolean(v: &str) -> Parsed<bool> {
    match v.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        other => Err(format!(
            "`{other}` is not a boolean (use 1/0 or true/false)"
        )),
    }
}

/// An integer in `min..=max`, as the field's integer type.
pub fn int<T: TryFrom<i64>>(v: &str, min: i64, max: i64) -> Parsed<T> {
    let n: i64 = v.parse().map_err(|_| format!("`{v}` is not an integer"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("{n} is out of range {min}..={max}"));
    }
    T::try_from(n).map_err(|_| format!("{n} does not fit the setting's type"))
}

/// An `http://` or `https://` URL with a host.
pub fn url(v: &str) -> Parsed<String> {
    let rest = v
        .strip_prefix("https://")
        .or_else(|| v.strip_prefix("http://"));
    match rest {
        Some(host) if !host.is_empty() && !host.starts_with('/') && !host.contains(' ') => {
            Ok(v.to_string())
        }
        _ => Err(format!("`{v}` is not an http(s) URL")),
    }
}

/// An absolute path, without trailing slashes (`/` stays `/`).
pub fn absolute_path(v: &str) -> Parsed<String> {
    if !v.starts_with('/') {
        return Err(format!("`{v}` is not an absolute path"));
    }
    let trimmed = v.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed }.to_string())
}

/// A relative path inside a volume (a `subPath`): segments of letters, digits, `.`,
/// `-` and `_`, no `..`, not absolute, without trailing slashes.
pub fn sub_path(v: &str) -> Parsed<String> {
    let trimmed = v.trim_end_matches('/');
    let ok = !trimmed.is_empty()
        && !trimmed.starts_with('/')
        && trimmed.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        });
    checked(
        trimmed,
        ok,
        "a relative path inside the claim (no `..`, letters, digits, `.`, `-`, `_`)",
    )
}

/// A Unix user id for containers, or `image` (the image's own user).
pub fn run_as_user(v: &str) -> Parsed<Option<i64>> {
    if v.eq_ignore_ascii_case("image") {
        return Ok(None);
    }
    int(v, 1, i64::from(i32::MAX))
        .map(Some)
        .map_err(|e| format!("{e} (a non-root uid, or `image` for the image's own user)"))
}

/// A PersistentVolumeClaim name (DNS-1123 subdomain).
pub fn claim_name(v: &str) -> Parsed<String> {
    checked(
        v,
        names::is_dns1123_subdomain(v),
        "a valid PersistentVolumeClaim name (DNS-1123 subdomain)",
    )
}

/// A namespace (DNS-1123 label).
pub fn dns_label(v: &str) -> Parsed<String> {
    checked(v, names::is_dns1123_label(v), "a DNS-1123 label")
}

/// A label key (`[prefix/]name`).
pub fn label_key(v: &str) -> Parsed<String> {
    checked(
        v,
        names::is_qualified_name(v),
        "a valid label key ([prefix/]name)",
    )
}

/// A positive Kubernetes quantity such as `64Gi`.
pub fn quantity(v: &str) -> Parsed<String> {
    checked(
        v,
        names::is_positive_quantity(v),
        "a positive Kubernetes quantity (e.g. 64Gi)",
    )
}

/// A Ray version: two or three dot-separated numbers.
pub fn ray_version(v: &str) -> Parsed<String> {
    let parts: Vec<&str> = v.split('.').collect();
    let numeric = parts
        .iter()
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    checked(
        v,
        (2..=3).contains(&parts.len()) && numeric,
        "a Ray version like 2.55.1",
    )
}

/// A container image reference: not empty, no whitespace.
pub fn image(v: &str) -> Parsed<String> {
    if v.is_empty() {
        Err("empty image reference".to_string())
    } else if v.chars().any(char::is_whitespace) {
        Err("image reference contains whitespace".to_string())
    } else {
        Ok(v.to_string())
    }
}

/// A bucket name: 3-63 lowercase letters, digits, `-` and `.`.
pub fn bucket(v: &str) -> Parsed<String> {
    let ok = names::is_dns1123_subdomain(v) && (3..=63).contains(&v.len());
    checked(
        v,
        ok,
        "a valid bucket name (3-63 lowercase letters, digits, - and .)",
    )
}

/// A `postgres://` (or `postgresql://`) URL with a host. Its validity beyond that is
/// the driver's to judge when it connects.
pub fn postgres_url(v: &str) -> Parsed<String> {
    let rest = v
        .strip_prefix("postgres://")
        .or_else(|| v.strip_prefix("postgresql://"));
    match rest {
        Some(r) if !r.is_empty() && !r.contains(char::is_whitespace) => Ok(v.to_string()),
        // The value is secret (it may hold a password): not repeated.
        _ => Err("not a postgres:// URL".to_string()),
    }
}

/// A non-empty label value (`[A-Za-z0-9]([-_.A-Za-z0-9]*[A-Za-z0-9])?`, at most 63).
pub fn label_value(v: &str) -> Parsed<String> {
    checked(
        v,
        !v.is_empty() && names::is_label_value(v),
        "a label value (1-63 letters, digits, - _ ., starting and ending alphanumeric)",
    )
}

/// A non-empty name without whitespace, at most 128 characters.
pub fn identity(v: &str) -> Parsed<String> {
    checked(
        v,
        !v.is_empty() && v.len() <= 128 && !v.contains(char::is_whitespace),
        "a name (1-128 characters, no whitespace)",
    )
}

/// `kuberay` or `local`.
pub fn fleet_kind(v: &str) -> Parsed<FleetKind> {
    match v {
        "kuberay" => Ok(FleetKind::Kuberay),
        "local" => Ok(FleetKind::Local),
        other => Err(format!("`{other}` is not a fleet kind (kuberay or local)")),
    }
}

/// `warm` or `fresh`.
pub fn isolation(v: &str) -> Parsed<Isolation> {
    v.parse()
        .map_err(|e: forge_policy_host::UnknownIsolation| e.to_string())
}

/// An `address:port` to listen on.
pub fn socket_addr(v: &str) -> Parsed<SocketAddr> {
    v.parse()
        .map_err(|_| format!("`{v}` is not an address:port (e.g. 0.0.0.0:8080)"))
}

/// A framework name as images are keyed by (`nemo-rl`): a DNS-1123 label.
pub fn framework(name: &str) -> Parsed<String> {
    if names::is_dns1123_label(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "framework name `{name}` must be lowercase letters, digits and -"
        ))
    }
}

/// Whole CPUs per series (`8`, `h100=88,*=8`), each 1..=1024.
pub fn cpus_per_series(v: &str) -> Parsed<PerSeries<u32>> {
    PerSeries::parse(v, |x| int(x, 1, 1024))
}

/// A count of GPUs per series (`8`, `h100=8,*=4`), each 0..=64.
pub fn gpus_per_series(v: &str) -> Parsed<PerSeries<u32>> {
    PerSeries::parse(v, |x| int(x, 0, 64))
}

/// Bytes per series from positive quantities (`32Gi`, `h100=900Gi,*=32Gi`).
pub fn bytes_per_series(v: &str) -> Parsed<PerSeries<u64>> {
    PerSeries::parse(v, |x| match quantity::bytes(x) {
        Some(b) if b > 0 && names::is_positive_quantity(x) => Ok(b),
        _ => Err(format!("`{x}` is not a positive quantity (e.g. 32Gi)")),
    })
}

/// Tolerations, comma-separated, in `kubectl taint` form: `key=value:Effect` (Equal),
/// `key:Effect` and `key` (Exists), `key=value` (Equal, any effect), `*` (everything).
pub fn tolerations(v: &str) -> Parsed<Vec<Toleration>> {
    let mut out = Vec::new();
    for item in v.split(',').map(str::trim) {
        let bad = |why: &str| format!("`{item}`: {why} (use key[=value][:Effect])");
        if item == "*" {
            out.push(Toleration {
                key: None,
                operator: TolerationOperator::Exists,
                value: None,
                effect: None,
            });
            continue;
        }
        let (kv, effect) = match item.rsplit_once(':') {
            Some((kv, e)) => {
                let effect = TaintEffect::parse(e).ok_or_else(|| {
                    bad("the effect is not NoSchedule, PreferNoSchedule or NoExecute")
                })?;
                (kv, Some(effect))
            }
            None => (item, None),
        };
        let (key, value) = match kv.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (kv, None),
        };
        if !names::is_qualified_name(key) {
            return Err(bad("the key is not a valid taint key"));
        }
        if let Some(v) = value
            && !names::is_label_value(v)
        {
            return Err(bad("the value is not a valid taint value"));
        }
        out.push(Toleration {
            key: Some(key.to_string()),
            operator: if value.is_some() {
                TolerationOperator::Equal
            } else {
                TolerationOperator::Exists
            },
            value: value.map(str::to_string),
            effect,
        });
    }
    Ok(out)
}

/// `v` when `ok`, else "`v` is not {what}".
fn checked(v: &str, ok: bool, what: &str) -> Parsed<String> {
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!("`{v}` is not {what}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_checks_range_and_type() {
        assert_eq!(int::<u64>("5", 1, 10), Ok(5));
        assert!(int::<u64>("0", 1, 10).is_err());
        assert!(int::<u64>("x", 1, 10).is_err());
        assert!(int::<u8>("300", 0, 1000).is_err());
    }

    #[test]
    fn tolerations_in_kubectl_form() {
        let t = tolerations("nvidia.com/gpu=present:NoSchedule, dedicated:NoExecute, spot, *")
            .expect("valid");
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].operator, TolerationOperator::Equal);
        assert_eq!(t[0].value.as_deref(), Some("present"));
        assert_eq!(t[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(t[1].operator, TolerationOperator::Exists);
        assert_eq!(t[1].effect, Some(TaintEffect::NoExecute));
        assert_eq!((t[2].key.as_deref(), t[2].effect), (Some("spot"), None));
        assert_eq!(
            (t[3].key.as_deref(), t[3].operator),
            (None, TolerationOperator::Exists)
        );
        for bad in ["gpu:Never", "bad key", "k=v v", ""] {
            assert!(tolerations(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn per_series_resources() {
        assert_eq!(
            bytes_per_series("h100=900Gi,*=32Gi")
                .expect("ok")
                .get("h200"),
            Some(&(32 << 30))
        );
        assert!(bytes_per_series("0").is_err());
        assert!(cpus_per_series("2000").is_err());
    }

    #[test]
    fn absolute_path_drops_trailing_slashes() {
        assert_eq!(absolute_path("/storage/"), Ok("/storage".to_string()));
        assert_eq!(absolute_path("///"), Ok("/".to_string()));
        assert!(absolute_path("storage").is_err());
    }
}
