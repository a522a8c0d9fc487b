//! Event writers. The KubeRay controllers and the scheduler write `events.k8s.io/v1`
//! Events (`reportingController` `rayjob-controller`, `raycluster-controller`,
//! `default-scheduler`, `job-controller`); the kubelet writes core/v1 Events with
//! `source.component=kubelet`, like the real kubelet's legacy recorder. A failure to
//! write an event is logged and otherwise ignored, as client-go's recorders do.

use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

fn event_name(regarding: &ObjectReference) -> String {
    let now = Timestamp::now().as_nanosecond();
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}.{:x}",
        regarding.name.as_deref().unwrap_or("event"),
        now as u128 + u128::from(seq)
    )
}

/// Writes an `events.k8s.io/v1` Event about `regarding`.
pub async fn emit(
    client: &kube::Client,
    controller: &str,
    regarding: &ObjectReference,
    kind: Kind,
    reason: &str,
    action: &str,
    note: &str,
) {
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(event_name(regarding)),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        action: Some(action.into()),
        reason: Some(reason.into()),
        note: Some(note.chars().take(1024).collect()),
        type_: Some(kind.as_str().into()),
        event_time: Some(MicroTime(Timestamp::now())),
        regarding: Some(regarding.clone()),
        reporting_controller: Some(controller.into()),
        reporting_instance: Some(format!("{controller}-kubesim")),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        tracing::warn!(error = %e, reason, "could not write event");
    }
}

/// Writes a core/v1 Event about `involved` from `component` on `host` (kubelet style).
pub async fn emit_core(
    client: &kube::Client,
    component: &str,
    host: Option<&str>,
    involved: &ObjectReference,
    kind: Kind,
    reason: &str,
    message: &str,
) {
    let ns = involved
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let now = Timestamp::now();
    let ev = CoreEvent {
        metadata: ObjectMeta {
            name: Some(event_name(involved)),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: involved.clone(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(kind.as_str().into()),
        count: Some(1),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        source: Some(EventSource {
            component: Some(component.into()),
            host: host.map(str::to_owned),
        }),
        reporting_component: Some(component.into()),
        reporting_instance: host.map(str::to_owned),
        ..Default::default()
    };
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), &ns);
    if let Err(e) = api.create(&PostParams::default(), &ev).await {
        tracing::warn!(error = %e, reason, "could not write event");
    }
}
