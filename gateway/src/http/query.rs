//! The [`Query`] extractor every handler uses for its query string: axum's own, whose
//! rejection is a plain-text 400, answered instead as the API's JSON error
//! (`400 invalid-query`, the field unknown or malformed), as the OpenAPI document
//! promises for every operation with query parameters.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A deserialized query string; a malformed one is `400 invalid-query`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        serde_urlencoded::from_str(query)
            .map(Query)
            .map_err(|e| ApiError::bad("invalid-query", "query", e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;
    use axum::response::IntoResponse;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Q {
        limit: Option<u32>,
    }

    async fn extract(uri: &str) -> Result<Query<Q>, ApiError> {
        let (mut parts, ()) = Request::get(uri).body(()).expect("request").into_parts();
        Query::<Q>::from_request_parts(&mut parts, &()).await
    }

    #[tokio::test]
    async fn a_malformed_or_unknown_parameter_is_a_json_400() {
        assert_eq!(extract("/x?limit=7").await.expect("ok").0.limit, Some(7));
        assert_eq!(extract("/x").await.expect("ok").0.limit, None);
        for uri in ["/x?limit=many", "/x?limit=-1", "/x?other=1"] {
            let r = extract(uri).await.expect_err(uri).into_response();
            assert_eq!(r.status(), axum::http::StatusCode::BAD_REQUEST, "{uri}");
            let body = axum::body::to_bytes(r.into_body(), 1 << 16)
                .await
                .expect("body");
            let v: serde_json::Value = serde_json::from_slice(&body).expect("json");
            assert_eq!(v["error"]["code"], "invalid-query", "{uri}");
        }
    }
}
