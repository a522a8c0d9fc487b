//! `GET /console/policies[?team=&scope=&from=&to=]`: the global chain and the viewer's
//! team chain (admins: any team's with `?team=`) — each link's plugin, digest and
//! settings, the version history, a line diff between two versions (`from`/`to` of
//! `scope`, `global` or `team`; by default the latest against the one before) and the
//! shadow candidate if one runs (its chain, its agreement with the active chain, the
//! latest differing submissions the viewer may see). Those allowed to change a chain (the global one:
//! admins; a team's: its members and admins — the API's rules, `http::policy::scope_of`)
//! get a settings form per link (`POST /console/policies/settings`) and a rollback form
//! (`POST /console/policies/rollback`); both carry the CSRF token and the version the
//! form was rendered from, so a concurrent change is refused, not overwritten.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use similar::{ChangeTag, TextDiff};

use super::layout::{self, Nav, csrf_field};
use super::present;
use super::session::Viewer;
use super::{Console, PageError};
use crate::http::policy::{ScopeQuery, scope_of, who};
use crate::policy::active::ScopeView;
use crate::policy::{Change, LinkInput, Scope};
use crate::store::PolicyVersion;

/// Versions shown in a history.
const HISTORY: u32 = 50;

/// The page's query.
#[derive(Debug, Default, Deserialize)]
pub struct PageParams {
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    from: Option<u64>,
    #[serde(default)]
    to: Option<u64>,
}

fn query(team: Option<String>) -> ScopeQuery {
    ScopeQuery { team, limit: None }
}

/// `GET /console/policies`.
pub async fn page(
    State(console): State<Console>,
    viewer: Viewer,
    Query(q): Query<PageParams>,
) -> Result<Response, PageError> {
    let caller = &viewer.caller;
    let team = q
        .team
        .clone()
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| caller.team.clone());
    let team_scope = scope_of(caller, &query(Some(team.clone())), false)?;
    let m = &console.app.policies;
    let active = m.current();
    let mut sections = Vec::new();
    for (key, scope) in [("global", Scope::Global), ("team", team_scope)] {
        let history = m.store().history(&scope.key(), HISTORY).await?;
        let writable = scope_of(caller, &query(scope_team(&scope)), true).is_ok();
        let wanted = (q.scope.as_deref() == Some(key)).then_some((q.from, q.to));
        sections.push(section(
            key,
            &scope,
            &active.view(&scope),
            &history,
            writable.then_some(&viewer),
            wanted,
        ));
    }
    let shadow = match m.shadow() {
        Some(c) => {
            // A member's report counts only their team's jobs (an admin's, every team's).
            let team = caller.require_admin().is_err().then(|| caller.team.clone());
            let (counts, differences) = m.store().shadow_report(&c.id, team, 100).await?;
            // Only the differing jobs the viewer may see.
            let differences: Vec<_> = differences
                .into_iter()
                .filter(|d| caller.can_access(&d.team))
                .collect();
            Some((c, counts, differences))
        }
        None => None,
    };
    let body = html! {
        h1 { "Policies" }
        @for s in &sections { (s) }
        section #shadow aria-labelledby="shadow-title" {
            h2 #shadow-title { "Shadow candidate" }
            @if let Some((c, counts, differences)) = &shadow {
                p { "A candidate global chain by " (c.author) " runs beside the active one since "
                    (present::when(c.started_at_ms)) @if !c.comment.is_empty() { " (" (c.comment) ")" } "." }
                ul { @for l in &c.links { li { (l.name) "@" (l.version) " " code { (serde_json::to_string(&l.settings).unwrap_or_default()) } } } }
                p #agreement {
                    @if counts.compared == 0 { "No submission has been compared yet." }
                    @else {
                        "Agreed on " (counts.agreed) " of " (counts.compared) " submissions ("
                        (format!("{:.1}", percent(counts.agreed, counts.compared))) " %)."
                    }
                }
                @if !differences.is_empty() {
                    div.scroll { table #differences {
                        caption { "Latest submissions where the candidate decides differently" }
                        thead { tr { th scope="col" { "Job" } th scope="col" { "Team" } th scope="col" { "Active chain" } th scope="col" { "Candidate" } th scope="col" { "At" } } }
                        tbody { @for d in differences {
                            tr { td { a href={ "/console/jobs/" (d.job_id) } { (d.job_id) } } td { (d.team) }
                                td { (d.live) } td { (d.shadow) } td { (present::when(d.at_ms)) } }
                        } }
                    } }
                }
            } @else { p { "No candidate runs in shadow." } }
        }
    };
    Ok(layout::page("Policies", Some(&viewer), Nav::Policies, body))
}

