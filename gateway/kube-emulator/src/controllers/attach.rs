//! The attach/detach controller's view of persistent volumes: which node each volume
//! is attached to and which pods there use it. A volume whose access modes allow no
//! sharing (`ReadWriteOnce`, `ReadWriteOncePod`) is attached to one node at a time; a
//! pod on another node gets the real `Multi-Attach error for volume "pvc-…" Volume is
//! already used by pod(s) …` (`FailedAttachVolume`, from `attachdetach-controller`)
//! and waits until the volume is detached — when the last pod using it on its node
//! finishes or is deleted. `ReadWriteMany` / `ReadOnlyMany` volumes attach anywhere.
//!
//! In a real cluster this is the controller's actual state of the world (and
//! `VolumeAttachment` objects, not emulated); the kubelet workers share it in process.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// A pod using a volume: uid, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// `metadata.uid`.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

#[derive(Debug)]
struct Attached {
    node: String,
    /// uid → pod.
    pods: BTreeMap<String, PodRef>,
}

/// Attached volumes by volume name (`pvc-<claim uid>`).
#[derive(Debug, Default)]
pub struct Attachments {
    volumes: Mutex<HashMap<String, Attached>>,
}

impl Attachments {
    /// Attaches `volume` to `node` for `pod`. An exclusive volume attached to another
    /// node is refused with the message the attach/detach controller reports to `pod`.
    pub fn attach(
        &self,
        volume: &str,
        exclusive: bool,
        node: &str,
        pod: &PodRef,
    ) -> Result<(), String> {
        let mut volumes = self.volumes.lock().expect("attachments lock");
        let entry = volumes
            .entry(volume.to_owned())
            .or_insert_with(|| Attached {
                node: node.to_owned(),
                pods: BTreeMap::new(),
            });
        if entry.pods.is_empty() {
            entry.node = node.to_owned();
        }
        if exclusive && entry.node != node {
            return Err(multi_attach_message(volume, pod, entry.pods.values()));
        }
        entry.pods.insert(pod.uid.clone(), pod.clone());
        Ok(())
    }

    /// Releases every volume `pod_uid` uses; a volume no pod uses is detached.
    pub fn detach_pod(&self, pod_uid: &str) {
        let mut volumes = self.volumes.lock().expect("attachments lock");
        for a in volumes.values_mut() {
            a.pods.remove(pod_uid);
        }
        volumes.retain(|_, a| !a.pods.is_empty());
    }

    /// The node `volume` is attached to, if any.
    pub fn node_of(&self, volume: &str) -> Option<String> {
        let volumes = self.volumes.lock().expect("attachments lock");
        volumes.get(volume).map(|a| a.node.clone())
    }
}

/// `reportMultiAttachError`'s wording: pods in `pod`'s namespace by name, others
/// counted.
fn multi_attach_message<'a>(
    volume: &str,
    pod: &PodRef,
    users: impl Iterator<Item = &'a PodRef>,
) -> String {
    let mut local = Vec::new();
    let mut others = 0;
    for u in users {
        if u.namespace == pod.namespace {
            local.push(u.name.as_str());
        } else {
            others += 1;
        }
    }
    let detail = match (local.is_empty(), others) {
        (true, 0) => {
            "Volume is already exclusively attached to one node and can't be attached to another"
                .to_owned()
        }
        (true, n) => format!("Volume is already used by {n} pod(s) in different namespaces"),
        (false, 0) => format!("Volume is already used by pod(s) {}", local.join(", ")),
        (false, n) => format!(
            "Volume is already used by pod(s) {} and {n} pod(s) in different namespaces",
            local.join(", ")
        ),
    };
    format!("Multi-Attach error for volume {volume:?} {detail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> PodRef {
        PodRef {
            uid: format!("{ns}/{name}"),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn exclusive_volumes_attach_to_one_node() {
        let a = Attachments::default();
        a.attach("pvc-1", true, "n1", &pod("ns", "a"))
            .expect("first");
        a.attach("pvc-1", true, "n1", &pod("ns", "b"))
            .expect("same node");
        assert_eq!(
            a.attach("pvc-1", true, "n2", &pod("ns", "c")),
            Err(
                "Multi-Attach error for volume \"pvc-1\" Volume is already used by pod(s) a, b"
                    .into()
            )
        );
        assert_eq!(
            a.attach("pvc-1", true, "n2", &pod("other", "e")),
            Err("Multi-Attach error for volume \"pvc-1\" Volume is already used by 2 pod(s) in different namespaces".into())
        );
        a.detach_pod("ns/a");
        assert_eq!(a.node_of("pvc-1").as_deref(), Some("n1"), "b still uses it");
        a.detach_pod("ns/b");
        assert_eq!(a.node_of("pvc-1"), None, "detached");
        a.attach("pvc-1", true, "n2", &pod("ns", "c"))
            .expect("free again");
        a.attach("pvc-2", false, "n1", &pod("ns", "x"))
            .expect("shared");
        a.attach("pvc-2", false, "n2", &pod("ns", "y"))
            .expect("shared volumes attach anywhere");
    }
}
