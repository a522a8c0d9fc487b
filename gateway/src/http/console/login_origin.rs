//! Login CSRF: `POST /login` is taken only from the console's own pages. Without this,
//! a page on another site could auto-submit *its* token to the login form, and the
//! victim's browser would silently become a member of the attacker's team (whatever
//! the victim then submits, the attacker sees). The session's own CSRF token cannot
//! help here: there is no session yet.
//!
//! The browser says where a request comes from (OWASP's "verifying origin with standard
//! headers"):
//! - `Sec-Fetch-Site` (every current browser): only `same-origin` (and `none`, a
//!   request the user made directly) may log in; `same-site` is refused too, since a
//!   sibling host is not the console;
//! - else `Origin`: it must be the console's own origin, as the browser reached it
//!   (`Host`, with `https` when the request came over TLS) or `FORGE_PUBLIC_URL`'s;
//!   `null` is refused;
//! - a request with neither is not a browser's cross-site form (browsers send `Origin`
//!   with every cross-origin POST): `forge`-style clients and scripts keep working.

use axum::http::{HeaderMap, header};

/// Whether a login request with these headers comes from another site. `https`: the
/// browser reached the console over TLS; `public_url`: `FORGE_PUBLIC_URL`, if set.
pub fn from_another_site(headers: &HeaderMap, https: bool, public_url: Option<&str>) -> bool {
    let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = value("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = value(header::ORIGIN.as_str()) else {
        return false;
    };
    let own = value(header::HOST.as_str())
        .map(|host| format!("{}://{host}", if https { "https" } else { "http" }));
    let public = public_url
        .and_then(|u| url::Url::parse(u).ok())
        .map(|u| u.origin().ascii_serialization());
    let same = |o: &Option<String>| o.as_deref().is_some_and(|o| o.eq_ignore_ascii_case(origin));
    !(same(&own) || same(&public))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("header value"));
        }
        h
    }

    #[test]
    fn fetch_metadata_decides_when_the_browser_sends_it() {
        let own = [
            ("host", "forge.example"),
            ("origin", "http://forge.example"),
        ];
        for (site, refused) in [
            ("same-origin", false),
            ("none", false),
            ("same-site", true),
            ("cross-site", true),
        ] {
            let mut pairs = own.to_vec();
            pairs.push(("sec-fetch-site", site));
            assert_eq!(
                from_another_site(&headers(&pairs), false, None),
                refused,
                "{site}"
            );
        }
    }

    #[test]
    fn otherwise_the_origin_must_be_the_consoles_own() {
        let h = |origin| headers(&[("host", "127.0.0.1:8080"), ("origin", origin)]);
        assert!(!from_another_site(&h("http://127.0.0.1:8080"), false, None));
        assert!(from_another_site(&h("http://localhost:8080"), false, None));
        assert!(from_another_site(&h("https://127.0.0.1:8080"), false, None));
        assert!(from_another_site(&h("null"), false, None));
        // Behind a TLS-terminating proxy: the public URL's origin is the console's.
        let proxied = headers(&[
            ("host", "forge-gateway:8080"),
            ("origin", "https://forge.example"),
        ]);
        assert!(!from_another_site(
            &proxied,
            true,
            Some("https://forge.example/")
        ));
        assert!(from_another_site(&proxied, true, None));
    }

    #[test]
    fn a_client_that_is_not_a_browser_may_log_in() {
        assert!(!from_another_site(&headers(&[("host", "x")]), false, None));
    }
}
