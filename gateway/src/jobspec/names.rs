//! Kubernetes naming rules (DNS-1123/1035 labels, subdomains, qualified names, label
//! values, resource quantities) shared by config and job-spec validation.
//!
//! These mirror `k8s.io/apimachinery/pkg/util/validation` so that whatever Forge accepts
//! is also accepted by the API server (and KubeRay's DNS-1035 check on RayJob names).

/// Maximum length of a DNS-1123/1035 label.
pub const DNS_LABEL_MAX: usize = 63;
/// Maximum length of a DNS-1123 subdomain.
pub const DNS_SUBDOMAIN_MAX: usize = 253;

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_LABEL_MAX
        && s.chars().all(|c| is_lower_alnum(c) || c == '-')
        && s.starts_with(is_lower_alnum)
        && s.ends_with(is_lower_alnum)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// Dot-separated DNS-1123 labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= DNS_SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label)
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// The name part of a qualified name / a label value:
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters (may be empty
/// only where `allow_empty`).
fn is_label_name_part(s: &str, allow_empty: bool) -> bool {
    if s.is_empty() {
        return allow_empty;
    }
    s.len() <= DNS_LABEL_MAX
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(is_alnum)
        && s.ends_with(is_alnum)
}

/// A qualified name such as a label key: `[prefix/]name`, prefix a DNS-1123 subdomain.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_label_name_part(name, false),
        None => is_label_name_part(s, false),
    }
}

/// A label value: empty or a name part of at most 63 characters.
pub fn is_label_value(s: &str) -> bool {
    is_label_name_part(s, true)
}

/// A C identifier (environment variable name): `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_c_identifier(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

/// A key of a Secret's (or ConfigMap's) data: `[-._a-zA-Z0-9]+`, at most 253
/// characters.
pub fn is_config_map_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= DNS_SUBDOMAIN_MAX
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// A positive Kubernetes quantity that Forge can compute with: a decimal number with a
/// non-zero digit, at most 9 fractional digits, then a suffix (`n u m k M G T P` or
/// `Ki Mi Gi Ti Pi`) or a one-digit decimal exponent, with at most as many integer
/// digits as keep it below ~10^18 base units in that suffix (so its byte count fits
/// `u64`: `domain::quantity`). `E`/`Ei`, which `kube_quantity` cannot read, and longer
/// numbers are refused. The published pattern (`jobspec::published`) is this rule.
pub fn is_positive_quantity(s: &str) -> bool {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty() || frac.contains('.') || frac.len() > 9 {
        return false;
    }
    let max_int = match suffix {
        "" | "n" | "u" | "m" => 18,
        "k" | "Ki" => 15,
        "M" | "Mi" => 12,
        "G" | "Gi" => 9,
        "T" | "Ti" => 6,
        "P" | "Pi" => 3,
        exp => {
            let digits = exp
                .strip_prefix(['e', 'E'])
                .map(|d| d.strip_prefix(['+', '-']).unwrap_or(d));
            match digits {
                Some(d) if d.len() == 1 && d.chars().all(|c| c.is_ascii_digit()) => 9,
                _ => return false,
            }
        }
    };
    int.len() <= max_int && number.chars().any(|c| c.is_ascii_digit() && c != '0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels() {
        assert!(is_dns1123_label("a"));
        assert!(is_dns1123_label("0abc-9"));
        assert!(!is_dns1123_label(""));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label("a-"));
        assert!(!is_dns1123_label("Abc"));
        assert!(!is_dns1123_label("a_b"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_label(&"a".repeat(63)));
        assert!(is_dns1035_label("forge-abc"));
        assert!(!is_dns1035_label("0forge"));
    }

    #[test]
    fn subdomains_and_qualified_names() {
        assert!(is_dns1123_subdomain("starforge.dev"));
        assert!(!is_dns1123_subdomain("starforge..dev"));
        assert!(is_qualified_name("starforge/gpu-series"));
        assert!(is_qualified_name("app.kubernetes.io/managed-by"));
        assert!(is_qualified_name("Plain_Name.x"));
        assert!(!is_qualified_name("a/b/c"));
        assert!(!is_qualified_name("Bad_Prefix/x"));
        assert!(!is_qualified_name("starforge/"));
        assert!(!is_qualified_name("/x"));
        assert!(!is_qualified_name("has space"));
        assert!(is_label_value(""));
        assert!(is_label_value("h200"));
        assert!(!is_label_value("-h200"));
        assert!(!is_label_value(&"v".repeat(64)));
    }

    #[test]
    fn c_identifiers() {
        assert!(is_c_identifier("CUDA_VISIBLE_DEVICES"));
        assert!(is_c_identifier("_x1"));
        assert!(!is_c_identifier("1X"));
        assert!(!is_c_identifier("A-B"));
        assert!(!is_c_identifier(""));
    }

    #[test]
    fn secret_data_keys() {
        assert!(is_config_map_key("api-key"));
        assert!(is_config_map_key(".dockerconfigjson"));
        assert!(!is_config_map_key(""));
        assert!(!is_config_map_key("a/b"));
        assert!(!is_config_map_key(&"k".repeat(254)));
    }

    #[test]
    fn quantities() {
        for ok in [
            "64Gi",
            "1",
            "1.5Gi",
            "500M",
            "1e9",
            "2E+3",
            "100m",
            "0.5",
            ".5",
            "1.",
            "999999999999999999",
            "999Pi",
            "123456789.123456789e9",
        ] {
            assert!(is_positive_quantity(ok), "{ok}");
        }
        for bad in [
            "",
            "0",
            "0Gi",
            "-1Gi",
            "64GB",
            "Gi",
            "1..5",
            "1e",
            "abc",
            "64 Gi",
            ".",
            "1Ei",
            "1E",
            "1e10",
            "1000Pi",
            "9999999999999999999",
            "0.1234567891",
        ] {
            assert!(!is_positive_quantity(bad), "{bad}");
        }
    }
}
