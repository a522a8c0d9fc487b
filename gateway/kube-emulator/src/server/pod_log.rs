//! `GET pods/{name}/log`: picks the container (required for multi-container pods),
//! answers 400 while it has not started, honours `tailLines` and `previous` (the last
//! terminated instance, 400 `previous terminated container … not found` when the
//! status has none, as the kubelet answers), and with `follow` streams until the
//! kubelet closes the log (or the server shuts down).

use std::convert::Infallible;

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

use super::state::AppState;
use super::target::{Query, flag};
use crate::error::ApiError;
use crate::resources::PODS;

/// Serves the log of one container of pod `ns/name`.
pub(super) async fn pod_log(
    st: &AppState,
    ns: &str,
    name: &str,
    q: &Query,
) -> Result<Response, ApiError> {
    let pod = st.store.get(PODS, ns, name)?;
    let container = pick_container(&pod, name, q)?;
    let tail = q.get("tailLines").and_then(|t| t.parse::<usize>().ok());
    let follow = flag(q, "follow");
    if flag(q, "previous") {
        let data = st
            .logs
            .read_previous(
                ns,
                name,
                &container,
                last_terminated(&pod, &container),
                tail,
            )
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        return Ok(([(header::CONTENT_TYPE, "text/plain")], data).into_response());
    }
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

/// The `container` parameter if the pod has it, else the only app container.
fn pick_container(pod: &Value, name: &str, q: &Query) -> Result<String, ApiError> {
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
    match q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(c) || init.contains(c) => Ok(c.clone()),
        Some(c) => Err(ApiError::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None if containers.len() == 1 => Ok(containers[0].clone()),
        None => Err(ApiError::BadRequest(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            containers.join(" ")
        ))),
    }
}

/// Whether the pod status reports a terminated instance of `container` before the
/// current one (`lastState.terminated`).
fn last_terminated(pod: &Value, container: &str) -> bool {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .filter_map(|list| pod.pointer(&format!("/status/{list}"))?.as_array())
        .flatten()
        .filter(|c| c["name"].as_str() == Some(container))
        .any(|c| {
            c.pointer("/lastState/terminated")
                .is_some_and(Value::is_object)
        })
}
