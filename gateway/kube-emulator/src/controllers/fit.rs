//! The default scheduler's filter plugins and its `FitError` message, as pure
//! functions: NodeUnschedulable, TaintToleration (NoSchedule/NoExecute), NodeAffinity
//! (nodeSelector + required node affinity), NodeResourcesFit (cpu, memory,
//! `nvidia.com/gpu` and other extended resources, pod count). Plugins run in that
//! order and a node is rejected by the first plugin that fails, as in
//! `framework.RunFilterPlugins`. Before them VolumeBinding's PreFilter rejects a pod
//! whose claims are missing, being deleted or unbound, for every node at once.
//! Scoring is LeastAllocated on cpu and memory.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, PersistentVolumeClaim, Pod, Taint, Toleration,
};

use super::quantity::parse_milli;

/// Resources in milli-units keyed by resource name.
pub type Resources = BTreeMap<String, i128>;

/// Why one node rejected the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// `node(s) were unschedulable` (cordoned).
    Unschedulable,
    /// `node(s) had untolerated taint {key: value}`.
    Taint {
        /// Taint key.
        key: String,
        /// Taint value.
        value: String,
    },
    /// `node(s) didn't match Pod's node affinity/selector`.
    Selector,
    /// `Insufficient <resource>` (one per missing resource).
    Insufficient(Vec<String>),
    /// `Too many pods`.
    TooManyPods,
    /// VolumeRestrictions: a `ReadWriteOncePod` claim of the pod is in use.
    ReadWriteOncePodConflict,
}

impl Reject {
    /// Whether preemption could help (NodeResourcesFit is `Unschedulable`; the other
    /// plugins return `UnschedulableAndUnresolvable`).
    fn resolvable(&self) -> bool {
        matches!(
            self,
            Self::Insufficient(_) | Self::TooManyPods | Self::ReadWriteOncePodConflict
        )
    }

    fn messages(&self) -> Vec<String> {
        match self {
            Self::Unschedulable => vec!["node(s) were unschedulable".into()],
            Self::Taint { key, value } => {
                vec![format!("node(s) had untolerated taint {{{key}: {value}}}")]
            }
            Self::Selector => vec!["node(s) didn't match Pod's node affinity/selector".into()],
            Self::Insufficient(r) => r.iter().map(|r| format!("Insufficient {r}")).collect(),
            Self::TooManyPods => vec!["Too many pods".into()],
            Self::ReadWriteOncePodConflict => vec![
                "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode".into(),
            ],
        }
    }
}

/// A node as the scheduler sees it.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// Ready condition is True.
    pub ready: bool,
    /// Taints (NotReady nodes get the lifecycle controller's `not-ready` taint here).
    pub taints: Vec<Taint>,
    /// Allocatable resources (`pods` included when set).
    pub allocatable: Resources,
    /// Requests of the bound, unfinished pods.
    pub used: Resources,
    /// Number of bound, unfinished pods.
    pub pod_count: i128,
}

impl NodeInfo {
    /// From a Node object (usage starts empty).
    pub fn from_node(node: &Node) -> Self {
        let status = node.status.as_ref();
        let alloc = status.and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()));
        let allocatable = alloc
            .into_iter()
            .flatten()
            .filter_map(|(k, q)| parse_milli(&q.0).ok().map(|v| (k.clone(), v)))
            .collect();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let spec = node.spec.as_ref();
        let mut taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        if !ready
            && !taints
                .iter()
                .any(|t| t.key == "node.kubernetes.io/not-ready")
        {
            taints.push(Taint {
                key: "node.kubernetes.io/not-ready".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            });
        }
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            ready,
            taints,
            allocatable,
            used: Resources::new(),
            pod_count: 0,
        }
    }

    /// Adds a bound pod's requests.
    pub fn add(&mut self, req: &Resources) {
        for (k, v) in req {
            *self.used.entry(k.clone()).or_default() += v;
        }
        self.pod_count += 1;
    }
}

/// The effective requests of a pod: per resource, max(Σ containers, max init container)
/// plus overhead; a container's limit stands in for a missing request (API defaulting).
pub fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::new();
    };
    let container_req = |c: &k8s_openapi::api::core::v1::Container| {
        let mut out = Resources::new();
        let res = c.resources.as_ref();
        if let Some(limits) = res.and_then(|r| r.limits.as_ref()) {
            for (k, q) in limits {
                out.insert(k.clone(), parse_milli(&q.0).unwrap_or(0));
            }
        }
        if let Some(requests) = res.and_then(|r| r.requests.as_ref()) {
            for (k, q) in requests {
                out.insert(k.clone(), parse_milli(&q.0).unwrap_or(0));
            }
        }
        out
    };
    let mut total = Resources::new();
    for c in &spec.containers {
        for (k, v) in container_req(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container_req(c) {
            let e = total.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, q) in spec.overhead.iter().flatten() {
        *total.entry(k.clone()).or_default() += parse_milli(&q.0).unwrap_or(0);
    }
    total
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_ok = match t.key.as_deref() {
            None | Some("") => t.operator.as_deref() == Some("Exists"),
            Some(k) => k == taint.key,
        };
        let value_ok = match t.operator.as_deref() {
            Some("Exists") => true,
            _ => t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        };
        effect_ok && key_ok && value_ok
    })
}

