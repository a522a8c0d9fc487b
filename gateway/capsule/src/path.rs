//! Normalization of untrusted entry names into safe relative `/`-paths.
//!
//! Rejects rather than repairs: `..`, absolute paths, Windows drive letters and
//! UNC/backslash tricks, NUL and control characters, non-UTF-8 names. Empty
//! and `.` components are dropped (`a//./b` → `a/b`), so two spellings of one
//! path are caught as duplicates later.

use crate::error::CapsuleError;

/// Normalize a raw archive entry name. `Ok(None)` for names that denote the
/// root itself (`./`, `/`-only names are still rejected as absolute).
pub fn normalize(raw: &[u8], max_len: usize) -> Result<Option<String>, CapsuleError> {
    let shown = String::from_utf8_lossy(raw).into_owned();
    let bad = |reason: &'static str| CapsuleError::UnsafePath {
        path: shown.clone(),
        reason,
    };
    let name = std::str::from_utf8(raw).map_err(|_| bad("name is not UTF-8"))?;
    if name.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(bad("control character in name"));
    }
    if name.contains('\\') {
        return Err(bad("backslash in name (Windows path?)"));
    }
    if name.starts_with('/') {
        return Err(bad("absolute path"));
    }
    let bytes = name.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(bad("Windows drive letter"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for comp in name.split('/') {
        match comp {
            "" | "." => continue,
            ".." => return Err(bad("parent directory component")),
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let out = parts.join("/");
    if out.len() > max_len {
        return Err(bad("path too long"));
    }
    Ok(Some(out))
}

/// Resolve a symlink `target` relative to the link at `link_path` (both
/// normalized, `/`-separated). `None` when it escapes the tree or is absolute.
pub fn resolve_link(link_path: &str, target: &str) -> Option<String> {
    if target.starts_with('/') || target.contains('\\') {
        return None;
    }
    let mut stack: Vec<&str> = link_path.split('/').collect();
    stack.pop(); // the link's own name
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                stack.pop()?;
            }
            c => stack.push(c),
        }
    }
    Some(stack.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_and_rejects() {
        let n = |s: &str| normalize(s.as_bytes(), 1024);
        assert_eq!(n("a//./b").expect("ok"), Some("a/b".into()));
        assert_eq!(n("./").expect("ok"), None);
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "C:/x",
            "c:x",
            "a\\..\\b",
            "a\u{0}b",
        ] {
            assert!(n(bad).is_err(), "{bad} must be rejected");
        }
        assert!(normalize(&[0xff, b'a'], 1024).is_err());
    }

    #[test]
    fn resolves_links() {
        assert_eq!(resolve_link("a/b", "c"), Some("a/c".into()));
        assert_eq!(resolve_link("a/b", "../c"), Some("c".into()));
        assert_eq!(resolve_link("a/b", "../../c"), None);
        assert_eq!(resolve_link("a", "/etc/passwd"), None);
    }
}
