//! One resource request: parse its target, name its verb (`get`, `list`, `watch`,
//! `create`, ...), apply fault injection (delay, any hold, then any matching failure
//! rule), run the verb, and lose its answer (or crash the server) if a rule says so.

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};

use super::state::AppState;
use super::target::{Query, Target, flag, parse_target, query_map};
use super::verbs::handle;
use crate::error::ApiError;
use crate::faults::Request;

/// Runs `fut` after the injected delay and any hold, unless a fault rule fails the
/// request first; a lose-answer rule then replaces what it answered.
pub(super) async fn with_faults(
    st: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    verb: &str,
    fut: impl std::future::Future<Output = Result<Response, ApiError>>,
) -> Response {
    let delay = st.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let req = Request {
        path: uri.path(),
        query: uri.query().unwrap_or(""),
        verb,
        user_agent: headers
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    };
    st.faults.wait_while_held(&req).await;
    if let Some(err) = st.faults.check(&req) {
        return err.into_response();
    }
    let served = fut.await.unwrap_or_else(IntoResponse::into_response);
    if st.faults.crashes_after(&req) {
        // Killed before answering: the server loop closes this connection with the
        // others; this answer is never sent.
        std::future::pending::<()>().await;
    }
    match st.faults.answer_lost(&req) {
        Some(err) => err.into_response(),
        None => served,
    }
}

fn verb_of(method: &Method, t: &Target, q: &Query) -> &'static str {
    let watch = flag(q, "watch");
    match (method.as_str(), t.name.is_some()) {
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

/// Serves one request to a resource path (`rest` after the group and version).
#[allow(clippy::too_many_arguments)]
pub(super) async fn dispatch(
    st: AppState,
    group: &str,
    version: &str,
    rest: &[&str],
    method: Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Response {
    let t = match parse_target(group, version, rest, uri) {
        Ok(t) => t,
        Err(e) => return e.into_response(),
    };
    let q = query_map(uri);
    let verb = verb_of(&method, &t, &q);
    let st2 = st.clone();
    with_faults(&st, uri, headers, verb, async move {
        handle(st2, t, verb, q, headers, body).await
    })
    .await
}
