//! The HTTP front end: routes Kubernetes REST paths (`/api/...`, `/apis/...`) to the
//! store, streams watches and pod logs, serves discovery and the `/_sim/faults` admin
//! endpoint. Any bearer token is accepted (the emulator does no authn/authz).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::discovery;
use crate::error::ApiError;
use crate::faults::{FaultRequest, Faults};
use crate::logs::LogStore;
use crate::resources::{PODS, ResId, lookup, res};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, EventKind, PatchKind, Store, Sub, WatchEvent};

/// Shared state of the HTTP handlers.
#[derive(Clone, Debug)]
pub struct AppState {
    /// Object store.
    pub store: Arc<Store>,
    /// Fault injection.
    pub faults: Arc<Faults>,
    /// Pod logs.
    pub logs: Arc<LogStore>,
    /// Cancelled on shutdown (ends watches and log follows).
    pub shutdown: CancellationToken,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// `host:port` advertised in `/api`.
    pub address: String,
}

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

/// Parsed request target.
struct Target {
    rid: ResId,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn not_found_path(uri: &Uri) -> ApiError {
    ApiError::NotFound {
        resource: String::new(),
        group: String::new(),
        name: uri.path().to_owned(),
    }
}

fn parse_target(group: &str, version: &str, rest: &[&str], uri: &Uri) -> Result<Target, ApiError> {
    let (ns, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !matches!(*plural, "status" | "finalize") => (
            Some((*ns).to_owned()),
            *plural,
            tail.first().copied(),
            tail.get(1).copied(),
        ),
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(not_found_path(uri)),
    };
    let rid = lookup(group, version, plural).ok_or_else(|| not_found_path(uri))?;
    let r = res(rid);
    if ns.is_some() && !r.namespaced {
        return Err(not_found_path(uri));
    }
    Ok(Target {
        rid,
        ns,
        name: name.map(str::to_owned),
        sub: sub.map(str::to_owned),
    })
}

async fn core_api(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path()
        .trim_start_matches("/api/")
        .trim_end_matches('/')
        .to_owned();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["v1"] => with_faults(&st, &uri, "get", async { resource_list("", "v1", &uri) }).await,
        ["v1", rest @ ..] => {
            dispatch(st.clone(), "", "v1", rest, method, &uri, &headers, body).await
        }
        _ => ApiError::NotFound {
            resource: String::new(),
            group: String::new(),
            name: uri.path().to_owned(),
        }
        .into_response(),
    }
}

