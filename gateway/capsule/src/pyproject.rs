//! Python dependencies declared the modern way: a code root without `requirements.txt`
//! but with a `pyproject.toml` gets its `[project] dependencies` (PEP 621) as the
//! runtime env's package list, and with a `uv.lock` beside it each of those packages
//! pinned to the version the lock resolved (`name[extras]==version ; marker`).
//!
//! Decisions:
//! - `requirements.txt` wins when both exist: it is what Ray users have always given,
//!   and exported requirements often sit beside a `pyproject.toml`;
//! - the list goes to Ray's `pip` field, which installs PEP 508 lines as they are; Ray's
//!   `uv` field would need `uv` in the image (Ray 2.45 and later) and installs the same
//!   list;
//! - only direct dependencies are pinned: a runtime env takes a package list, not a
//!   lock, and the lock's other packages carry platform markers a flat list would lose
//!   (a Windows-only package would be installed on Linux). A package the lock resolved
//!   to several versions (forks by marker), or from a non-registry source, keeps the
//!   project's own requirement;
//! - optional dependencies and dependency groups are not installed (a job names what
//!   it needs in `[project] dependencies`), and the project itself is not installed;
//! - every entry passes the same checks as `requirements.txt` lines (no credentials,
//!   no options).

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::CapsuleError;
use crate::requirements::{MAX_REQUIREMENTS, check_requirement};

/// The project file read from the code root.
pub const PYPROJECT_FILE: &str = "pyproject.toml";
/// The lock file read beside it.
pub const UV_LOCK_FILE: &str = "uv.lock";
/// Largest `pyproject.toml` read (bytes).
pub const MAX_PYPROJECT_BYTES: u64 = 256 * 1024;
/// Largest `uv.lock` read (bytes).
pub const MAX_UV_LOCK_BYTES: u64 = 8 * 1024 * 1024;

#[derive(Deserialize)]
struct PyProject {
    project: Option<Project>,
}

#[derive(Deserialize)]
struct Project {
    #[serde(default)]
    dependencies: Vec<String>,
}

#[derive(Deserialize)]
struct UvLock {
    #[serde(default)]
    package: Vec<LockedPackage>,
}

#[derive(Deserialize)]
struct LockedPackage {
    name: String,
    version: Option<String>,
    #[serde(default)]
    source: BTreeMap<String, toml::Value>,
}

fn invalid(file: &'static str, reason: impl Into<String>) -> CapsuleError {
    CapsuleError::PythonProject {
        file,
        reason: reason.into(),
    }
}

/// A package name as PEP 503 compares them: lowercase, runs of `-_.` as one `-`.
pub fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut sep = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The registry versions `uv.lock` resolved, by normalized name: a name resolved to
/// several versions, or from another source, maps to `None` (not pinned).
fn locked_versions(lock: &str) -> Result<BTreeMap<String, Option<String>>, CapsuleError> {
    let lock: UvLock = toml::from_str(lock)
        .map_err(|e| invalid(UV_LOCK_FILE, format!("is not valid TOML: {}", e.message())))?;
    let mut out: BTreeMap<String, Option<String>> = BTreeMap::new();
    for p in lock.package {
        let pinned = p.version.filter(|_| p.source.contains_key("registry"));
        let name = normalize(&p.name);
        match out.get(&name) {
            Some(seen) if *seen != pinned => {
                out.insert(name, None);
            }
            Some(_) => {}
            None => {
                out.insert(name, pinned);
            }
        }
    }
    Ok(out)
}

/// `requirement` pinned to `version`: `name[extras]==version ; marker`. A direct URL
/// requirement (`name @ url`) is returned as it is.
fn pin(requirement: &str, version: &str) -> String {
    let name_end = requirement
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(requirement.len());
    let (name, rest) = requirement.split_at(name_end);
    let rest = rest.trim_start();
    if rest.starts_with('@') {
        return requirement.to_string();
    }
    let (extras, rest) = match rest.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((extras, rest)) => (format!("[{}]", extras.trim()), rest),
        None => (String::new(), rest),
    };
    let marker = rest.split_once(';').map(|(_, m)| m.trim());
    match marker {
        Some(m) if !m.is_empty() => format!("{name}{extras}=={version} ; {m}"),
        _ => format!("{name}{extras}=={version}"),
    }
}

/// The name a requirement starts with.
fn name_of(requirement: &str) -> &str {
    let end = requirement
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        .unwrap_or(requirement.len());
    &requirement[..end]
}

