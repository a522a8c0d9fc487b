//! HTTP handlers of policy management.
//!
//! - `POST /v1/plugins` (multipart: `component` file, `name`, `version`, optional
//!   `description`, `settings` (JSON, checked with `validate-settings`), `scope` =
//!   `team` (default: the caller's team) or `global` (admins)). 201 new, 200 identical
//!   re-upload; 413 `plugin.too-large`, 422 `plugin.*` with the exact reason, 409
//!   `plugin.version-exists`.
//! - `GET /v1/plugins[?team=]`: global plugins and the caller's team's (admins: all).
//! - `GET /v1/policy[?team=]`: the global chain and the team's.
//! - `PUT /v1/policy[?team=]`: `{"expectedVersion", "plugins": [{"name","version" |
//!   "digest", "settings"}], "comment", "replay": N, "dryRun": bool}`. The global chain
//!   is admin-only; a team's chain its members' (and admins'). 200 with the new version
//!   and `activationMs`; 409 `policy.version-conflict`; 422 on an unknown plugin or bad
//!   settings. With `dryRun` nothing changes; with `replay` the candidate is replayed
//!   against the last N recorded decisions and the differences are reported.
//! - `POST /v1/policy/rollback[?team=]`: `{"expectedVersion"?, "toVersion"?, "comment"?}`.
//! - `GET /v1/policy/history[?team=&limit=]`: who, when, from → to, comment.
//! - `GET|PUT|DELETE /v1/policy/shadow`: the shadow candidate and its agreement (admin
//!   for changes).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Multipart, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::active::{Scope, ScopeView};
use super::error::PolicyAdminError;
use super::manager::{Activation, Change, LinkInput, ReplayReport};
use super::registry::{GLOBAL, Upload};
use super::shadow::{CandidateView, ShadowCandidate};
use super::store::{PluginRecord, PolicyVersion, ShadowCounts, ShadowResult};
use crate::api_error::ApiError;
use crate::app::AppState;
use crate::auth::{Caller, Role};
use crate::store::now_ms;

/// `?team=` of the policy endpoints.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeQuery {
    #[serde(default)]
    team: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
}

fn who(caller: &Caller) -> String {
    caller
        .name
        .clone()
        .unwrap_or_else(|| format!("{} ({:?})", caller.team, caller.role).to_lowercase())
}

/// The scope a request addresses; `write` requires the right to change it.
fn scope_of(caller: &Caller, q: &ScopeQuery, write: bool) -> Result<Scope, PolicyAdminError> {
    match &q.team {
        None => {
            if write && caller.role != Role::Admin {
                return Err(PolicyAdminError::Forbidden(
                    "the global policy is admin-only; members change their team's chain \
                     with ?team=<your team>"
                        .into(),
                ));
            }
            Ok(Scope::Global)
        }
        Some(t) => {
            if !caller.can_access(t) {
                return Err(PolicyAdminError::Forbidden(format!(
                    "you are not a member of team `{t}`"
                )));
            }
            Ok(Scope::Team(t.clone()))
        }
    }
}

/// `POST /v1/plugins`.
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    mut multipart: Multipart,
) -> Result<(StatusCode, Json<PluginRecord>), ApiError> {
    let limit = state.policies.registry().limits().max_plugin_bytes;
    let mut component: Option<Bytes> = None;
    let mut text = std::collections::BTreeMap::<String, String>::new();
    while let Some(mut field) = multipart
        .next_field()
        .await
        .map_err(|e| bad_multipart(&e))?
    {
        let name = field.name().unwrap_or("").to_string();
        match name.as_str() {
            "component" => {
                // Past the limit the rest is read and dropped (bounded by the body
                // limit), so the client gets the answer rather than a reset connection.
                let mut buf: Vec<u8> = Vec::new();
                let mut size = 0u64;
                while let Some(chunk) = field.chunk().await.map_err(|e| bad_multipart(&e))? {
                    size += chunk.len() as u64;
                    if size <= limit {
                        buf.extend_from_slice(&chunk);
                    }
                }
                if size > limit {
                    return Err(PolicyAdminError::TooLarge { size, limit }.into());
                }
                component = Some(Bytes::from(buf));
            }
            "name" | "version" | "description" | "settings" | "scope" => {
                let value = field.text().await.map_err(|e| bad_multipart(&e))?;
                if value.len() > 64 << 10 {
                    return Err(bad("invalid-part", &name, "at most 64 KiB").into());
                }
                text.insert(name, value);
            }
            other => {
                return Err(bad(
                    "unknown-part",
                    other,
                    format!(
                        "unknown part `{other}`; expected component, name, version, \
                         description, settings, scope"
                    ),
                )
                .into());
            }
        }
    }
    let component = component.ok_or_else(|| {
        bad(
            "missing-part",
            "component",
            "the `component` file is required",
        )
    })?;
    let required = |k: &str| {
        text.get(k)
            .cloned()
            .ok_or_else(|| bad("missing-part", k, format!("the `{k}` part is required")))
    };
    let name = required("name")?;
    let version = required("version")?;
    let owner = match text.get("scope").map(String::as_str) {
        None | Some("team") => caller.team.clone(),
        Some("global") => {
            if caller.role != Role::Admin {
                return Err(PolicyAdminError::Forbidden(
                    "only admins upload global plugins".into(),
                )
                .into());
            }
            GLOBAL.to_string()
        }
        Some(other) => {
            return Err(bad(
                "invalid-part",
                "scope",
                format!("scope is `team` or `global`, not `{other}`"),
            )
            .into());
        }
    };
    let settings = match text.get("settings") {
        None => None,
        Some(s) => Some(serde_json::from_str(s).map_err(|e| {
            bad(
                "invalid-part",
                "settings",
                format!("settings are not JSON: {e}"),
            )
        })?),
    };
    let (record, new) = state
        .policies
        .registry()
        .upload(Upload {
            owner,
            name,
            version,
            description: text.get("description").cloned().unwrap_or_default(),
            component,
            settings,
            uploaded_by: who(&caller),
        })
        .await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(record)))
}