fn requirement_matches(labels: &BTreeMap<String, String>, r: &NodeSelectorRequirement) -> bool {
    let v = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator.as_str() {
        "In" => v.is_some_and(|v| values.contains(v)),
        "NotIn" => v.is_none_or(|v| !values.contains(v)),
        "Exists" => v.is_some(),
        "DoesNotExist" => v.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                v.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

fn matches_affinity(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if let Some(sel) = spec.node_selector.as_ref()
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(sel) => sel.node_selector_terms.iter().any(|term| {
            term.match_expressions
                .iter()
                .flatten()
                .all(|r| requirement_matches(labels, r))
        }),
    }
}

/// Runs the filter plugins for one node; `None` means the pod fits.
pub fn filter(node: &NodeInfo, pod: &Pod, req: &Resources) -> Option<Reject> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    if node.unschedulable {
        let t = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerates(&tolerations, &t) {
            return Some(Reject::Unschedulable);
        }
    }
    for taint in &node.taints {
        if (taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            && !tolerates(&tolerations, taint)
        {
            return Some(Reject::Taint {
                key: taint.key.clone(),
                value: taint.value.clone().unwrap_or_default(),
            });
        }
    }
    if !matches_affinity(pod, &node.labels) {
        return Some(Reject::Selector);
    }
    if let Some(max_pods) = node.allocatable.get("pods")
        && node.pod_count * 1000 + 1000 > *max_pods
    {
        return Some(Reject::TooManyPods);
    }
    let insufficient: Vec<String> = req
        .iter()
        .filter(|(k, v)| **v > 0 && k.as_str() != "pods")
        .filter(|(k, v)| {
            let free = node.allocatable.get(*k).copied().unwrap_or(0)
                - node.used.get(*k).copied().unwrap_or(0);
            free < **v
        })
        .map(|(k, _)| k.clone())
        .collect();
    (!insufficient.is_empty()).then_some(Reject::Insufficient(insufficient))
}

/// VolumeBinding's PreFilter: why `pod`'s claims (looked up in `claims`) keep it off
/// every node, if they do.
pub fn claims_prefilter(
    pod: &Pod,
    claims: &[std::sync::Arc<PersistentVolumeClaim>],
) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    let mut unbound = false;
    for v in volumes.into_iter().flatten() {
        let Some(src) = &v.persistent_volume_claim else {
            continue;
        };
        let name = &src.claim_name;
        let claim = claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(ns) && c.metadata.name.as_ref() == Some(name)
        });
        match claim {
            None => return Some(format!("persistentvolumeclaim {name:?} not found")),
            Some(c) if c.metadata.deletion_timestamp.is_some() => {
                return Some(format!("persistentvolumeclaim {name:?} is being deleted"));
            }
            Some(c) => {
                unbound |= c.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound");
            }
        }
    }
    unbound.then(|| "pod has unbound immediate PersistentVolumeClaims".to_owned())
}

/// VolumeRestrictions: whether a `ReadWriteOncePod` claim of `pod` is already used by
/// one of `users` (the scheduled, not yet finished pods other than `pod`). The real
/// plugin fails every node then (after the filters before it), as `Unschedulable`.
pub fn read_write_once_pod_conflict<'a>(
    pod: &'a Pod,
    claims: &[std::sync::Arc<PersistentVolumeClaim>],
    users: impl Iterator<Item = &'a Pod>,
) -> bool {
    let ns = pod.metadata.namespace.as_deref();
    let claim_names = |p: &'a Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| c.claim_name.as_str())
    };
    let mine: Vec<&str> = claim_names(pod)
        .filter(|name| {
            claims.iter().any(|c| {
                c.metadata.namespace.as_deref() == ns
                    && c.metadata.name.as_deref() == Some(*name)
                    && c.spec
                        .as_ref()
                        .and_then(|s| s.access_modes.as_ref())
                        .is_some_and(|m| m.iter().any(|m| m == "ReadWriteOncePod"))
            })
        })
        .collect();
    if mine.is_empty() {
        return false;
    }
    let pod_uid = pod.metadata.uid.as_deref();
    for other in users {
        if other.metadata.namespace.as_deref() != ns || other.metadata.uid.as_deref() == pod_uid {
            continue;
        }
        if claim_names(other).any(|c| mine.contains(&c)) {
            return true;
        }
    }
    false
}

