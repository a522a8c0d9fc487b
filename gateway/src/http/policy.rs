//! The policy chains over HTTP: `GET /v1/policy[?team=]` (the global chain and the
//! team's), `PUT /v1/policy[?team=]` (`{"expectedVersion", "plugins": [{"name",
//! "version" | "digest", "settings"}], "comment", "replay": N, "dryRun": bool}`; the
//! global chain is admin-only, a team's chain its members' and admins'; 409
//! `policy.version-conflict`, 422 on an unknown plugin or bad settings; with `replay`
//! the candidate is replayed against the last N recorded decisions, with `dryRun`
//! nothing changes), `POST /v1/policy/rollback[?team=]` (`{"expectedVersion"?,
//! "toVersion"?, "comment"?}`), `GET /v1/policy/history[?team=&limit=]`.

use super::body::{JsonBody, JsonDocument};
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::query::Query;
use crate::auth::{Caller, Role};
use crate::domain::FairShareSettings;
use crate::policy::active::ScopeView;
use crate::policy::{Activation, Change, LinkInput, PolicyAdminError, ReplayReport, Scope};
use crate::state::AppState;
use crate::store::PolicyVersion;

/// `?team=` of the policy endpoints.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScopeQuery {
    #[serde(default, deserialize_with = "named_team")]
    pub(super) team: Option<String>,
    #[serde(default)]
    pub(super) limit: Option<u32>,
}

/// `?team=` names a team: an empty one is refused (leave it out for the global chain).
fn named_team<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let t = String::deserialize(d)?;
    if t.trim().is_empty() {
        return Err(serde::de::Error::custom(
            "team: names a team (leave it out for the global chain)",
        ));
    }
    Ok(Some(t))
}

pub(super) fn who(caller: &Caller) -> String {
    caller
        .name
        .clone()
        .unwrap_or_else(|| format!("{} ({:?})", caller.team, caller.role).to_lowercase())
}

/// The scope a request addresses; `write` requires the right to change it.
pub(super) fn scope_of(
    caller: &Caller,
    q: &ScopeQuery,
    write: bool,
) -> Result<Scope, PolicyAdminError> {
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
    /// Fair-share weights (global scope only); omitted: the current version's.
    #[serde(default)]
    fair_share: Option<FairShareSettings>,
    /// Replay the candidate against this many recent decisions first.
    #[serde(default)]
    replay: Option<u32>,
    /// Validate (and replay) only; change nothing.
    #[serde(default)]
    dry_run: bool,
}

impl JsonDocument for PutPolicy {
    const INVALID: &'static str = "invalid-policy";
    const WHAT: &'static str = "a policy document";
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
    JsonBody(put): JsonBody<PutPolicy>,
) -> Result<Json<PutResponse>, ApiError> {
    let scope = scope_of(&caller, &q, true)?;
    if put.comment.chars().count() > MAX_COMMENT_CHARS {
        return Err(ApiError::bad(
            "invalid-policy",
            "comment",
            format!("at most {MAX_COMMENT_CHARS} characters"),
        ));
    }
    check_fair_share(&scope, put.fair_share.as_ref())?;
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
            fair_share: put.fair_share,
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

/// Fair-share weights are the global policy's, and valid.
fn check_fair_share(scope: &Scope, f: Option<&FairShareSettings>) -> Result<(), ApiError> {
    let Some(f) = f else { return Ok(()) };
    if matches!(scope, Scope::Team(_)) {
        return Err(PolicyAdminError::FairShareNotGlobal.into());
    }
    f.validate()
        .map_err(|e| ApiError::bad("invalid-policy", &e.field, e.why))
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

impl JsonDocument for Rollback {
    const INVALID: &'static str = "invalid-policy";
    const WHAT: &'static str = "a rollback request";

    /// No body: back to the previous version.
    fn when_empty() -> Option<Self> {
        Some(Rollback::default())
    }
}

/// `POST /v1/policy/rollback`.
pub async fn rollback(
    State(state): State<AppState>,
    caller: Caller,
    Query(q): Query<ScopeQuery>,
    JsonBody(r): JsonBody<Rollback>,
) -> Result<Json<Activation>, ApiError> {
    let scope = scope_of(&caller, &q, true)?;
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

/// Longest comment of a chain change (`PUT /v1/policy`, `PUT /v1/policy/shadow`).
pub const MAX_COMMENT_CHARS: usize = 1024;

/// Most versions `GET /v1/policy/history` returns at once (`?limit=`).
pub const MAX_HISTORY: u32 = 1000;

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
    let limit = match q.limit {
        None => 100,
        Some(n @ 1..=MAX_HISTORY) => n,
        Some(_) => {
            return Err(ApiError::bad(
                "invalid-query",
                "limit",
                format!("1..={MAX_HISTORY} versions"),
            ));
        }
    };
    let scope = scope_of(&caller, &q, false)?;
    let versions = state.policies.store().history(&scope.key(), limit).await?;
    Ok(Json(HistoryResponse {
        scope: scope.key(),
        versions,
    }))
}
