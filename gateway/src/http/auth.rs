//! The [`Caller`] extractor: every `/v1` handler that takes a `Caller` is authenticated
//! by the request's bearer token (see [`crate::auth`]); a missing or unknown token is
//! answered 401 with a `WWW-Authenticate` challenge before the handler runs.

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use super::error::ApiError;
use crate::auth::Caller;
use crate::state::AppState;

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or(""));
        Ok(state.tokens.authenticate(header)?)
    }
}
