//! `POST /v1/plugins` (multipart: `component` file, `name`, `version`, optional
//! `description`, `settings` (JSON, checked with `validate-settings`), `scope` = `team`
//! (default: the caller's team) or `global` (admins), and the plugin's own limits
//! `memoryMib` and `deadlineMs` (bounded by `FORGE_POLICY_MAX_*`)): 201 new, 200
//! identical re-upload; 413 `plugin.too-large`, 422 `plugin.*` with the exact reason, 409
//! `plugin.version-exists`. `GET /v1/plugins[?team=]`: global plugins and the caller's
//! team's (admins: all).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::StatusCode;
use serde::Serialize;

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
    // A body that is not multipart is the API's JSON 400, not axum's plain-text one.
    let mut multipart = Multipart::from_request(request, &state)
        .await
        .map_err(|e| ApiError::bad("invalid-multipart", "body", e.body_text()))?;
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
            "name" | "version" | "description" | "settings" | "scope" | "memoryMib"
            | "deadlineMs" => {
                let value = field.text().await.map_err(|e| bad_multipart(&e))?;
                if value.len() > 64 << 10 {
                    return Err(ApiError::bad("invalid-part", &name, "at most 64 KiB"));
                }
                text.insert(name, value);
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
    let component = component.ok_or_else(|| {
        ApiError::bad(
            "missing-part",
            "component",
            "the `component` file is required",
        )
    })?;
    let required = |k: &str| {
        text.get(k)
            .cloned()
            .ok_or_else(|| ApiError::bad("missing-part", k, format!("the `{k}` part is required")))
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
            return Err(ApiError::bad(
                "invalid-part",
                "scope",
                format!("scope is `team` or `global`, not `{other}`"),
            ));
        }
    };
    let settings = match text.get("settings") {
        None => None,
        Some(s) => Some(serde_json::from_str(s).map_err(|e| {
            ApiError::bad(
                "invalid-part",
                "settings",
                format!("settings are not JSON: {e}"),
            )
        })?),
    };
    let whole = |k: &str| -> Result<Option<u64>, ApiError> {
        text.get(k)
            .map(|v| {
                // A whole number as JSON writes it (`5`, `5.0`, `5e0`).
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
    };
    let memory_mib = whole("memoryMib")?;
    let deadline_ms = whole("deadlineMs")?;
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
            memory_mib,
            deadline_ms,
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

fn bad_multipart(e: &axum::extract::multipart::MultipartError) -> ApiError {
    ApiError::bad("invalid-multipart", "body", e.body_text())
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
