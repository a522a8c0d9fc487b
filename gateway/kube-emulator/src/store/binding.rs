//! Pod binding (`pods/{name}/binding`), as the scheduler posts it: sets
//! `spec.nodeName` and the `PodScheduled` condition; a pod being deleted or already
//! bound is 409 Conflict.

use serde_json::{Value, json};

use super::event::EventKind;
use super::meta::{is_deleting, now_rfc3339};
use super::state::Store;
use crate::error::ApiError;
use crate::resources::{PODS, res};

impl Store {
    /// Binds a pod to a node (`pods/{name}/binding`), as the scheduler does.
    pub fn bind(&self, ns: &str, name: &str, node: &str) -> Result<(), ApiError> {
        let mut inner = self.lock();
        let r = res(PODS);
        let old = inner.stored(PODS, ns, name)?;
        if is_deleting(&old) {
            return Err(r.conflict(name, "pod is being deleted, cannot be assigned to a host"));
        }
        if let Some(n) = old
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(r.conflict(
                name,
                format!("pod {name} is already assigned to node \"{n}\""),
            ));
        }
        let mut pod = (*old).clone();
        pod["spec"]["nodeName"] = json!(node);
        let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()});
        let conds = &mut pod["status"]["conditions"];
        if !conds.is_array() {
            *conds = json!([]);
        }
        if let Some(a) = conds.as_array_mut() {
            a.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            a.push(cond);
        }
        self.commit(&mut inner, PODS, EventKind::Modified, pod, Some(old));
        Ok(())
    }
}
