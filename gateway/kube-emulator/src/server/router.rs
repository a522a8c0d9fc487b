//! Paths to handlers: health and version endpoints, the OpenAPI stub, discovery
//! (`/api`, `/apis`, `/apis/<group>`, resource lists), the `/_sim/faults` admin
//! endpoint, the pod proxy (`pods/{name}/proxy/...`, [`pod_proxy`](super::pod_proxy)),
//! and every resource path under `/api/v1` and `/apis/<group>/<version>`
//! handed to [`dispatch`](super::dispatch); every route (and the fallback) behind the
//! bearer-token check of [`auth`](super::auth).

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::json;

use super::auth::authenticate;
use super::dispatch::{dispatch, with_faults};
use super::pod_proxy::{ProxyTarget, pod_proxy};
use super::state::AppState;
use super::target::not_found_path;
use crate::discovery;
use crate::error::ApiError;
use crate::faults::FaultRequest;

/// Builds the router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { axum::Json(discovery::version()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/_sim/faults", any(faults_endpoint))
        // An empty OpenAPI v2 document (valid empty protobuf): kubectl's client-side
        // validation then skips the types it cannot find, as for schemaless CRDs.
        // `/openapi/v3` is 404, which kubectl treats as "not served".
        .route(
            "/openapi/v2",
            get(|| async {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    )],
                    Vec::<u8>::new(),
                )
            }),
        )
        .route("/api", get(core_versions))
        .route(
            "/apis",
            get(|| async { axum::Json(discovery::group_list()) }),
        )
        .route("/api/{*rest}", any(core_api))
        .route("/apis/{*rest}", any(group_api))
        .fallback(|uri: Uri| async move {
            let msg = format!("the server could not find the requested resource ({uri})");
            let mut body = ApiError::BadRequest(msg).status();
            body["reason"] = json!("NotFound");
            body["code"] = json!(404);
            (
                StatusCode::NOT_FOUND,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
        })
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authenticate,
        ))
        .with_state(state)
}

async fn core_versions(State(st): State<AppState>) -> Response {
    axum::Json(discovery::core_versions(&st.address)).into_response()
}

async fn faults_endpoint(State(st): State<AppState>, method: Method, body: Bytes) -> Response {
    match method {
        Method::GET => axum::Json(st.faults.state()).into_response(),
        Method::DELETE => {
            st.faults.clear();
            axum::Json(st.faults.state()).into_response()
        }
        Method::POST => match serde_json::from_slice::<FaultRequest>(&body) {
            Ok(req) => {
                st.faults.apply(req);
                axum::Json(st.faults.state()).into_response()
            }
            Err(e) => ApiError::BadRequest(format!("invalid fault request: {e}")).into_response(),
        },
        _ => ApiError::MethodNotAllowed.into_response(),
    }
}

/// The path segments after `prefix`.
fn segments<'a>(uri: &'a Uri, prefix: &str) -> Vec<&'a str> {
    uri.path()
        .trim_start_matches(prefix)
        .split('/')
        .filter(|s| !s.is_empty())
        .collect()
}

async fn core_api(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match segments(&uri, "/api/").as_slice() {
        ["v1"] => {
            with_faults(&st, &uri, &headers, "get", async {
                resource_list("", "v1", &uri)
            })
            .await
        }
        ["v1", "namespaces", ns, "pods", name_port, "proxy", ..] => {
            let prefix = format!("/api/v1/namespaces/{ns}/pods/{name_port}/proxy");
            let path = uri.path().strip_prefix(&prefix).unwrap_or("/");
            let verb = if method == Method::GET {
                "get"
            } else {
                "create"
            };
            let t = ProxyTarget {
                ns,
                name_port,
                path,
                query: uri.query(),
            };
            with_faults(
                &st,
                &uri,
                &headers,
                verb,
                pod_proxy(&st, t, method.clone(), &headers, body),
            )
            .await
        }
        ["v1", rest @ ..] => {
            dispatch(st.clone(), "", "v1", rest, method, &uri, &headers, body).await
        }
        _ => not_found_path(&uri).into_response(),
    }
}

async fn group_api(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match segments(&uri, "/apis/").as_slice() {
        [group] => match discovery::group(group) {
            Some(doc) => axum::Json(doc).into_response(),
            None => not_found_path(&uri).into_response(),
        },
        [group, version] => {
            with_faults(&st, &uri, &headers, "get", async {
                resource_list(group, version, &uri)
            })
            .await
        }
        [group, version, rest @ ..] => {
            dispatch(
                st.clone(),
                group,
                version,
                rest,
                method,
                &uri,
                &headers,
                body,
            )
            .await
        }
        [] => axum::Json(discovery::group_list()).into_response(),
    }
}

fn resource_list(group: &str, version: &str, uri: &Uri) -> Result<Response, ApiError> {
    discovery::resource_list(group, version)
        .map(|d| axum::Json(d).into_response())
        .ok_or_else(|| not_found_path(uri))
}