#[allow(clippy::cast_precision_loss)]
fn percent(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole as f64
}

fn scope_team(scope: &Scope) -> Option<String> {
    match scope {
        Scope::Global => None,
        Scope::Team(t) => Some(t.clone()),
    }
}

fn section(
    key: &str,
    scope: &Scope,
    view: &ScopeView,
    history: &[PolicyVersion],
    editor: Option<&Viewer>,
    wanted: Option<(Option<u64>, Option<u64>)>,
) -> Markup {
    let title = match scope {
        Scope::Global => "Global chain".to_string(),
        Scope::Team(t) => format!("Team {t} chain"),
    };
    let team = scope_team(scope).unwrap_or_default();
    let latest = history.first().map(|v| v.version);
    let previous = history.get(1).map(|v| v.version);
    let (from, to) = match wanted {
        Some((f, t)) => (f.or(previous), t.or(latest)),
        None => (previous, latest),
    };
    let find = |v: Option<u64>| v.and_then(|v| history.iter().find(|h| h.version == v));
    let diff = match (find(from), find(to)) {
        (Some(a), Some(b)) => Some((a.version, b.version, diff_of(a, b))),
        _ => None,
    };
    html! {
        section id={ "policy-" (key) } aria-labelledby={ "title-" (key) } {
            h2 id={ "title-" (key) } { (title) " — version " span.version { (view.version) } }
            @if view.plugins.is_empty() { p { "No plugins: every job passes this scope unchanged." } }
            @for (i, link) in view.plugins.iter().enumerate() {
                article.link {
                    h3 { (link.name) "@" (link.version) " " small { "(" (link.owner) ")" } }
                    p { "Digest " code { (link.digest) } }
                    @let settings = serde_json::to_string_pretty(&link.settings).unwrap_or_default();
                    @if let Some(v) = editor {
                        form method="post" action="/console/policies/settings" id={ "settings-" (key) "-" (link.name) } {
                            (csrf_field(v))
                            input type="hidden" name="team" value=(team);
                            input type="hidden" name="index" value=(i);
                            input type="hidden" name="expected" value=(view.version);
                            label { "Settings (JSON)" textarea.settings name="settings" rows=(settings_rows(&settings)) spellcheck="false" { (settings) } }
                            label { "Comment " input type="text" name="comment" maxlength="1024"; }
                            button type="submit" { "Save settings of " (link.name) }
                        }
                    } @else {
                        pre { (settings) }
                    }
                }
            }
            h3 { "History" }
            @if history.is_empty() { p.empty { "No version of this scope has been saved yet." } }
            @else { div.scroll { table.history {
                thead { tr { th scope="col" { "Version" } th scope="col" { "Action" } th scope="col" { "By" } th scope="col" { "Comment" } th scope="col" { "At" } } }
                tbody { @for v in history {
                    tr data-version=(v.version) { th scope="row" { (v.version) } td { (v.action) @if v.from_version > 0 { " (from " (v.from_version) ")" } }
                        td { (v.author) } td { (v.comment) } td { (present::when(v.at_ms)) } }
                } }
            } } }
            @if history.len() > 1 {
                form method="get" action="/console/policies" {
                    input type="hidden" name="scope" value=(key);
                    @if !team.is_empty() { input type="hidden" name="team" value=(team); }
                    label { "Compare version " (version_select("from", history, from)) }
                    label { "with version " (version_select("to", history, to)) }
                    button type="submit" { "Show diff" }
                }
            }
            @if let Some((a, b, lines)) = &diff {
                h3 { "Diff of version " (a) " → " (b) }
                pre.diff id={ "diff-" (key) } { (lines) }
            }
            @if let Some(v) = editor {
                @if view.version > 1 {
                    form method="post" action="/console/policies/rollback" id={ "rollback-" (key) } {
                        (csrf_field(v))
                        input type="hidden" name="team" value=(team);
                        input type="hidden" name="expected" value=(view.version);
                        label { "Comment " input type="text" name="comment" maxlength="1024"; }
                        button type="submit" { "Roll back to the previous version" }
                    }
                }
            }
        }
    }
}

