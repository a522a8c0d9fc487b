//! Python dependencies of a job: the code's `requirements.txt` (at the code root) read
//! into the list Ray's runtime env `pip` field takes, and the check every entry must
//! pass, whether it comes from that file or from the JobSpec's `pip` list.
//!
//! Ray writes the list into a requirements file of its own and runs `pip install -r`
//! on it in every Ray pod, so an entry is one requirements-file line. Decisions:
//! - comments (`#` at the start or after whitespace) and blank lines are dropped, a
//!   trailing `\` joins the next line (pip's own rules);
//! - index options are kept (`--index-url`, `--extra-index-url`, `--find-links`,
//!   `--trusted-host`, `--pre`, `--prefer-binary`, `--only-binary`, `--no-binary`);
//!   any other option is refused, notably `-r`/`-c`/`-e` (they name paths that do not
//!   exist in Ray's directory: inline the lines instead);
//! - **secrets stay out**: the runtime env is stored in the RayJob, which everyone who
//!   may read RayJobs in the namespace sees, so a URL carrying credentials
//!   (`https://user:token@…`) is refused. pip's `${VAR}` references are allowed in
//!   their place (they expand from the pod's environment, e.g. a Secret the cluster
//!   mounts into the image).

use crate::error::CapsuleError;

/// The file read from the code root.
pub const REQUIREMENTS_FILE: &str = "requirements.txt";
/// Largest `requirements.txt` accepted (bytes).
pub const MAX_REQUIREMENTS_BYTES: u64 = 64 * 1024;
/// Most entries a job may have (file and spec together are checked by the gateway).
pub const MAX_REQUIREMENTS: usize = 500;
/// Longest single entry (bytes).
pub const MAX_REQUIREMENT_BYTES: usize = 1024;

/// Options a runtime-env entry may carry (everything else is refused).
pub const ALLOWED_OPTIONS: &[&str] = &[
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--trusted-host",
    "--pre",
    "--prefer-binary",
    "--only-binary",
    "--no-binary",
];

/// Why a requirement entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// Longer than [`MAX_REQUIREMENT_BYTES`].
    #[error("is longer than {MAX_REQUIREMENT_BYTES} bytes")]
    TooLong,
    /// Control characters.
    #[error("contains control characters")]
    Control,
    /// A pip option Ray's runtime env cannot honour (or that Forge does not allow).
    #[error(
        "pip option `{0}` is not supported in a runtime env (allowed: {allowed}); inline the lines of a referenced file instead",
        allowed = ALLOWED_OPTIONS.join(", ")
    )]
    Option(String),
    /// A URL with a user name or password.
    #[error(
        "a URL carries credentials; the runtime env is readable by everyone who can read the RayJob — reference them as ${{VARIABLE}} from the pod's environment instead"
    )]
    Credentials,
}

/// Checks one entry (a requirements-file line, already joined and stripped).
pub fn check_requirement(entry: &str) -> Result<(), RequirementError> {
    if entry.len() > MAX_REQUIREMENT_BYTES {
        return Err(RequirementError::TooLong);
    }
    if entry.chars().any(char::is_control) {
        return Err(RequirementError::Control);
    }
    if entry.starts_with('-') {
        let option = entry
            .split(|c: char| c == '=' || c.is_whitespace())
            .next()
            .unwrap_or(entry);
        if !ALLOWED_OPTIONS.contains(&option) {
            return Err(RequirementError::Option(option.to_string()));
        }
    }
    if entry.split("://").skip(1).any(has_credentials) {
        return Err(RequirementError::Credentials);
    }
    Ok(())
}