/// The `FitError` message of a PreFilter rejection: `0/N nodes are available: <msg>.`
/// and the preemption verdict (nothing to preempt for that).
pub fn prefilter_message(total_nodes: usize, msg: &str) -> String {
    format!(
        "0/{total_nodes} nodes are available: {msg}. preemption: 0/{total_nodes} nodes are available: {total_nodes} Preemption is not helpful for scheduling."
    )
}

/// LeastAllocated score (0..=100) on cpu and memory after placing `req`.
pub fn score(node: &NodeInfo, req: &Resources) -> i128 {
    let mut total = 0;
    for r in ["cpu", "memory"] {
        let alloc = node.allocatable.get(r).copied().unwrap_or(0);
        if alloc <= 0 {
            continue;
        }
        let used = node.used.get(r).copied().unwrap_or(0) + req.get(r).copied().unwrap_or(0);
        total += (alloc - used).max(0) * 100 / alloc;
    }
    total / 2
}

fn histogram(lines: impl Iterator<Item = String>) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for l in lines {
        *counts.entry(l).or_default() += 1;
    }
    let mut parts: Vec<String> = counts
        .into_iter()
        .map(|(r, n)| format!("{n} {r}"))
        .collect();
    parts.sort();
    parts.join(", ")
}

/// The `FitError` message: `0/N nodes are available: <sorted histogram>. preemption:
/// 0/N nodes are available: <histogram>.` (every pod has the same priority here, so
/// preemption never finds victims).
pub fn fit_message(total_nodes: usize, rejects: &[Reject]) -> String {
    if total_nodes == 0 {
        return "no nodes available to schedule pods".into();
    }
    let main = histogram(rejects.iter().flat_map(Reject::messages));
    let pre = histogram(rejects.iter().map(|r| {
        if r.resolvable() {
            "No preemption victims found for incoming pod".to_owned()
        } else {
            "Preemption is not helpful for scheduling".to_owned()
        }
    }));
    format!(
        "0/{total_nodes} nodes are available: {main}. preemption: 0/{total_nodes} nodes are available: {pre}."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(
        name: &str,
        labels: serde_json::Value,
        gpus: &str,
        extra: serde_json::Value,
    ) -> NodeInfo {
        let mut n = json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": gpus, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        if let (Some(dst), Some(src)) = (n.as_object_mut(), extra.as_object()) {
            for (k, v) in src {
                dst.insert(k.clone(), v.clone());
            }
        }
        NodeInfo::from_node(&serde_json::from_value(n).expect("node"))
    }

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    #[test]
    fn gpu_and_selector_message_matches_the_real_scheduler() {
        let nodes = [
            node(
                "a1",
                json!({"starforge/gpu-series": "a100"}),
                "8",
                json!({}),
            ),
            node(
                "a2",
                json!({"starforge/gpu-series": "a100"}),
                "8",
                json!({}),
            ),
            node(
                "h1",
                json!({"starforge/gpu-series": "h100"}),
                "8",
                json!({}),
            ),
            node(
                "h2",
                json!({"starforge/gpu-series": "h100"}),
                "8",
                json!({}),
            ),
        ];
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {
            "nodeSelector": {"starforge/gpu-series": "a100"},
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}}));
        let req = pod_requests(&p);
        assert_eq!(req.get("nvidia.com/gpu"), Some(&16000));
        let rejects: Vec<Reject> = nodes.iter().filter_map(|n| filter(n, &p, &req)).collect();
        assert_eq!(rejects.len(), 4);
        assert_eq!(
            fit_message(4, &rejects),
            "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. \
             preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod, \
             2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn cordon_taints_and_not_ready() {
        let cordoned = node(
            "c",
            json!({}),
            "8",
            json!({"spec": {"unschedulable": true}}),
        );
        let tainted = node(
            "t",
            json!({}),
            "8",
            json!({"spec": {"taints": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]}}),
        );
        let not_ready = NodeInfo::from_node(&serde_json::from_value(json!({
            "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "1"}, "conditions": [{"type": "Ready", "status": "False"}]}
        })).expect("node"));
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}));
        let req = pod_requests(&p);
        let rejects: Vec<Reject> = [&cordoned, &tainted, &not_ready]
            .iter()
            .filter_map(|n| filter(n, &p, &req))
            .collect();
        assert_eq!(
            fit_message(3, &rejects),
            "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, \
             1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable. \
             preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        );
        let tolerant = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}],
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(filter(&tainted, &tolerant, &req), None);
    }

    #[test]
    fn usage_counts_against_allocatable() {
        let mut n = node("a", json!({}), "8", json!({}));
        let p = pod(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "4"}}}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "6"}}}]}}));
        let req = pod_requests(&p);
        assert_eq!(req.get("cpu"), Some(&4000), "init container max wins");
        assert_eq!(filter(&n, &p, &req), None);
        n.add(&req);
        assert_eq!(
            filter(&n, &p, &req),
            Some(Reject::Insufficient(vec!["nvidia.com/gpu".into()]))
        );
        assert!(score(&n, &req) < 100);
    }
}