fn bad(code: &'static str, field: &str, message: impl Into<String>) -> PolicyAdminError {
    PolicyAdminError::BadRequest {
        code,
        field: field.to_string(),
        message: message.into(),
    }
}

fn bad_multipart(e: &axum::extract::multipart::MultipartError) -> PolicyAdminError {
    bad("invalid-multipart", "body", e.body_text())
}

#[derive(Serialize)]
pub struct PluginList {
    plugins: Vec<PluginRecord>,
}

/// `GET /v1/plugins`.
pub async fn list_plugins(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<PluginList>, ApiError> {
    let owners = match (&q.team, caller.role) {
        (None, Role::Admin) => None,
        (Some(t), _) if caller.can_access(t) => Some(vec![GLOBAL.to_string(), t.clone()]),
        (Some(t), _) => {
            return Err(
                PolicyAdminError::Forbidden(format!("you are not a member of team `{t}`")).into(),
            );
        }
        (None, Role::Member) => Some(vec![GLOBAL.to_string(), caller.team.clone()]),
    };
    let plugins = state.policies.store().plugins(owners).await?;
    Ok(Json(PluginList { plugins }))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyResponse {
    global: ScopeView,
    team: ScopeView,
}

/// `GET /v1/policy`.
pub async fn get_policy(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<PolicyResponse>, ApiError> {
    let team = match scope_of(&caller, &q, false)? {
        Scope::Team(t) => t,
        Scope::Global => caller.team.clone(),
    };
    let active = state.policies.current();
    Ok(Json(PolicyResponse {
        global: active.view(&Scope::Global),
        team: active.view(&Scope::Team(team)),
    }))
}

/// `PUT /v1/policy` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutPolicy {
    expected_version: u64,
    plugins: Vec<LinkInput>,
    #[serde(default)]
    comment: String,
    /// Replay the candidate against this many recent decisions first.
    #[serde(default)]
    replay: Option<u32>,
    /// Validate (and replay) only; change nothing.
    #[serde(default)]
    dry_run: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PutResponse {
    #[serde(skip_serializing_if = "Option::is_none")]
    activated: Option<Activation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    replay: Option<ReplayReport>,
    dry_run: bool,
}

/// `PUT /v1/policy`.
pub async fn put_policy(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
    body: Bytes,
) -> Result<Json<PutResponse>, ApiError> {
    let scope = scope_of(&caller, &q, true)?;
    let put: PutPolicy = serde_json::from_slice(&body).map_err(|e| {
        bad(
            "invalid-policy",
            "body",
            format!("not a policy document: {e}"),
        )
    })?;
    if put.comment.len() > 1024 {
        return Err(bad("invalid-policy", "comment", "at most 1024 bytes").into());
    }
    let m = &state.policies;
    let links = m.resolve(&scope, put.plugins).await?;
    let chain = m.build(&links).await?;
    let replay = match put.replay {
        Some(n) if n > 0 => Some(m.replay(&scope, &chain, n.min(10_000)).await?),
        _ => None,
    };
    if put.dry_run {
        return Ok(Json(PutResponse {
            activated: None,
            replay,
            dry_run: true,
        }));
    }
    let activated = m
        .activate(Change {
            scope,
            expected: put.expected_version,
            links,
            chain,
            action: "put",
            author: who(&caller),
            comment: put.comment,
        })
        .await?;
    Ok(Json(PutResponse {
        activated: Some(activated),
        replay,
        dry_run: false,
    }))
}

/// `POST /v1/policy/rollback` body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rollback {
    #[serde(default)]
    expected_version: Option<u64>,
    #[serde(default)]
    to_version: Option<u64>,
    #[serde(default)]
    comment: String,
}

/// `POST /v1/policy/rollback`.
pub async fn rollback(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
    body: Bytes,
) -> Result<Json<Activation>, ApiError> {
    let scope = scope_of(&caller, &q, true)?;
    let r: Rollback = if body.is_empty() {
        Rollback::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            bad(
                "invalid-policy",
                "body",
                format!("not a rollback request: {e}"),
            )
        })?
    };
    let done = state
        .policies
        .rollback(
            &scope,
            r.expected_version,
            r.to_version,
            &who(&caller),
            &r.comment,
        )
        .await?;
    Ok(Json(done))
}