async fn group_api(
    State(st): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path()
        .trim_start_matches("/apis/")
        .trim_end_matches('/')
        .to_owned();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        [group] => match discovery::group(group) {
            Some(doc) => axum::Json(doc).into_response(),
            None => not_found_path(&uri).into_response(),
        },
        [group, version] => {
            with_faults(&st, &uri, "get", async {
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

async fn with_faults(
    st: &AppState,
    uri: &Uri,
    verb: &str,
    fut: impl std::future::Future<Output = Result<Response, ApiError>>,
) -> Response {
    let delay = st.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(err) = st.faults.check(uri.path(), verb) {
        return err.into_response();
    }
    fut.await.unwrap_or_else(IntoResponse::into_response)
}

fn query_map(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .map(|q| {
            q.split('&')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    let dec = |s: &str| {
                        percent_encoding::percent_decode_str(&s.replace('+', " "))
                            .decode_utf8_lossy()
                            .into_owned()
                    };
                    (dec(k), dec(v))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn verb_of(method: &Method, t: &Target, q: &HashMap<String, String>) -> &'static str {
    let watch = q.get("watch").is_some_and(|v| v == "true" || v == "1");
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

#[allow(clippy::too_many_arguments)]
async fn dispatch(
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
    with_faults(&st, uri, verb, async move {
        handle(st2, t, verb, q, headers, body).await
    })
    .await
}

async fn handle(
    st: AppState,
    t: Target,
    verb: &str,
    q: HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let r = res(t.rid);
    let ns = t.ns.clone().unwrap_or_default();
    let store = &st.store;
    let sub = match t.sub.as_deref() {
        None => Sub::Main,
        Some("status") if r.status_subresource => Sub::Status,
        Some("log" | "binding") if t.rid == PODS => Sub::Main,
        Some(other) => {
            return Err(ApiError::NotFound {
                resource: format!("{}/{other}", r.plural),
                group: r.group.into(),
                name: t.name.clone().unwrap_or_default(),
            });
        }
    };
    if r.namespaced && t.name.is_some() && t.ns.is_none() {
        return Err(ApiError::NotFound {
            resource: r.plural.into(),
            group: r.group.into(),
            name: t.name.clone().unwrap_or_default(),
        });
    }
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let fields = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""), r)
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    let name = t.name.clone().unwrap_or_default();
    match verb {
        "get" if t.sub.as_deref() == Some("log") => pod_log(&st, &ns, &name, &q).await,
        "get" => Ok(json_response(
            StatusCode::OK,
            &*store.get(t.rid, &ns, &name)?,
        )),
        "list" => {
            let limit = q
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .filter(|l| *l > 0);
            let page = store.list(
                t.rid,
                t.ns.as_deref(),
                &labels,
                &fields,
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
            let head =
                json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": meta});
            let mut out = head.to_string();
            out.pop();
            out.push_str(",\"items\":[");
            for (i, item) in page.items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&item.to_string());
            }
            out.push_str("]}");
            Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
        }
        "watch" => watch(&st, &t, labels, fields, &q),
        "create" if t.sub.as_deref() == Some("binding") => {
            let b = parse_body(&body)?;
            let node = b
                .pointer("/target/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if node.is_empty() {
                return Err(ApiError::Invalid {
                    kind: "Binding".into(),
                    group: String::new(),
                    name: name.clone(),
                    causes: vec![crate::error::Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: "target.name".into(),
                    }],
                });
            }
            store.bind(&ns, &name, node)?;
            Ok(json_response(
                StatusCode::CREATED,
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
            ))
        }
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
        "patch" => {
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
            let created = kind == PatchKind::Apply && store.get(t.rid, &ns, &name).is_err();
            let obj = store.patch(t.rid, &ns, &name, kind, &body, sub)?;
            Ok(json_response(
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                &obj,
            ))
        }
        "delete" => {
            let opts = delete_opts(&q, &body)?;
            Ok(json_response(
                StatusCode::OK,
                &*store.delete(t.rid, &ns, &name, &opts)?,
            ))
        }
        "deletecollection" => {
            let opts = delete_opts(&q, &body)?;
            let page = store.list(t.rid, t.ns.as_deref(), &labels, &fields, None, None)?;
            let mut items = Vec::new();
            for item in page.items {
                let m = &item["metadata"];
                let (ins, iname) = (
                    m["namespace"].as_str().unwrap_or(""),
                    m["name"].as_str().unwrap_or(""),
                );
                if let Ok(o) = store.delete(t.rid, ins, iname, &opts) {
                    items.push((*o).clone());
                }
            }
            Ok(json_response(
                StatusCode::OK,
                &json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": {"resourceVersion": store.current_rv().to_string()}, "items": items}),
            ))
        }
        _ => Err(ApiError::MethodNotAllowed),
    }
}

fn delete_opts(q: &HashMap<String, String>, body: &Bytes) -> Result<DeleteOpts, ApiError> {
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

async fn pod_log(
    st: &AppState,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let pod = st.store.get(PODS, ns, name)?;
    let names = |list: &str| -> Vec<String> {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let containers = names("containers");
    let init = names("initContainers");
    let container = match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(c) || init.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::BadRequest(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    let tail = q.get("tailLines").and_then(|t| t.parse::<usize>().ok());
    let follow = q.get("follow").is_some_and(|f| f == "true" || f == "1");
    if st.logs.is_closed(ns, name, &container).is_none() {
        return Err(ApiError::BadRequest(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
        )));
    }
    let text = [(header::CONTENT_TYPE, "text/plain")];
    if !follow {
        let data = st
            .logs
            .read(ns, name, &container, tail)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        return Ok((text, data).into_response());
    }
    let shutdown = st.shutdown.clone();
    let stream = st
        .logs
        .follow(ns, name, &container, tail)
        .take_until(async move { shutdown.cancelled().await });
    Ok((text, Body::from_stream(stream.map(Ok::<_, Infallible>))).into_response())
}

fn watch_line(kind: &str, obj: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": obj}).to_string();
    s.push('\n');
    Bytes::from(s)
}

fn classify(
    ev: &WatchEvent,
    rid: ResId,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Option<&'static str> {
    if ev.res != rid {
        return None;
    }
    if let Some(n) = ns
        && ev.object["metadata"]["namespace"].as_str().unwrap_or("") != n
    {
        return None;
    }
    let m = |o: &Value| labels.matches(o) && fields.matches(o);
    let now = m(&ev.object);
    match ev.kind {
        EventKind::Added => now.then_some("ADDED"),
        EventKind::Deleted => now.then_some("DELETED"),
        EventKind::Modified => {
            let before = ev.old.as_deref().is_some_and(m);
            match (before, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }
}

fn watch(
    st: &AppState,
    t: &Target,
    labels: LabelSelector,
    fields: FieldSelector,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let rid = t.rid;
    let r = res(rid);
    let rv = match q.get("resourceVersion").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("invalid resource version: {s}")))?,
        ),
    };
    let bookmarks = q
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true" || v == "1");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let ns = t.ns.clone();
    let store = st.store.clone();
    let shutdown = st.shutdown.clone();
    let mut drop_signal = st.faults.drop_signal();
    let bookmark_every = st.bookmark_interval;
    let start = store.watch(rid, ns.as_deref(), rv);
    tokio::spawn(async move {
        let start = match start {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Ok(watch_line("ERROR", &e.status()))).await;
                return;
            }
        };
        let mut last = start.start_rv;
        for ev in &start.replay {
            if let Some(kind) = classify(ev, rid, ns.as_deref(), &labels, &fields)
                && tx.send(Ok(watch_line(kind, &ev.object))).await.is_err()
            {
                return;
            }
        }
        let mut live = start.rx;
        let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(3600 * 24 * 365)));
        tokio::pin!(deadline);
        let mut ticker = tokio::time::interval(bookmark_every);
        ticker.tick().await;
        drop_signal.mark_unchanged();
        loop {
            let ev = tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = &mut deadline => return,
                _ = drop_signal.changed() => return,
                _ = ticker.tick(), if bookmarks => {
                    let rv_now = store.current_rv();
                    // Everything up to rv_now is already queued in `live`: drain it first.
                    loop {
                        match live.try_recv() {
                            Ok(ev) => {
                                if !send_event(&tx, &ev, &mut last, rid, ns.as_deref(), &labels, &fields).await {
                                    return;
                                }
                            }
                            Err(broadcast::error::TryRecvError::Lagged(_)) => {
                                if !catch_up(&store, &tx, &mut last, rid, ns.as_deref(), &labels, &fields).await {
                                    return;
                                }
                            }
                            Err(_) => break,
                        }
                    }
                    last = last.max(rv_now);
                    let bm = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": {"resourceVersion": last.to_string()}});
                    if tx.send(Ok(watch_line("BOOKMARK", &bm))).await.is_err() {
                        return;
                    }
                    continue;
                }
                ev = live.recv() => ev,
            };
            match ev {
                Ok(ev) => {
                    if !send_event(&tx, &ev, &mut last, rid, ns.as_deref(), &labels, &fields).await
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if !catch_up(&store, &tx, &mut last, rid, ns.as_deref(), &labels, &fields).await
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok((
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response())
}

async fn send_event(
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    ev: &WatchEvent,
    last: &mut u64,
    rid: ResId,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    if ev.rv <= *last {
        return true;
    }
    *last = ev.rv;
    match classify(ev, rid, ns, labels, fields) {
        Some(kind) => tx.send(Ok(watch_line(kind, &ev.object))).await.is_ok(),
        None => true,
    }
}

/// After the broadcast channel overflowed: replay from the store's history, or end
/// the watch with a 410 ERROR event if the history no longer covers it.
async fn catch_up(
    store: &Store,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    last: &mut u64,
    rid: ResId,
    ns: Option<&str>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    match store.history_since(*last) {
        Ok(events) => {
            for ev in events {
                if !send_event(tx, &ev, last, rid, ns, labels, fields).await {
                    return false;
                }
            }
            true
        }
        Err(e) => {
            let _ = tx.send(Ok(watch_line("ERROR", &e.status()))).await;
            false
        }
    }
}
