//! Optional bearer-token authentication, like a kube-apiserver started with
//! `--token-auth-file` and `--anonymous-auth=false`: when the emulator has a token,
//! every request (discovery, health and the `/_sim` admin endpoint included) must
//! carry `Authorization: Bearer <token>`; anything else is the real server's 401
//! `Status` (`reason: Unauthorized`, message `Unauthorized`). As in the real
//! authentication filter, the `Authorization` header is removed from an authenticated
//! request, so nothing behind the server (the `pods/proxy` upstream) ever sees it.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::state::AppState;
use crate::error::ApiError;

/// Lets a request through when no token is configured or it carries the token.
pub(super) async fn authenticate(
    State(st): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Some(token) = st.token.as_deref() {
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        if !presented.is_some_and(|p| p.as_bytes().ct_eq(token.as_bytes()).into()) {
            return ApiError::Unauthorized.into_response();
        }
    }
    req.headers_mut().remove(header::AUTHORIZATION);
    next.run(req).await
}

/// The token of a `Bearer <token>` header value (the scheme is case-insensitive, as in
/// the real bearer-token authenticator; an empty token is no token).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::bearer;

    #[test]
    fn bearer_values() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("abc"), None);
    }
}
