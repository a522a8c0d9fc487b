//! The verbs on a parsed target, against the store: get and list (whole objects, or
//! metadata only when asked: `metadata_only.rs`; a list streamed into one
//! JSON body), watch, create (and pod binding), update, patch (by content type),
//! delete and deletecollection (with propagation policy and preconditions), and the
//! pod log subresource.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::metadata_only;
use super::pod_log::pod_log;
use super::state::AppState;
use super::target::{Query, Target};
use super::watch::watch;
use crate::error::{ApiError, Cause};
use crate::resources::{PODS, Resource, res};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, PatchKind, Store, Sub};

/// Runs `verb` on `t`.
pub(super) async fn handle(
    st: AppState,
    t: Target,
    verb: &str,
    q: Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let r = res(t.rid);
    let ns = t.ns.clone().unwrap_or_default();
    let store = &st.store;
    let sub = subresource(r, &t)?;
    if r.namespaced && t.name.is_some() && t.ns.is_none() {
        return Err(r.not_found(t.name.as_deref().unwrap_or_default()));
    }
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), r)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let name = t.name.clone().unwrap_or_default();
    match verb {
        "get" if t.sub.as_deref() == Some("log") => pod_log(&st, &ns, &name, &q).await,
        "get" => {
            let obj = store.get(t.rid, &ns, &name)?;
            if metadata_only::asked(headers, "PartialObjectMetadata") {
                return Ok(json_response(StatusCode::OK, &metadata_only::object(&obj)));
            }
            Ok(json_response(StatusCode::OK, &obj))
        }
        "list" => {
            let meta_only = metadata_only::asked(headers, "PartialObjectMetadataList");
            list(store, r, &t, &labels, &fields, &q, meta_only)
        }
        "watch" => watch(&st, &t, labels, fields, &q),
        "create" if t.sub.as_deref() == Some("binding") => bind(store, &ns, &name, &body),
        "create" if t.name.is_some() => Err(ApiError::MethodNotAllowed),
        "create" => {
            let obj = parse_body(&body)?;
            Ok(json_response(
                StatusCode::CREATED,
                &*store.create(t.rid, &ns, obj)?,
            ))
        }
        "update" => {
            let obj = parse_body(&body)?;
            Ok(json_response(
                StatusCode::OK,
                &*store.update(t.rid, &ns, &name, obj, sub)?,
            ))
        }
        "patch" => patch(store, &t, &ns, &name, sub, headers, &body),
        "delete" => {
            let opts = delete_opts(&q, &body)?;
            Ok(json_response(
                StatusCode::OK,
                &*store.delete(t.rid, &ns, &name, &opts)?,
            ))
        }
        "deletecollection" => {
            let opts = delete_opts(&q, &body)?;
            delete_collection(store, r, &t, &labels, &fields, &opts)
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

/// Which part of the object the request addresses (404 for an unknown subresource).
fn subresource(r: &Resource, t: &Target) -> Result<Sub, ApiError> {
    match t.sub.as_deref() {
        None => Ok(Sub::Main),
        Some("status") if r.status_subresource => Ok(Sub::Status),
        Some("log" | "binding") if t.rid == PODS => Ok(Sub::Main),
        Some(other) => Err(ApiError::NotFound {
            resource: format!("{}/{other}", r.plural),
            group: r.group.into(),
            name: t.name.clone().unwrap_or_default(),
        }),
    }
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn parse_body(body: &Bytes) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml::from_slice(body))
        .map_err(|e| {
            ApiError::BadRequest(format!("the body of the request could not be decoded: {e}"))
        })
}

/// One page of a list, written as a `<Kind>List` without cloning the items.
fn list(
    store: &Store,
    r: &Resource,
    t: &Target,
    labels: &LabelSelector,
    fields: &FieldSelector,
    q: &Query,
    metadata_only: bool,
) -> Result<Response, ApiError> {
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let page = store.list(
        t.rid,
        t.ns.as_deref(),
        labels,
        fields,
        limit,
        q.get("continue")
            .map(String::as_str)
            .filter(|c| !c.is_empty()),
    )?;
    let mut meta = json!({"resourceVersion": page.rv.to_string()});
    if let Some(c) = &page.continue_token {
        meta["continue"] = json!(c);
    }
    if let Some(n) = page.remaining {
        meta["remainingItemCount"] = json!(n);
    }
    let head = if metadata_only {
        json!({"kind": "PartialObjectMetadataList", "apiVersion": metadata_only::API_VERSION, "metadata": meta})
    } else {
        json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": meta})
    };
    let mut out = head.to_string();
    out.pop();
    out.push_str(",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if metadata_only {
            out.push_str(&metadata_only::object(item).to_string());
        } else {
            out.push_str(&item.to_string());
        }
    }
    out.push_str("]}");
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}

/// `POST pods/{name}/binding`.
fn bind(store: &Store, ns: &str, name: &str, body: &Bytes) -> Result<Response, ApiError> {
    let b = parse_body(body)?;
    let node = b
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::Invalid {
            kind: "Binding".into(),
            group: String::new(),
            name: name.to_owned(),
            causes: vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        });
    }
    store.bind(ns, name, node)?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// PATCH by content type; a server-side apply that creates the object is 201.
fn patch(
    store: &Store,
    t: &Target,
    ns: &str,
    name: &str,
    sub: Sub,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = match ct.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => PatchKind::Merge,
        "application/strategic-merge-patch+json" => PatchKind::Strategic,
        "application/json-patch+json" => PatchKind::Json,
        "application/apply-patch+yaml" | "application/apply-patch+json" => PatchKind::Apply,
        _ => return Err(ApiError::UnsupportedMediaType),
    };
    let created = kind == PatchKind::Apply && store.get(t.rid, ns, name).is_err();
    let obj = store.patch(t.rid, ns, name, kind, body, sub)?;
    Ok(json_response(
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        &obj,
    ))
}

/// Deletes every object the selectors match; answers the list of what was deleted.
fn delete_collection(
    store: &Store,
    r: &Resource,
    t: &Target,
    labels: &LabelSelector,
    fields: &FieldSelector,
    opts: &DeleteOpts,
) -> Result<Response, ApiError> {
    let page = store.list(t.rid, t.ns.as_deref(), labels, fields, None, None)?;
    let mut items = Vec::new();
    for item in page.items {
        let m = &item["metadata"];
        let (ins, iname) = (
            m["namespace"].as_str().unwrap_or(""),
            m["name"].as_str().unwrap_or(""),
        );
        if let Ok(o) = store.delete(t.rid, ins, iname, opts) {
            items.push((*o).clone());
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": {"resourceVersion": store.current_rv().to_string()}, "items": items}),
    ))
}

fn delete_opts(q: &Query, body: &Bytes) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    let s = |v: &Value| v.as_str().map(str::to_owned);
    Ok(DeleteOpts {
        propagation: q
            .get("propagationPolicy")
            .cloned()
            .or_else(|| s(&b["propagationPolicy"])),
        orphan_dependents: q
            .get("orphanDependents")
            .map(|v| v == "true")
            .or_else(|| b["orphanDependents"].as_bool()),
        uid: s(&b["preconditions"]["uid"]),
        resource_version: s(&b["preconditions"]["resourceVersion"]),
    })
}
