//! The commands, one file per group: `login` (login, logout, whoami), `submit`,
//! `jobs` (list, status, cancel, capacity, fair-share, review), `fair_share` (replay),
//! `logs`, `playground`, `policy`, `plugin`.

pub mod fair_share;
pub mod jobs;
pub mod login;
pub mod logs;
pub mod playground;
pub mod plugin;
pub mod policy;
pub mod submit;

use std::path::Path;

use crate::exit::CliError;

/// A spec or chain file's bytes and whether it is YAML (by extension; JSON
/// otherwise).
pub fn read_doc(path: &Path) -> Result<(Vec<u8>, bool), CliError> {
    let bytes =
        std::fs::read(path).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
    let yaml = !path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    Ok((bytes, yaml))
}

/// A YAML or JSON file as JSON.
pub fn read_value(path: &Path) -> Result<serde_json::Value, CliError> {
    let (bytes, yaml) = read_doc(path)?;
    let parsed = if yaml {
        std::str::from_utf8(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_saphyr::from_str(t).map_err(|e| e.to_string()))
    } else {
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}