/// The package list of `pyproject` (its `[project] dependencies`), pinned from `lock`
/// (a `uv.lock`) when one is given.
pub fn project_dependencies(
    pyproject: &str,
    lock: Option<&str>,
) -> Result<Vec<String>, CapsuleError> {
    let project: PyProject = toml::from_str(pyproject).map_err(|e| {
        invalid(
            PYPROJECT_FILE,
            format!("is not valid TOML: {}", e.message()),
        )
    })?;
    let deps = project.project.map(|p| p.dependencies).unwrap_or_default();
    if deps.len() > MAX_REQUIREMENTS {
        return Err(invalid(
            PYPROJECT_FILE,
            format!("has more than {MAX_REQUIREMENTS} dependencies"),
        ));
    }
    let locked = lock.map(locked_versions).transpose()?.unwrap_or_default();
    let mut out = Vec::with_capacity(deps.len());
    for (i, dep) in deps.iter().enumerate() {
        let dep = dep.trim();
        if !dep.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(invalid(
                PYPROJECT_FILE,
                format!(
                    "dependency {} ({dep:?}) does not start with a package name",
                    i + 1
                ),
            ));
        }
        let entry = match locked.get(&normalize(name_of(dep))) {
            Some(Some(version)) => pin(dep, version),
            _ => dep.to_string(),
        };
        check_requirement(&entry)
            .map_err(|e| invalid(PYPROJECT_FILE, format!("dependency {}: {e}", i + 1)))?;
        out.push(entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYPROJECT: &str = r#"
[project]
name = "trainer"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = [
    "Requests[socks]>=2.31",
    "numpy>=1.26 ; python_version >= '3.10'",
    "einops",
    "my_pkg @ https://example.com/my_pkg-1.0-py3-none-any.whl",
    "forked",
]

[project.optional-dependencies]
dev = ["pytest"]
"#;

    const LOCK: &str = r#"
version = 1
requires-python = ">=3.10"

[[package]]
name = "trainer"
version = "0.1.0"
source = { editable = "." }

[[package]]
name = "requests"
version = "2.32.3"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "numpy"
version = "2.1.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "forked"
version = "1.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "forked"
version = "2.0"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "pytest"
version = "8.3.0"
source = { registry = "https://pypi.org/simple" }
"#;

    #[test]
    fn dependencies_are_read_and_pinned_from_the_lock() {
        assert_eq!(
            project_dependencies(PYPROJECT, None).expect("deps"),
            vec![
                "Requests[socks]>=2.31",
                "numpy>=1.26 ; python_version >= '3.10'",
                "einops",
                "my_pkg @ https://example.com/my_pkg-1.0-py3-none-any.whl",
                "forked",
            ]
        );
        assert_eq!(
            project_dependencies(PYPROJECT, Some(LOCK)).expect("pinned"),
            vec![
                "Requests[socks]==2.32.3",
                "numpy==2.1.0 ; python_version >= '3.10'",
                "einops",
                "my_pkg @ https://example.com/my_pkg-1.0-py3-none-any.whl",
                "forked",
            ],
            "pinned where the lock has one registry version; the optional pytest is not installed"
        );
    }

    #[test]
    fn a_project_without_dependencies_has_none() {
        assert!(
            project_dependencies("[project]\nname = \"x\"\n", None)
                .expect("deps")
                .is_empty()
        );
        assert!(
            project_dependencies("[tool.black]\nline-length = 100\n", None)
                .expect("deps")
                .is_empty()
        );
    }

    #[test]
    fn bad_files_and_entries_are_refused_naming_the_file() {
        for (pyproject, lock, file, needle) in [
            ("[project\n", None, PYPROJECT_FILE, "TOML"),
            (
                "[project]\ndependencies = [\"x\"]\n",
                Some("[[package]\nname="),
                UV_LOCK_FILE,
                "TOML",
            ),
            (
                "[project]\ndependencies = [\"pkg @ https://user:pw@host/p.whl\"]\n",
                None,
                PYPROJECT_FILE,
                "credentials",
            ),
            (
                "[project]\ndependencies = [\"-r other.txt\"]\n",
                None,
                PYPROJECT_FILE,
                "package name",
            ),
            (
                "[project]\ndependencies = 3\n",
                None,
                PYPROJECT_FILE,
                "TOML",
            ),
        ] {
            match project_dependencies(pyproject, lock) {
                Err(CapsuleError::PythonProject { file: f, reason }) => {
                    assert_eq!(f, file, "{pyproject}");
                    assert!(reason.contains(needle), "{reason}");
                    assert!(!reason.contains("pw@"), "no secret echoed: {reason}");
                }
                other => panic!("{pyproject}: {other:?}"),
            }
        }
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize("Foo__Bar.baz"), "foo-bar-baz");
        assert_eq!(normalize("requests"), "requests");
    }
}
