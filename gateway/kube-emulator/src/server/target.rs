//! What a resource request addresses: the resource, namespace, name and subresource
//! parsed from the path segments after `/api/v1` or `/apis/<group>/<version>`, and the
//! decoded query parameters.

use std::collections::HashMap;

use axum::http::Uri;

use crate::error::ApiError;
use crate::resources::{ResId, lookup, res};

/// Decoded query parameters.
pub(super) type Query = HashMap<String, String>;

/// Parsed request target.
pub(super) struct Target {
    pub(super) rid: ResId,
    pub(super) ns: Option<String>,
    pub(super) name: Option<String>,
    pub(super) sub: Option<String>,
}

/// 404 for a path the server does not serve.
pub(super) fn not_found_path(uri: &Uri) -> ApiError {
    ApiError::NotFound {
        resource: String::new(),
        group: String::new(),
        name: uri.path().to_owned(),
    }
}

/// Parses `[namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`.
pub(super) fn parse_target(
    group: &str,
    version: &str,
    rest: &[&str],
    uri: &Uri,
) -> Result<Target, ApiError> {
    let (ns, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => (
            Some((*ns).to_owned()),
            *plural,
            tail.first().copied(),
            tail.get(1).copied(),
        ),
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(not_found_path(uri)),
    };
    let rid = lookup(group, version, plural).ok_or_else(|| not_found_path(uri))?;
    let r = res(rid);
    if ns.is_some() && !r.namespaced {
        return Err(not_found_path(uri));
    }
    Ok(Target {
        rid,
        ns,
        name: name.map(str::to_owned),
        sub: sub.map(str::to_owned),
    })
}

/// The percent-decoded query parameters (`+` is a space).
pub(super) fn query_map(uri: &Uri) -> Query {
    uri.query()
        .map(|q| {
            q.split('&')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    let dec = |s: &str| {
                        percent_encoding::percent_decode_str(&s.replace('+', " "))
                            .decode_utf8_lossy()
                            .into_owned()
                    };
                    (dec(k), dec(v))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A boolean query flag (`true` or `1`).
pub(super) fn flag(q: &Query, key: &str) -> bool {
    q.get(key).is_some_and(|v| v == "true" || v == "1")
}
