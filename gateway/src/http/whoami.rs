//! `GET /v1/whoami`: who the bearer token says the caller is — team, role and the
//! token's name (`forge whoami`, and `forge login` checking a token before storing
//! it).

use axum::Json;
use serde_json::{Value, json};

use crate::auth::Caller;

/// `GET /v1/whoami`.
pub async fn whoami(caller: Caller) -> Json<Value> {
    Json(json!({ "team": caller.team, "role": caller.role, "name": caller.name }))
}
