//! The simulated nodes: [`NodeSpec`] and the `--nodes` layout that describes them
//! (`h100=4x8,a100=2x8`), with optional taints per series
//! (`h100=2x8@nvidia.com/gpu=present:NoSchedule`, the common setup of GPU clusters)
//! and GPU-less nodes (`cpu=2x0`: no `nvidia.com/gpu` resource at all, like a kind
//! node), and the Node object each one is seeded as.

use serde_json::{Value, json};

use crate::store::now_rfc3339;

/// A `--nodes` layout that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid node layout {layout:?}: {why}; expected series=COUNTxGPUS[@key[=value]:Effect...][,...]"
)]
pub struct LayoutError {
    /// The layout given.
    pub layout: String,
    /// What is wrong with it.
    pub why: String,
}

/// A taint every node of a series carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTaint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl NodeTaint {
    /// Parses `key[=value]:Effect`.
    fn parse(s: &str) -> Result<Self, String> {
        let (kv, effect) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("taint {s:?} has no :Effect"))?;
        if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            return Err(format!(
                "taint effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
            ));
        }
        let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
        if key.is_empty() {
            return Err(format!("taint {s:?} has no key"));
        }
        Ok(Self {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        })
    }
}

/// One simulated node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Node name.
    pub name: String,
    /// GPU series label value (`h100`), if a GPU node.
    pub series: Option<String>,
    /// `nvidia.com/gpu` capacity.
    pub gpus: u32,
    /// CPU cores.
    pub cpu: u32,
    /// Memory quantity (`512Gi`).
    pub memory: String,
    /// Cordoned (`spec.unschedulable`).
    pub unschedulable: bool,
    /// Ready condition.
    pub ready: bool,
    /// Taints besides the ones cordoning or NotReady imply.
    pub taints: Vec<NodeTaint>,
}

impl NodeSpec {
    /// A ready, schedulable GPU node with 64 CPUs and 512Gi.
    pub fn gpu(name: impl Into<String>, series: impl Into<String>, gpus: u32) -> Self {
        Self {
            name: name.into(),
            series: Some(series.into()),
            gpus,
            cpu: 64,
            memory: "512Gi".into(),
            unschedulable: false,
            ready: true,
            taints: Vec::new(),
        }
    }

    /// Parses a layout like `h100=4x8,a100=2x8` (4 nodes with 8 GPUs of series h100,
    /// ...). Nodes are named `<series>-<index>` (`h100-0`). `@key[=value]:Effect`
    /// after a series' shape taints its nodes (repeatable); `0` GPUs makes nodes
    /// without the `nvidia.com/gpu` resource.
    pub fn parse_layout(layout: &str) -> Result<Vec<Self>, LayoutError> {
        let bad = |why: String| LayoutError {
            layout: layout.to_owned(),
            why,
        };
        let mut out = Vec::new();
        for part in layout.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (series, rest) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} has no '='")))?;
            let mut pieces = rest.split('@');
            let shape = pieces.next().unwrap_or_default();
            let (count, gpus) = shape
                .split_once('x')
                .ok_or_else(|| bad(format!("{shape:?} is not COUNTxGPUS")))?;
            let count: u32 = count
                .parse()
                .map_err(|_| bad(format!("node count {count:?} is not a number")))?;
            let gpus: u32 = gpus
                .parse()
                .map_err(|_| bad(format!("GPU count {gpus:?} is not a number")))?;
            let taints = pieces
                .map(NodeTaint::parse)
                .collect::<Result<Vec<_>, _>>()
                .map_err(bad)?;
            for i in 0..count {
                let mut n = Self::gpu(format!("{series}-{i}"), series, gpus);
                n.taints.clone_from(&taints);
                out.push(n);
            }
        }
        Ok(out)
    }

    /// The Node object, labelled with `gpu_label`.
    pub fn to_node(&self, gpu_label: &str) -> Value {
        let mut labels = json!({
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        });
        if let Some(s) = &self.series {
            labels[gpu_label] = json!(s);
        }
        let mut resources = json!({
            "cpu": self.cpu.to_string(),
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "1Ti",
        });
        if self.gpus > 0 {
            resources["nvidia.com/gpu"] = json!(self.gpus.to_string());
        }
        let mut taints: Vec<Value> = self
            .taints
            .iter()
            .map(|t| {
                let mut v = json!({"key": t.key, "effect": t.effect});
                if !t.value.is_empty() {
                    v["value"] = json!(t.value);
                }
                v
            })
            .collect();
        if self.unschedulable {
            taints.push(json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": now_rfc3339()}));
        }
        if !self.ready {
            taints.push(json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": now_rfc3339()}));
        }
        let mut spec = json!({});
        if self.unschedulable {
            spec["unschedulable"] = json!(true);
        }
        if !taints.is_empty() {
            spec["taints"] = json!(taints);
        }
        let now = now_rfc3339();
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": spec,
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{
                    "type": "Ready",
                    "status": if self.ready { "True" } else { "False" },
                    "reason": if self.ready { "KubeletReady" } else { "KubeletNotReady" },
                    "message": if self.ready { "kubelet is posting ready status" } else { "container runtime network not ready" },
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }],
                "addresses": [{"type": "Hostname", "address": self.name}, {"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {
                    "kubeletVersion": "v1.33.0-forge-kubesim",
                    "containerRuntimeVersion": "forge-kubesim://1",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "osImage": "forge-kubesim",
                    "kernelVersion": "6.0.0",
                    "kubeProxyVersion": "",
                    "machineID": "", "systemUUID": "", "bootID": "",
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_with_taints_and_gpu_less_nodes() {
        let nodes = NodeSpec::parse_layout(
            "h100=2x8@nvidia.com/gpu=present:NoSchedule@dedicated:NoExecute, cpu=1x0",
        )
        .expect("valid");
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[1].name, "h100-1");
        assert_eq!(
            nodes[1].taints,
            vec![
                NodeTaint {
                    key: "nvidia.com/gpu".into(),
                    value: "present".into(),
                    effect: "NoSchedule".into()
                },
                NodeTaint {
                    key: "dedicated".into(),
                    value: String::new(),
                    effect: "NoExecute".into()
                },
            ]
        );
        let tainted = nodes[0].to_node("starforge/gpu-series");
        assert_eq!(
            tainted["spec"]["taints"],
            json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                   {"key": "dedicated", "effect": "NoExecute"}])
        );
        assert_eq!(tainted["status"]["allocatable"]["nvidia.com/gpu"], "8");
        let cpu = nodes[2].to_node("starforge/gpu-series");
        assert!(
            cpu["status"]["allocatable"].get("nvidia.com/gpu").is_none(),
            "a GPU-less node has no GPU resource"
        );
        assert!(cpu["spec"].get("taints").is_none());
        for bad in [
            "h100=2x8@nvidia.com/gpu",
            "h100=2x8@k:Sometimes",
            "h100",
            "h100=ax8",
        ] {
            let e = NodeSpec::parse_layout(bad).expect_err(bad);
            assert!(e.to_string().starts_with("invalid node layout"), "{e}");
        }
    }
}
