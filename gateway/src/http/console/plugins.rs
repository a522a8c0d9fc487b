//! `GET /console/plugins`: the plugin registry the viewer may use (admins: every
//! owner's; members: the global plugins and their team's) — name, version, owner,
//! digest, size, the WIT world, who uploaded it and when. The same listing as
//! `GET /v1/plugins`.

use axum::extract::State;
use axum::response::Response;
use maud::html;

use super::layout::{self, Nav};
use super::present;
use super::session::Viewer;
use super::{Console, PageError};
use crate::auth::Role;
use crate::policy::registry::GLOBAL;

/// `GET /console/plugins`.
pub async fn page(State(console): State<Console>, viewer: Viewer) -> Result<Response, PageError> {
    let owners = match viewer.caller.role {
        Role::Admin => None,
        Role::Member => Some(vec![GLOBAL.to_string(), viewer.caller.team.clone()]),
    };
    let plugins = console.app.policies.store().plugins(owners).await?;
    let body = html! {
        h1 { "Plugins" }
        div.scroll { table #plugins {
            thead { tr {
                th scope="col" { "Plugin" } th scope="col" { "Owner" } th scope="col" { "Digest" }
                th scope="col" { "Size" } th scope="col" { "World" } th scope="col" { "Uploaded" }
            } }
            tbody { @for p in &plugins {
                tr {
                    th scope="row" { (p.name) "@" (p.version) @if !p.description.is_empty() { br; small { (p.description) } } }
                    td { (p.owner) }
                    td { code title=(p.digest) { (p.digest.get(..19).unwrap_or(&p.digest)) "…" } }
                    td { (format!("{:.1} KiB", p.size as f64 / 1024.0)) }
                    td { (p.world) }
                    td { (p.uploaded_by) br; small { (present::when(p.uploaded_at_ms)) } }
                }
            } }
        } }
        @if plugins.is_empty() { p { "No plugins are registered." } }
    };
    Ok(layout::page("Plugins", Some(&viewer), Nav::Plugins, body))
}
