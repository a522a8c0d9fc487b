//! The answers every operation of the OpenAPI document shares, added in one pass over
//! the document instead of by hand on each operation (where they were forgotten):
//!
//! - `401 unauthenticated` on every operation that requires the bearer token (the
//!   [`crate::auth::Caller`] extractor answers it before the handler runs);
//! - `400 invalid-query` on every operation with query parameters
//!   (`http::query::Query`);
//! - `400` (a malformed body) and `413 body-too-large` on every operation with a
//!   request body (`http::body_limit`);
//! - `408 request-timeout` on every operation whose route is of the document class
//!   (`http::route_class`).
//!
//! An operation's own description of a status is kept; the pass only adds what is
//! missing. Every error answer has the `Error` schema.

use serde_json::{Value, json};

use crate::http::{ROUTES, RouteClass};

fn error(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

/// Whether the operation requires the bearer token (the document's default, unless
/// it lists `security: []` or allows anonymous access with `{}`).
fn authenticated(op: &Value) -> bool {
    match op.get("security").and_then(Value::as_array) {
        None => true,
        Some(options) => {
            !options.is_empty()
                && !options
                    .iter()
                    .any(|o| o.as_object().is_some_and(serde_json::Map::is_empty))
        }
    }
}

fn has_query(item: &Value, op: &Value) -> bool {
    [item, op].iter().any(|v| {
        v.get("parameters")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query"))
    })
}

/// Whether the document deadline bounds the operation's total time (its route's class).
fn has_deadline(method: &str, path: &str) -> bool {
    ROUTES
        .iter()
        .find(|r| r.method == method && r.path == path)
        .is_some_and(|r| r.class == RouteClass::Document)
}

/// Adds the shared answers to every operation of `doc`.
pub(super) fn complete(doc: &mut Value) {
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let item_copy = item.clone();
        let Some(ops) = item.as_object_mut() else {
            continue;
        };
        for (method, op) in ops.iter_mut().filter(|(k, _)| *k != "parameters") {
            let mut add = Vec::new();
            if authenticated(op) {
                add.push(("401", "unauthenticated: no bearer token, or an unknown one"));
            }
            if has_query(&item_copy, op) {
                add.push((
                    "400",
                    "invalid-query: a query parameter is unknown or malformed",
                ));
            }
            if op.get("requestBody").is_some() {
                add.push((
                    "400",
                    "the body is malformed (not the documented media type or shape)",
                ));
                add.push(("413", "body-too-large: over FORGE_MAX_DOCUMENT_KIB (documents) or FORGE_MAX_BODY_MIB (archives, chunks, plugins)"));
            }
            if has_deadline(method, path) {
                add.push(("408", "request-timeout: not answered within 60 s"));
            }
            let Some(responses) = op["responses"].as_object_mut() else {
                continue;
            };
            for (status, description) in add {
                responses
                    .entry(status)
                    .or_insert_with(|| error(description));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_what_is_missing_and_keeps_what_is_there() {
        let mut doc = json!({"paths": {
            "/v1/policy": {
                "get": {"parameters": [{"name": "q", "in": "query"}], "responses": {"200": {"description": "ok"}}},
                "put": {"requestBody": {}, "responses": {"400": {"description": "mine"}}}
            },
            "/livez": {"get": {"security": [], "responses": {"200": {"description": "ok"}}}},
            "/metrics": {"get": {"security": [{}, {"bearer": []}], "responses": {}}},
            "/v1/plugins": {"post": {"requestBody": {}, "responses": {}}}
        }});
        complete(&mut doc);
        let p = &doc["paths"];
        assert!(p["/v1/policy"]["get"]["responses"]["401"].is_object());
        assert!(p["/v1/policy"]["get"]["responses"]["400"].is_object());
        assert!(p["/v1/policy"]["get"]["responses"]["408"].is_object());
        assert!(p["/v1/policy"]["get"]["responses"]["413"].is_null());
        assert_eq!(
            p["/v1/policy"]["put"]["responses"]["400"]["description"],
            "mine"
        );
        assert!(p["/v1/policy"]["put"]["responses"]["413"].is_object());
        assert!(p["/livez"]["get"]["responses"]["401"].is_null());
        assert!(p["/metrics"]["get"]["responses"]["401"].is_null());
        assert!(
            p["/v1/plugins"]["post"]["responses"]["408"].is_null(),
            "bulk: no total deadline"
        );
        assert!(p["/v1/plugins"]["post"]["responses"]["413"].is_object());
    }
}