/// Rows for a settings editor: its JSON whole, within reason.
fn settings_rows(settings: &str) -> usize {
    (settings.lines().count() + 2).clamp(8, 40)
}

fn version_select(name: &str, history: &[PolicyVersion], chosen: Option<u64>) -> Markup {
    html! {
        select name=(name) {
            @for v in history { option value=(v.version) selected[Some(v.version) == chosen] { (v.version) } }
        }
    }
}

/// A line diff of two versions' chains (their links as pretty JSON): removed lines
/// start with `-`, added ones with `+`.
fn diff_of(a: &PolicyVersion, b: &PolicyVersion) -> Markup {
    let text =
        |v: &PolicyVersion| serde_json::to_string_pretty(&v.plugins).unwrap_or_default() + "\n";
    let (old, new) = (text(a), text(b));
    let diff = TextDiff::from_lines(&old, &new);
    html! {
        @for change in diff.iter_all_changes() {
            @match change.tag() {
                ChangeTag::Delete => span.del { "- " (change.value()) },
                ChangeTag::Insert => span.ins { "+ " (change.value()) },
                ChangeTag::Equal => span { "  " (change.value()) },
            }
        }
    }
}

/// The settings form.
#[derive(Debug, Deserialize)]
pub struct SettingsForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    team: String,
    index: usize,
    expected: u64,
    settings: String,
    #[serde(default)]
    comment: String,
}

fn back_to(team: &str) -> Response {
    let to = if team.is_empty() {
        "/console/policies".to_string()
    } else {
        format!("/console/policies?team={team}")
    };
    Redirect::to(&to).into_response()
}

/// `POST /console/policies/settings`: one link's settings replaced, the rest of the
/// chain as it is; a new version.
pub async fn settings(
    State(console): State<Console>,
    viewer: Viewer,
    Form(f): Form<SettingsForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    let team = (!f.team.is_empty()).then(|| f.team.clone());
    let scope = scope_of(&viewer.caller, &query(team), true)?;
    let settings: serde_json::Value = serde_json::from_str(&f.settings).map_err(|e| {
        PageError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("settings: not JSON ({e}); nothing was changed"),
        )
    })?;
    let m = &console.app.policies;
    let view = m.current().view(&scope);
    if f.index >= view.plugins.len() {
        return Err(PageError::new(
            StatusCode::CONFLICT,
            "the chain changed since this form was shown; reload the page",
        ));
    }
    let inputs = view
        .plugins
        .iter()
        .enumerate()
        .map(|(i, l)| LinkInput {
            name: None,
            version: None,
            digest: Some(l.digest.clone()),
            settings: if i == f.index {
                settings.clone()
            } else {
                l.settings.clone()
            },
        })
        .collect();
    let links = m.resolve(&scope, inputs).await?;
    let chain = m.build(&links).await?;
    m.activate(Change {
        scope,
        expected: f.expected,
        links,
        chain,
        fair_share: None,
        action: "put",
        author: who(&viewer.caller),
        comment: f.comment.chars().take(1024).collect(),
    })
    .await?;
    Ok(back_to(&f.team))
}

/// The rollback form.
#[derive(Debug, Deserialize)]
pub struct RollbackForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    team: String,
    expected: u64,
    #[serde(default)]
    comment: String,
}

/// `POST /console/policies/rollback`: back to the version before the current one.
pub async fn rollback(
    State(console): State<Console>,
    viewer: Viewer,
    Form(f): Form<RollbackForm>,
) -> Result<Response, PageError> {
    if !viewer.csrf_ok(&f.csrf) {
        return Err(PageError::csrf());
    }
    let team = (!f.team.is_empty()).then(|| f.team.clone());
    let scope = scope_of(&viewer.caller, &query(team), true)?;
    let comment: String = f.comment.chars().take(1024).collect();
    console
        .app
        .policies
        .rollback(
            &scope,
            Some(f.expected),
            None,
            &who(&viewer.caller),
            &comment,
        )
        .await?;
    Ok(back_to(&f.team))
}