#[derive(Serialize)]
pub struct HistoryResponse {
    scope: String,
    versions: Vec<PolicyVersion>,
}

/// `GET /v1/policy/history`.
pub async fn history(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let scope = scope_of(&caller, &q, false)?;
    let versions = state
        .policies
        .store()
        .history(&scope.key(), q.limit.unwrap_or(100).clamp(1, 1000))
        .await?;
    Ok(Json(HistoryResponse {
        scope: scope.key(),
        versions,
    }))
}

/// `PUT /v1/policy/shadow` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PutShadow {
    plugins: Vec<LinkInput>,
    #[serde(default)]
    comment: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowResponse {
    active: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate: Option<CandidateView>,
    #[serde(flatten)]
    counts: ShadowCounts,
    /// `agreed / compared` (absent before the first comparison).
    #[serde(skip_serializing_if = "Option::is_none")]
    agreement_rate: Option<f64>,
    /// The latest differing cases (newest first, at most 100).
    differences: Vec<ShadowResult>,
}

async fn shadow_report(
    state: &AppState,
    candidate: Option<&ShadowCandidate>,
    active: bool,
) -> Result<ShadowResponse, ApiError> {
    let Some(c) = candidate else {
        return Ok(ShadowResponse {
            active: false,
            candidate: None,
            counts: ShadowCounts::default(),
            agreement_rate: None,
            differences: Vec::new(),
        });
    };
    let (counts, differences) = state.policies.store().shadow_report(&c.id, 100).await?;
    #[allow(clippy::cast_precision_loss)]
    let agreement_rate =
        (counts.compared > 0).then(|| counts.agreed as f64 / counts.compared as f64);
    Ok(ShadowResponse {
        active,
        candidate: Some(c.view()),
        counts,
        agreement_rate,
        differences,
    })
}

/// `GET /v1/policy/shadow`.
pub async fn get_shadow(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<ShadowResponse>, ApiError> {
    let c = state.policies.shadow();
    Ok(Json(shadow_report(&state, c.as_deref(), true).await?))
}

/// `PUT /v1/policy/shadow`: start shadowing a candidate global chain.
pub async fn put_shadow(
    State(state): State<AppState>,
    caller: Caller,
    body: Bytes,
) -> Result<Json<ShadowResponse>, ApiError> {
    caller.require_admin()?;
    let put: PutShadow = serde_json::from_slice(&body).map_err(|e| {
        bad(
            "invalid-policy",
            "body",
            format!("not a policy document: {e}"),
        )
    })?;
    let m = &state.policies;
    let links = m.resolve(&Scope::Global, put.plugins).await?;
    let chain = m.build(&links).await?;
    let started_at_ms = now_ms();
    let candidate = ShadowCandidate {
        id: format!("shadow-{started_at_ms}-{}", crate::store::new_job_id()),
        links,
        chain,
        author: who(&caller),
        comment: put.comment,
        started_at_ms,
    };
    let report = shadow_report(&state, Some(&candidate), true).await?;
    m.set_shadow(candidate);
    Ok(Json(report))
}

/// `DELETE /v1/policy/shadow`: stop shadowing; answers the final report.
pub async fn delete_shadow(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ShadowResponse>, ApiError> {
    caller.require_admin()?;
    let c = state
        .policies
        .clear_shadow()
        .ok_or_else(|| PolicyAdminError::NotFound("no shadow candidate is running".into()))?;
    Ok(Json(shadow_report(&state, Some(&c), false).await?))
}
