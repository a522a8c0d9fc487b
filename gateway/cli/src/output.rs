//! What commands print on stdout: `-o table` (the default, for people: aligned
//! columns, no colours or box drawing, so it pipes cleanly), `-o json` or `-o yaml`
//! (the gateway's data as it came, for scripts). Progress and logs go to stderr (see
//! `progress.rs`), so `-o json` output always parses.

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;
use serde_json::Value;

use crate::exit::CliError;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Human-readable tables and lines
    #[default]
    Table,
    /// JSON (one document; one per line when watching)
    Json,
    /// YAML (one document; `---`-separated when watching)
    Yaml,
}

impl Format {
    /// Whether the output is for a program.
    pub fn is_data(self) -> bool {
        self != Format::Table
    }
}

/// Prints `value` as data, or runs `human` to print it for people.
pub fn emit(format: Format, value: &impl Serialize, human: impl FnOnce()) -> Result<(), CliError> {
    match format {
        Format::Table => {
            human();
            Ok(())
        }
        Format::Json => {
            let text =
                serde_json::to_string_pretty(value).map_err(|e| CliError::local("JSON", e))?;
            println!("{text}");
            Ok(())
        }
        Format::Yaml => {
            let text = serde_saphyr::to_string(value).map_err(|e| CliError::local("YAML", e))?;
            print!("{text}");
            Ok(())
        }
    }
}

/// One item of a watched stream: a compact JSON line, or a YAML document.
pub fn emit_item(format: Format, value: &impl Serialize) -> Result<(), CliError> {
    match format {
        Format::Json => {
            let text = serde_json::to_string(value).map_err(|e| CliError::local("JSON", e))?;
            println!("{text}");
        }
        Format::Yaml => {
            let text = serde_saphyr::to_string(value).map_err(|e| CliError::local("YAML", e))?;
            print!("---\n{text}");
        }
        Format::Table => {}
    }
    Ok(())
}

/// A table with these headers and rows, aligned like `kubectl get`.
pub fn table(headers: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().map(|h| h.to_string()));
    for row in rows {
        t.add_row(row);
    }
    // comfy-table pads every line to the widest cell; trailing blanks are noise.
    t.to_string()
        .lines()
        .map(|l| l.trim_end().trim_start_matches(' '))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string field of a JSON value (`-` when absent).
pub fn field(v: &Value, pointer: &str) -> String {
    match v.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    }
}

/// Unix milliseconds as a UTC time (`2026-11-30 22:31:05`).
pub fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map_or_else(
        |_| ms.to_string(),
        |t| t.strftime("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

/// Bytes for people (`1.5 MiB`).
pub fn bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}
