//! The Kubernetes events about a set of objects, from both event APIs
//! (`events.k8s.io/v1` and core/v1, which a real API server serves for the same events
//! under the same uid, while some writers use only one), deduplicated by (object, type,
//! reason, message) with their counts summed (the kubelet repeats back-off events),
//! newest first. Each object's events are listed with a field selector on it: a
//! namespace full of other events costs nothing here.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};

use super::api_error::with_retry;

/// One deduplicated event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectEvent {
    /// Kind of the object (`Pod`, `RayJob`, …).
    pub kind: String,
    /// Its name.
    pub object: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: String,
    pub message: String,
    /// How many times it was reported.
    pub count: i32,
    /// RFC 3339 time it was last seen, if known.
    pub last_seen: Option<String>,
}

/// How many objects' events are fetched at once.
const PARALLEL: usize = 8;

/// The events of the `(kind, name)` objects in `namespace`: for each object, the lists
/// of both APIs narrowed by a field selector on the object, so the cost follows the
/// job's own events, never the namespace's.
pub async fn events_of(
    client: &Client,
    namespace: &str,
    objects: &[(String, String)],
) -> Result<Vec<ObjectEvent>, kube::Error> {
    let events_api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let per_object = futures::stream::iter(objects.to_vec())
        .map(|(kind, name)| {
            let (events_api, core_api) = (events_api.clone(), core_api.clone());
            async move {
                let new = ListParams::default()
                    .fields(&format!("regarding.kind={kind},regarding.name={name}"));
                let core = ListParams::default().fields(&format!(
                    "involvedObject.kind={kind},involvedObject.name={name}"
                ));
                let new = with_retry(|| events_api.list(&new)).await?;
                let core = with_retry(|| core_api.list(&core)).await?;
                Ok::<_, kube::Error>((new.items, core.items))
            }
        })
        .buffer_unordered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    let mut by_uid: BTreeMap<String, ObjectEvent> = BTreeMap::new();
    let mut core_events = Vec::new();
    for listed in per_object {
        let (new, core) = listed?;
        for e in new {
            if let Some(ev) = from_new(&e) {
                by_uid.insert(e.metadata.uid.clone().unwrap_or_else(|| e.name_any()), ev);
            }
        }
        core_events.extend(core);
    }
    // An event served by both APIs (one uid) is kept once, as events.k8s.io has it.
    for e in core_events {
        if let Some(ev) = from_core(&e) {
            by_uid
                .entry(e.metadata.uid.clone().unwrap_or_else(|| e.name_any()))
                .or_insert(ev);
        }
    }
    Ok(merge(by_uid.into_values()))
}

/// An `events.k8s.io/v1` event about a named object.
fn from_new(e: &Event) -> Option<ObjectEvent> {
    let r = e.regarding.as_ref()?;
    let (kind, name) = (r.kind.as_ref()?, r.name.as_ref()?);
    Some(ObjectEvent {
        kind: kind.clone(),
        object: name.clone(),
        type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.note.clone().unwrap_or_default(),
        count: e
            .series
            .as_ref()
            .map(|s| s.count)
            .or(e.deprecated_count)
            .unwrap_or(1)
            .max(1),
        last_seen: e
            .series
            .as_ref()
            .map(|s| s.last_observed_time.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
            .or_else(|| {
                e.deprecated_last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
            }),
    })
}

/// A core/v1 event about a named object.
fn from_core(e: &CoreEvent) -> Option<ObjectEvent> {
    let r = &e.involved_object;
    let (kind, name) = (r.kind.as_ref()?, r.name.as_ref()?);
    Some(ObjectEvent {
        kind: kind.clone(),
        object: name.clone(),
        type_: e.type_.clone().unwrap_or_else(|| "Normal".into()),
        reason: e.reason.clone().unwrap_or_default(),
        message: e.message.clone().unwrap_or_default(),
        count: e.count.unwrap_or(1).max(1),
        last_seen: e
            .last_timestamp
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string())),
    })
}

/// Events that say the same about the same object, as one with the counts summed,
/// newest first.
fn merge(events: impl Iterator<Item = ObjectEvent>) -> Vec<ObjectEvent> {
    let mut merged: BTreeMap<(String, String, String, String, String), ObjectEvent> =
        BTreeMap::new();
    for ev in events {
        let key = (
            ev.kind.clone(),
            ev.object.clone(),
            ev.type_.clone(),
            ev.reason.clone(),
            ev.message.clone(),
        );
        merged
            .entry(key)
            .and_modify(|m| {
                m.count += ev.count;
                if ev.last_seen > m.last_seen {
                    m.last_seen = ev.last_seen.clone();
                }
            })
            .or_insert(ev);
    }
    let mut events: Vec<ObjectEvent> = merged.into_values().collect();
    events.sort_by(|a, b| b.last_seen.cmp(&a.last_seen));
    events
}
