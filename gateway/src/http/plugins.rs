//! `POST /v1/plugins` (multipart: `component` file, `name`, `version`, optional
//! `description`, `settings` (a JSON object, checked with `validate-settings`), `scope` = `team`
//! (default: the caller's team) or `global` (admins), and the plugin's own limits
//! `memoryMib` and `deadlineMs` (bounded by `FORGE_POLICY_MAX_*`)): 201 new, 200
//! identical re-upload; 413 `plugin.too-large`, 422 `plugin.*` with the exact reason, 409
//! `plugin.version-exists`. `GET /v1/plugins[?team=]`: global plugins and the caller's
//! team's (admins: all).

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::StatusCode;
use serde::Serialize;

use super::body::{Bounded, multipart_error, read_bounded};
use super::error::ApiError;
use super::policy::{ScopeQuery, who};
use super::query::Query;
use crate::auth::{Caller, Role};
use crate::policy::PolicyAdminError;
use crate::policy::registry::{GLOBAL, Upload};
use crate::state::AppState;
use crate::store::PluginRecord;

/// `POST /v1/plugins`.
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    request: Request,
) -> Result<(StatusCode, Json<PluginRecord>), ApiError> {
    // A member whose uploads keep failing is refused before the body is read (an
    // admin may upload globally, which is not braked: checked once the scope is known).
    if caller.role != Role::Admin {
        state.policies.registry().admit_upload(&caller.team)?;
    }
    let form = UploadForm::read(&state, request).await?;
    let upload = form.into_upload(&caller)?;
    let (record, new) = state.policies.registry().upload(upload).await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(record)))
}

/// The parts of a plugin upload as they were sent.
struct UploadForm {
    component: Option<Bytes>,
    /// The text parts, by name.
    text: BTreeMap<String, String>,
}

/// The longest text part.
const MAX_TEXT_PART: usize = 64 << 10;

impl UploadForm {
    /// Reads the multipart body: the component (at most the plugin limit) and the text
    /// parts (at most 64 KiB each); any other part is refused.
    async fn read(state: &AppState, request: Request) -> Result<Self, ApiError> {
        // A body that is not multipart is the API's JSON 400, not axum's plain-text one.
        let mut multipart = Multipart::from_request(request, state)
            .await
            .map_err(|e| ApiError::bad("invalid-multipart", "body", e.body_text()))?;
        let limit = state.policies.registry().limits().max_plugin_bytes;
        let mut form = UploadForm {
            component: None,
            text: BTreeMap::new(),
        };
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| multipart_error("body", &e))?
        {
            let name = field.name().unwrap_or("").to_string();
            match name.as_str() {
                "component" => {
                    let bytes = usize::try_from(limit).unwrap_or(usize::MAX);
                    let read = read_bounded(field, bytes).await.map_err(|e| match e {
                        Bounded::TooLarge { size } => ApiError::from(PolicyAdminError::TooLarge {
                            size: size as u64,
                            limit,
                        }),
                        Bounded::Failed(e) => multipart_error("component", &e),
                    })?;
                    form.component = Some(read);
                }
                "name" | "version" | "description" | "settings" | "scope" | "memoryMib"
                | "deadlineMs" => {
                    let value = field.text().await.map_err(|e| multipart_error(&name, &e))?;
                    if value.len() > MAX_TEXT_PART {
                        return Err(ApiError::bad("invalid-part", &name, "at most 64 KiB"));
                    }
                    form.text.insert(name, value);
                }
                other => {
                    return Err(ApiError::bad(
                        "unknown-part",
                        other,
                        format!(
                            "unknown part `{other}`; expected component, name, version, \
                             description, settings, scope, memoryMib, deadlineMs"
                        ),
                    ));
                }
            }
        }
        Ok(form)
    }

    /// The upload the parts describe, by `caller`.
    fn into_upload(self, caller: &Caller) -> Result<Upload, ApiError> {
        let component = self.component.ok_or_else(|| {
            ApiError::bad(
                "missing-part",
                "component",
                "the `component` file is required",
            )
        })?;
        let text = self.text;
        let required = |k: &str| {
            text.get(k).cloned().ok_or_else(|| {
                ApiError::bad("missing-part", k, format!("the `{k}` part is required"))
            })
        };
        Ok(Upload {
            owner: owner(caller, text.get("scope").map(String::as_str))?,
            name: required("name")?,
            version: required("version")?,
            description: text.get("description").cloned().unwrap_or_default(),
            component,
            settings: settings(text.get("settings"))?,
            memory_mib: whole(&text, "memoryMib")?,
            deadline_ms: whole(&text, "deadlineMs")?,
            uploaded_by: who(caller),
        })
    }
}

/// Whose plugin it is: the caller's team, or the global scope (admins).
fn owner(caller: &Caller, scope: Option<&str>) -> Result<String, ApiError> {
    match scope {
        None | Some("team") => Ok(caller.team.clone()),
        Some("global") if caller.role == Role::Admin => Ok(GLOBAL.to_string()),
        Some("global") => {
            Err(PolicyAdminError::Forbidden("only admins upload global plugins".into()).into())
        }
        Some(other) => Err(ApiError::bad(
            "invalid-part",
            "scope",
            format!("scope is `team` or `global`, not `{other}`"),
        )),
    }
}

/// The `settings` part: a JSON object.
fn settings(text: Option<&String>) -> Result<Option<serde_json::Value>, ApiError> {
    let Some(text) = text else {
        return Ok(None);
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(Some(v)),
        Ok(_) => Err(ApiError::bad(
            "invalid-part",
            "settings",
            "settings are a JSON object",
        )),
        Err(e) => Err(ApiError::bad(
            "invalid-part",
            "settings",
            format!("settings are not JSON: {e}"),
        )),
    }
}

/// A whole-number part (`5`, `5.0`, `5e0`, as JSON writes a whole number).
fn whole(text: &BTreeMap<String, String>, k: &str) -> Result<Option<u64>, ApiError> {
    text.get(k)
        .map(|v| {
            let mut n = serde_json::from_str::<serde_json::Value>(v.trim())
                .unwrap_or(serde_json::Value::Null);
            crate::domain::json_number::integral_numbers(&mut n);
            n.as_u64().ok_or_else(|| {
                ApiError::bad(
                    "invalid-part",
                    k,
                    format!("`{k}` is a whole number, not `{v}`"),
                )
            })
        })
        .transpose()
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
