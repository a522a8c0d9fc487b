//! Reading the files the configuration names — the config file and the fleets file:
//! size-capped, and YAML parsed by `serde-saphyr` under a resource budget (no alias
//! bombs), its errors carrying the position but never a snippet of the file, which
//! may hold secrets.

use std::io::Read;
use std::path::Path;

/// The largest config or fleets file read (a flat map of a few dozen settings is
/// ~4 KiB).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The file's text, refusing files over [`MAX_FILE_BYTES`].
pub fn read_capped(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    Ok(text)
}

/// YAML 1.2 (`yes`/`no` stay strings, as `0755` and `1_000` do) of at most
/// `max_nodes` nodes, without snippets in errors.
pub fn parse_yaml_within<T: serde::de::DeserializeOwned>(
    text: &str,
    max_nodes: usize,
) -> Result<T, String> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_depth: 8,
            max_nodes: max_nodes,
            max_aliases: 100,
            max_anchors: 100,
            max_total_scalar_bytes: MAX_FILE_BYTES as usize,
        },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        with_snippet: false,
    };
    serde_saphyr::from_str_with_options(text, options).map_err(|e| e.to_string())
}
