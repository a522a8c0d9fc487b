//! `forge plugin upload` (`POST /v1/plugins`, multipart) and `forge plugin list`.

use std::path::PathBuf;

use reqwest::Method;
use reqwest::multipart::{Form, Part};
use serde_json::Value;

use crate::api::Api;
use crate::exit::{CliError, code};
use crate::output::{Format, bytes, emit, field, table, time};
use crate::progress::note;

/// Scope of an uploaded plugin.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Scope {
    /// Usable in your team's chain
    Team,
    /// Usable in every chain (admins)
    Global,
}

/// Arguments of `forge plugin upload`.
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// The component (`.wasm`)
    pub component: PathBuf,
    /// The plugin's name
    #[arg(long)]
    pub name: String,
    /// Its version (immutable once registered)
    #[arg(long)]
    pub version: String,
    #[arg(long)]
    pub description: Option<String>,
    /// Settings the gateway checks with the plugin's validate-settings (JSON file)
    #[arg(long)]
    pub settings: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "team")]
    pub scope: Scope,
}

/// `forge plugin upload`.
pub async fn upload(api: &Api, args: UploadArgs, format: Format) -> Result<u8, CliError> {
    let component = std::fs::read(&args.component)
        .map_err(|e| CliError::Usage(format!("{}: {e}", args.component.display())))?;
    let file_name = args.component.file_name().map_or_else(
        || "plugin.wasm".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let part = Part::bytes(component)
        .file_name(file_name)
        .mime_str("application/wasm")
        .map_err(|e| CliError::local("multipart", e))?;
    let mut form = Form::new()
        .part("component", part)
        .text("name", args.name.clone())
        .text("version", args.version.clone())
        .text(
            "scope",
            match args.scope {
                Scope::Team => "team",
                Scope::Global => "global",
            },
        );
    if let Some(d) = args.description {
        form = form.text("description", d);
    }
    if let Some(s) = &args.settings {
        let text = std::fs::read_to_string(s)
            .map_err(|e| CliError::Usage(format!("{}: {e}", s.display())))?;
        form = form.text("settings", text);
    }
    let resp = api
        .send(api.request(Method::POST, "/v1/plugins").multipart(form))
        .await?;
    let record: Value = crate::api::json(resp).await?;
    emit(format, &record, || {
        note(format!(
            "registered {}@{} for {} ({}, {})",
            field(&record, "/name"),
            field(&record, "/version"),
            field(&record, "/owner"),
            field(&record, "/digest"),
            record["size"].as_u64().map_or_else(|| "-".into(), bytes)
        ));
    })?;
    Ok(code::OK)
}

/// `forge plugin list`.
pub async fn list(api: &Api, team: Option<String>, format: Format) -> Result<u8, CliError> {
    let path = team.map_or_else(|| "/v1/plugins".into(), |t| format!("/v1/plugins?team={t}"));
    let list: Value = api.get(&path).await?;
    emit(format, &list, || {
        let plugins = list["plugins"].as_array().cloned().unwrap_or_default();
        let rows = plugins.iter().map(|p| {
            vec![
                field(p, "/name"),
                field(p, "/version"),
                field(p, "/owner"),
                field(p, "/world"),
                p["size"].as_u64().map_or_else(|| "-".into(), bytes),
                p["uploadedAtMs"].as_i64().map_or_else(|| "-".into(), time),
                field(p, "/digest").chars().take(19).collect(),
            ]
        });
        println!(
            "{}",
            table(
                &[
                    "NAME", "VERSION", "OWNER", "WORLD", "SIZE", "UPLOADED", "DIGEST"
                ],
                rows
            )
        );
    })?;
    Ok(code::OK)
}