/// Whether the text after a `://` starts with a user-info part other than `${VAR}`
/// references and `:`.
fn has_credentials(after_scheme: &str) -> bool {
    let authority = after_scheme
        .split(['/', '?', '#', ' ', '\t'])
        .next()
        .unwrap_or("");
    let Some((userinfo, _host)) = authority.rsplit_once('@') else {
        return false;
    };
    let mut rest = userinfo;
    let mut plain = String::new();
    while let Some(start) = rest.find("${") {
        plain.push_str(&rest[..start]);
        match rest[start..].find('}') {
            Some(end) => rest = &rest[start + end + 1..],
            None => {
                plain.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    plain.push_str(rest);
    !plain.chars().all(|c| c == ':')
}

/// Parses a requirements file into entries; errors name the (1-based) line.
pub fn parse_requirements(text: &str) -> Result<Vec<String>, CapsuleError> {
    let mut out = Vec::new();
    let mut pending = String::new();
    let mut first_line = 0;
    for (i, raw) in text.lines().enumerate() {
        if pending.is_empty() {
            first_line = i + 1;
        }
        let line = strip_comment(raw);
        if let Some(joined) = line.strip_suffix('\\') {
            pending.push_str(joined);
            continue;
        }
        pending.push_str(line);
        push_entry(&mut out, &std::mem::take(&mut pending), first_line)?;
    }
    push_entry(&mut out, &pending, first_line)?;
    if out.len() > MAX_REQUIREMENTS {
        return Err(CapsuleError::Requirements {
            line: 0,
            reason: format!("has more than {MAX_REQUIREMENTS} entries"),
        });
    }
    Ok(out)
}

fn push_entry(out: &mut Vec<String>, entry: &str, line: usize) -> Result<(), CapsuleError> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Ok(());
    }
    check_requirement(entry).map_err(|e| CapsuleError::Requirements {
        line,
        reason: e.to_string(),
    })?;
    out.push(entry.to_string());
    Ok(())
}

/// pip's comment rule: `#` at the start of a line or after whitespace.
fn strip_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'#' && (i == 0 || bytes[i - 1].is_ascii_whitespace()) {
            return line[..i].trim_end();
        }
    }
    line.trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_continuations_and_blank_lines() {
        let text = "# deps\nnumpy==2.1.0  # pinned\n\ntorch>=2.4 ; \\\n  python_version >= '3.10'\nrequests#not-a-comment\n--extra-index-url https://download.pytorch.org/whl/cu121\n";
        assert_eq!(
            parse_requirements(text).expect("parses"),
            [
                "numpy==2.1.0",
                "torch>=2.4 ;   python_version >= '3.10'",
                "requests#not-a-comment",
                "--extra-index-url https://download.pytorch.org/whl/cu121",
            ]
        );
    }

    #[test]
    fn credentials_and_file_options_are_refused_with_the_line() {
        for (text, line, what) in [
            (
                "numpy\n--index-url https://bob:s3cret@pypi.internal/simple\n",
                2,
                "credentials",
            ),
            (
                "pkg @ https://token@git.example/pkg.whl\n",
                1,
                "credentials",
            ),
            ("a\nb\n-r other.txt\n", 3, "`-r`"),
            ("-e .\n", 1, "`-e`"),
            ("--requirement=x.txt\n", 1, "`--requirement`"),
        ] {
            match parse_requirements(text) {
                Err(CapsuleError::Requirements { line: l, reason }) => {
                    assert_eq!(l, line, "{text}");
                    assert!(reason.contains(what), "{reason}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn variable_references_in_place_of_credentials_are_allowed() {
        for ok in [
            "--index-url https://${PIP_USER}:${PIP_TOKEN}@pypi.internal/simple",
            "--extra-index-url https://pypi.org/simple",
            "pkg @ https://files.example/pkg-1.0-py3-none-any.whl",
            "torch==2.4.0",
        ] {
            assert_eq!(check_requirement(ok), Ok(()), "{ok}");
        }
        assert_eq!(
            check_requirement("--index-url https://${U}:plain@x/simple"),
            Err(RequirementError::Credentials)
        );
        assert_eq!(
            check_requirement("numpy\u{7}"),
            Err(RequirementError::Control)
        );
        assert_eq!(
            check_requirement(&"a".repeat(MAX_REQUIREMENT_BYTES + 1)),
            Err(RequirementError::TooLong)
        );
    }
}
