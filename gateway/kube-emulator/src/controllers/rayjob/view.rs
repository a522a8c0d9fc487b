//! What one RayJob reconcile knows about its RayJob — the live object, its spec and
//! status, its API — and how it acts on it: events from `rayjob-controller`, status
//! merge patches, the controller owner reference its children carry, and the
//! `activeDeadlineSeconds` / `preRunningDeadlineSeconds` checks.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::DynamicObject;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::controllers::error::ControllerError;
use crate::controllers::events::{Kind, emit};
use crate::controllers::shared::{Shared, raycluster_resource, rayjob_resource};
use crate::controllers::status::merge_status;

const REPORTER: &str = "rayjob-controller";
/// KubeRay's RayJob requeue period.
pub(super) const REQUEUE: Duration = Duration::from_secs(3);

/// A `metav1.Time` field, parsed.
pub(super) fn parse_time(v: Option<&Value>) -> Option<Timestamp> {
    v?.as_str()?.parse().ok()
}

/// The string at `ptr` in `v` (`""` when absent).
pub(super) fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// Everything one reconcile needs about its RayJob.
pub(super) struct View<'a> {
    pub(super) ctx: &'a Shared,
    pub(super) rj: &'a DynamicObject,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) spec: Value,
    pub(super) status: Value,
    pub(super) api: Api<DynamicObject>,
}

impl View<'_> {
    fn reference(&self) -> k8s_openapi::api::core::v1::ObjectReference {
        self.rj.object_ref(&rayjob_resource())
    }

    /// An `events.k8s.io/v1` Event about the RayJob.
    pub(super) async fn event(&self, kind: Kind, reason: &str, action: &str, note: &str) {
        emit(
            &self.ctx.client,
            REPORTER,
            &self.reference(),
            kind,
            reason,
            action,
            note,
        )
        .await;
    }

    /// Merges `patch` into the RayJob's status.
    pub(super) async fn patch_status(&self, patch: Value) -> Result<(), ControllerError> {
        merge_status(&self.api, &self.name, &patch).await?;
        Ok(())
    }

    /// The RayClusters of the RayJob's namespace.
    pub(super) fn clusters(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.client.clone(), &self.ns, &raycluster_resource())
    }

    /// The batch/v1 Jobs of the RayJob's namespace.
    pub(super) fn jobs(&self) -> Api<Job> {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    /// `status.rayClusterName`.
    pub(super) fn cluster(&self) -> &str {
        s(&self.status, "/rayClusterName")
    }

    /// The controller owner reference of the RayJob's children.
    pub(super) fn owner_ref(&self) -> Value {
        json!({"apiVersion": "ray.io/v1", "kind": "RayJob", "name": self.name,
               "uid": self.rj.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true})
    }

    pub(super) fn i64_spec(&self, key: &str) -> Option<i64> {
        self.spec.get(key).and_then(Value::as_i64)
    }

    pub(super) fn bool_spec(&self, key: &str) -> bool {
        self.spec.get(key).and_then(Value::as_bool).unwrap_or(false)
    }

    /// `spec.submissionMode` (defaulted to `K8sJobMode`).
    pub(super) fn mode(&self) -> &str {
        self.spec
            .get("submissionMode")
            .and_then(Value::as_str)
            .unwrap_or("K8sJobMode")
    }

    /// Deadline checks shared by Initializing and Running; returns the failure patch.
    pub(super) fn deadline(&self, pre_running: bool) -> Option<(String, String)> {
        let start = parse_time(self.status.get("startTime"))?;
        let now = Timestamp::now();
        if let Some(ads) = self.i64_spec("activeDeadlineSeconds")
            && now >= start + SignedDuration::from_secs(ads)
        {
            return Some((
                "DeadlineExceeded".into(),
                format!(
                    "The RayJob has passed the activeDeadlineSeconds. StartTime: {}. ActiveDeadlineSeconds: {ads}",
                    s(&self.status, "/startTime")
                ),
            ));
        }
        if pre_running
            && self.ctx.cfg.pre_running_deadline
            && let Some(p) = self.i64_spec("preRunningDeadlineSeconds")
            && now >= start + SignedDuration::from_secs(p)
        {
            return Some((
                "PreRunningDeadlineExceeded".into(),
                format!(
                    "The RayJob has passed the preRunningDeadlineSeconds. StartTime: {}. PreRunningDeadlineSeconds: {p}",
                    s(&self.status, "/startTime")
                ),
            ));
        }
        None
    }
}
