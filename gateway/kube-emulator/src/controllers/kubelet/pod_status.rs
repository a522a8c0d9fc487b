//! The pod status a kubelet worker maintains: phase, the conditions
//! (PodReadyToStartContainers, Initialized, Ready, ContainersReady, PodScheduled),
//! pod and host IPs and the container statuses, rendered as the `status` the worker
//! writes through `pods/status`.

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;
use serde_json::{Value, json};

use crate::controllers::status::now;

/// `docker.io/library/x:latest` form of an image reference.
pub fn normalize_image(image: &str) -> String {
    let (name, tagged) = match image.rsplit_once('/') {
        Some((_, last)) => (image.to_owned(), last.contains(':') || last.contains('@')),
        None => (image.to_owned(), image.contains(':') || image.contains('@')),
    };
    let first = name.split('/').next().unwrap_or("");
    let with_registry = if !name.contains('/') {
        format!("docker.io/library/{name}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        name
    } else {
        format!("docker.io/{name}")
    };
    if tagged {
        with_registry
    } else {
        format!("{with_registry}:latest")
    }
}

/// A random 64-hex-digit container id.
pub(super) fn container_id() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..64)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
        .collect()
}

/// Container status bookkeeping.
#[derive(Clone, Debug)]
pub(super) struct CStatus {
    pub(super) name: String,
    image: String,
    pub(super) state: Value,
    pub(super) last_state: Value,
    pub(super) ready: bool,
    pub(super) started: bool,
    pub(super) restarts: i64,
    pub(super) id: String,
}

impl CStatus {
    fn new(c: &Container, waiting_reason: &str) -> Self {
        Self {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            state: json!({"waiting": {"reason": waiting_reason}}),
            last_state: json!({}),
            ready: false,
            started: false,
            restarts: 0,
            id: String::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name, "image": self.image, "imageID": "",
            "state": self.state, "lastState": self.last_state, "ready": self.ready,
            "started": self.started, "restartCount": self.restarts,
        });
        if !self.id.is_empty() {
            v["containerID"] = json!(format!("containerd://{}", self.id));
            v["imageID"] = json!(format!(
                "{}@sha256:{}",
                normalize_image(&self.image),
                "0".repeat(64)
            ));
        }
        v
    }

    /// Starts the container: a fresh id, `running` since now.
    pub(super) fn start(&mut self) {
        self.id = container_id();
        self.state = json!({"running": {"startedAt": now()}});
        self.started = true;
    }

    /// The `terminated` state after a run that started at `started_at`.
    pub(super) fn terminated(&self, code: i32, started_at: &Value) -> Value {
        let reason = if code == 0 { "Completed" } else { "Error" };
        json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started_at,
            "finishedAt": now(), "containerID": format!("containerd://{}", self.id)}})
    }

    /// When the running container started (now if it is not running).
    pub(super) fn started_at(&self) -> Value {
        self.state
            .pointer("/running/startedAt")
            .cloned()
            .unwrap_or_else(|| json!(now()))
    }
}

/// Which container a status update is about.
#[derive(Clone, Copy, Debug)]
pub(super) enum Slot {
    /// `spec.initContainers[i]`.
    Init(usize),
    /// `spec.containers[i]`.
    Main(usize),
}

/// Mutable pod status.
pub(super) struct PodStatus {
    pub(super) phase: &'static str,
    pub(super) init: Vec<CStatus>,
    pub(super) main: Vec<CStatus>,
    pub(super) initialized: bool,
    pub(super) ready: bool,
    pub(super) completed: bool,
    pub(super) pod_ip: String,
    pub(super) host_ip: String,
    start_time: String,
    scheduled_at: String,
}

impl PodStatus {
    /// The status of a pod just admitted on `node`: Pending, containers waiting.
    pub(super) fn admitted(pod: &Pod, node: &str) -> Self {
        let spec = pod.spec.clone().unwrap_or_default();
        let init_cs = spec.init_containers.unwrap_or_default();
        let main_waiting = if init_cs.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let scheduled_at = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map_or_else(now, |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        let h = pod
            .uid()
            .unwrap_or_default()
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        Self {
            phase: "Pending",
            init: init_cs
                .iter()
                .map(|c| CStatus::new(c, "PodInitializing"))
                .collect(),
            main: spec
                .containers
                .iter()
                .map(|c| CStatus::new(c, main_waiting))
                .collect(),
            initialized: init_cs.is_empty(),
            ready: false,
            completed: false,
            pod_ip: format!(
                "10.{}.{}.{}",
                64 + (h >> 16) % 64,
                (h >> 8) % 256,
                h % 254 + 1
            ),
            host_ip: format!(
                "192.168.{}.{}",
                (node.len() * 7) % 256,
                node.bytes().map(u32::from).sum::<u32>() % 254 + 1
            ),
            start_time: now(),
            scheduled_at,
        }
    }

    /// The container in `slot`.
    pub(super) fn container(&mut self, slot: Slot) -> &mut CStatus {
        match slot {
            Slot::Init(i) => &mut self.init[i],
            Slot::Main(i) => &mut self.main[i],
        }
    }

    /// The pod's `status` object.
    pub(super) fn to_json(&self) -> Value {
        let cond = |t: &str, ok: bool, reason: Option<&str>| {
            let mut c = json!({"type": t, "status": if ok { "True" } else { "False" }, "lastProbeTime": null,
                               "lastTransitionTime": now()});
            if let Some(r) = reason {
                c["reason"] = json!(r);
            }
            c
        };
        let not_ready_reason = if self.completed {
            Some("PodCompleted")
        } else {
            Some("ContainersNotReady")
        };
        let init_reason = if self.completed {
            Some("PodCompleted")
        } else {
            Some("ContainersNotInitialized")
        };
        json!({
            "phase": self.phase,
            "hostIP": self.host_ip, "hostIPs": [{"ip": self.host_ip}],
            "podIP": self.pod_ip, "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "qosClass": "Burstable",
            "conditions": [
                cond("PodReadyToStartContainers", !self.completed, None),
                cond("Initialized", self.initialized, if self.initialized { None } else { init_reason }),
                cond("Ready", self.ready, if self.ready { None } else { not_ready_reason }),
                cond("ContainersReady", self.ready, if self.ready { None } else { not_ready_reason }),
                {"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": self.scheduled_at},
            ],
            "initContainerStatuses": self.init.iter().map(CStatus::to_json).collect::<Vec<_>>(),
            "containerStatuses": self.main.iter().map(CStatus::to_json).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_normalize_like_containerd() {
        assert_eq!(
            normalize_image("busybox"),
            "docker.io/library/busybox:latest"
        );
        assert_eq!(
            normalize_image("rayproject/ray:2.46.0"),
            "docker.io/rayproject/ray:2.46.0"
        );
        assert_eq!(normalize_image("ghcr.io/x/y"), "ghcr.io/x/y:latest");
        assert_eq!(normalize_image("localhost:5000/y:1"), "localhost:5000/y:1");
    }
}
