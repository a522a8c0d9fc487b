//! The Markdown table of every variable, generated from [`VARS`], and README.md's copy
//! of it between `<!-- config-table:begin -->` and `<!-- config-table:end -->`.
//! `forge-gateway config-table` prints the table; `forge-gateway config-table --readme
//! README.md` rewrites README's copy; a test fails while the two differ.

use std::fmt::Write as _;
use std::path::Path;

use super::vars::VARS;

/// The line before README's generated table.
pub const BEGIN: &str = "<!-- config-table:begin -->";
/// The line after README's generated table.
pub const END: &str = "<!-- config-table:end -->";

/// What the docs add to a secret variable's meaning.
const SECRET_NOTE: &str = " (secret)";

/// Why README's table cannot be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file lacks the markers (or has them out of order).
    #[error("{path}: no `{BEGIN}` line followed by an `{END}` line")]
    Markers {
        /// The file.
        path: String,
    },
}

/// The Markdown table: variable, default, meaning — one row per table entry.
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | default | meaning |\n|---|---|---|\n");
    for var in VARS {
        let note = if var.secret { SECRET_NOTE } else { "" };
        // Writing to a String cannot fail.
        let _ = writeln!(
            out,
            "| `{}` | {} | {}{note} |",
            var.name.shown(),
            var.fallback.shown(),
            var.meaning
        );
    }
    out
}

/// `readme` with the text between the markers replaced by `table`; `None` without
/// both markers in order.
pub fn splice(readme: &str, table: &str) -> Option<String> {
    let begin = readme.find(BEGIN)? + BEGIN.len();
    let end = begin + readme[begin..].find(END)?;
    Some(format!("{}\n{table}{}", &readme[..begin], &readme[end..]))
}

/// Rewrites the generated table of the README at `path`; whether it changed.
pub fn update_readme(path: &Path) -> Result<bool, TableError> {
    let shown = path.display().to_string();
    let io = |source| TableError::Io {
        path: shown.clone(),
        source,
    };
    let readme = std::fs::read_to_string(path).map_err(io)?;
    let updated = splice(&readme, &markdown_table()).ok_or_else(|| TableError::Markers {
        path: shown.clone(),
    })?;
    if updated == readme {
        return Ok(false);
    }
    std::fs::write(path, updated).map_err(io)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command that brings README.md in line with the table.
    const REGENERATE: &str = "cargo run -p forge-gateway -- config-table --readme README.md";

    #[test]
    fn readme_table_matches_the_variable_table() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
        let readme = std::fs::read_to_string(&path).expect("README.md");
        let expected = splice(&readme, &markdown_table()).unwrap_or_else(|| {
            panic!("README.md has no `{BEGIN}` … `{END}` section for the configuration table")
        });
        if expected != readme {
            let differs = expected
                .lines()
                .zip(readme.lines())
                .find(|(want, have)| want != have)
                .map_or_else(
                    || "the tables differ in length".to_string(),
                    |(want, have)| format!("code:   {want}\n  README: {have}"),
                );
            panic!(
                "README.md's Configuration table differs from gateway/src/config/vars.rs:\n  \
                 {differs}\nRegenerate it from the repository root with `{REGENERATE}`"
            );
        }
    }

    #[test]
    fn splice_replaces_only_the_marked_section() {
        let readme = format!("intro\n{BEGIN}\nold\n{END}\noutro\n");
        assert_eq!(
            splice(&readme, "new\n").as_deref(),
            Some(format!("intro\n{BEGIN}\nnew\n{END}\noutro\n").as_str())
        );
        assert_eq!(splice("no markers", "new\n"), None);
        assert_eq!(splice(&format!("{END}\n{BEGIN}\n"), "new\n"), None);
    }

    #[test]
    fn update_readme_rewrites_and_reports_missing_markers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("README.md");
        std::fs::write(&path, format!("# X\n{BEGIN}\nstale\n{END}\n")).expect("write");
        assert!(update_readme(&path).expect("rewritten"));
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("| `FORGE_POLICY_CHAIN_FILE` |"), "{text}");
        assert!(
            !update_readme(&path).expect("unchanged"),
            "second run is a no-op"
        );

        std::fs::write(&path, "# X\n").expect("write");
        assert!(matches!(
            update_readme(&path),
            Err(TableError::Markers { .. })
        ));
    }

    #[test]
    fn rows_are_one_line_and_secrets_are_marked() {
        let table = markdown_table();
        assert_eq!(table.lines().count(), VARS.len() + 2);
        for line in table.lines().skip(2) {
            assert_eq!(line.matches('|').count(), 4, "a cell contains `|`: {line}");
        }
        let token = table
            .lines()
            .find(|l| l.starts_with("| `FORGE_K8S_TOKEN` |"))
            .expect("token row");
        assert!(token.ends_with(&format!("{SECRET_NOTE} |")), "{token}");
    }
}
