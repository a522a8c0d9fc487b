//! NetworkPolicy ingress semantics, so the emulator can answer "may this pod connect to
//! that pod's port?" the way a network plugin enforcing `networking.k8s.io/v1`
//! NetworkPolicies would. The emulator has no pod network; tests (and tools) ask this
//! instead of opening a connection.
//!
//! The rules (Kubernetes' own): a pod is isolated for ingress when a policy of its
//! namespace selects it (`podSelector`) with `Ingress` among its `policyTypes` (the
//! default when `policyTypes` is absent); an isolated pod accepts a connection when some
//! ingress rule of some selecting policy admits it — the rule's `ports` include the
//! port (none listed: every port) and its `from` peers include the source (none listed:
//! every source). A peer with only `podSelector` matches pods of the policy's namespace;
//! with only `namespaceSelector`, every pod of the matching namespaces; with both, the
//! matching pods of the matching namespaces. `ipBlock` peers match no pod (the emulator
//! gives pods no addresses to compare).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// Whether `from` may open a TCP connection to `to`'s `port`, under `policies` (all of
/// `to`'s namespace) and the cluster's `namespaces` (for `namespaceSelector`).
pub fn ingress_allowed(
    policies: &[NetworkPolicy],
    namespaces: &[Namespace],
    from: &Pod,
    to: &Pod,
    port: i32,
) -> bool {
    let to_ns = to.namespace().unwrap_or_default();
    let selecting: Vec<&NetworkPolicy> = policies
        .iter()
        .filter(|p| p.namespace().unwrap_or_default() == to_ns)
        .filter(|p| {
            p.spec.as_ref().is_some_and(|s| {
                let ingress = s
                    .policy_types
                    .as_ref()
                    .is_none_or(|t| t.iter().any(|t| t == "Ingress"));
                ingress && selects(s.pod_selector.as_ref(), to.labels())
            })
        })
        .collect();
    if selecting.is_empty() {
        return true;
    }
    selecting.iter().any(|p| {
        p.spec
            .as_ref()
            .and_then(|s| s.ingress.as_ref())
            .into_iter()
            .flatten()
            .any(|rule| {
                let port_ok = rule
                    .ports
                    .as_ref()
                    .is_none_or(|ps| ps.is_empty() || ps.iter().any(|p| port_matches(p, to, port)));
                let from_ok = rule.from.as_ref().is_none_or(|peers| {
                    peers.is_empty()
                        || peers
                            .iter()
                            .any(|peer| peer_matches(peer, &to_ns, namespaces, from))
                });
                port_ok && from_ok
            })
    })
}

/// [`ingress_allowed`] with the policies and namespaces read through `client`.
pub async fn may_connect(
    client: &Client,
    from: &Pod,
    to: &Pod,
    port: i32,
) -> Result<bool, kube::Error> {
    let ns = to.namespace().unwrap_or_default();
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await?
        .items;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    Ok(ingress_allowed(&policies, &namespaces, from, to, port))
}

fn peer_matches(
    peer: &NetworkPolicyPeer,
    policy_ns: &str,
    namespaces: &[Namespace],
    from: &Pod,
) -> bool {
    let from_ns = from.namespace().unwrap_or_default();
    let ns_ok = match &peer.namespace_selector {
        None => from_ns == policy_ns,
        Some(sel) => namespaces
            .iter()
            .find(|n| n.name_any() == from_ns)
            .is_some_and(|n| selects(Some(sel), n.labels())),
    };
    let pod_ok = match &peer.pod_selector {
        None => peer.namespace_selector.is_some(),
        Some(sel) => selects(Some(sel), from.labels()),
    };
    peer.ip_block.is_none() && ns_ok && pod_ok
}

fn port_matches(p: &NetworkPolicyPort, to: &Pod, port: i32) -> bool {
    if p.protocol.as_deref().is_some_and(|proto| proto != "TCP") {
        return false;
    }
    match &p.port {
        None => true,
        Some(IntOrString::Int(n)) => {
            port == *n || p.end_port.is_some_and(|e| (*n..=e).contains(&port))
        }
        Some(IntOrString::String(name)) => to
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| c.ports.iter().flatten())
            .any(|cp| cp.name.as_deref() == Some(name.as_str()) && cp.container_port == port),
    }
}

/// Whether `sel` selects an object with `labels` (`None` selects nothing; `{}` all).
pub fn selects(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = sel else {
        return false;
    };
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let exprs_ok = sel.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(ns: &str, labels: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": ns, "labels": labels},
            "spec": {"containers": [{"name": "c", "ports": [{"name": "dashboard", "containerPort": 8265}]}]},
        }))
        .expect("pod")
    }

    fn ns(name: &str) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/metadata.name": name}}}))
        .expect("namespace")
    }

    fn policy(spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({"metadata": {"name": "np", "namespace": "a"}, "spec": spec}))
            .expect("policy")
    }

    #[test]
    fn selected_pods_admit_only_their_peers() {
        let np = policy(json!({
            "podSelector": {"matchLabels": {"job": "1"}},
            "ingress": [{"from": [
                {"podSelector": {"matchLabels": {"job": "1"}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}}},
            ]}],
        }));
        let nss = [ns("a"), ns("ops")];
        let target = pod("a", json!({"job": "1"}));
        let allowed =
            |from: &Pod| ingress_allowed(std::slice::from_ref(&np), &nss, from, &target, 8265);
        assert!(allowed(&pod("a", json!({"job": "1"}))));
        assert!(
            !allowed(&pod("a", json!({"job": "2"}))),
            "another job's pod"
        );
        assert!(
            !allowed(&pod("b", json!({"job": "1"}))),
            "same labels, other namespace"
        );
        assert!(allowed(&pod("ops", json!({}))), "the admitted namespace");
        // A pod no policy selects is not isolated.
        let open = pod("a", json!({"job": "2"}));
        assert!(ingress_allowed(
            &[np],
            &nss,
            &pod("b", json!({})),
            &open,
            80
        ));
    }

    #[test]
    fn ports_and_expressions() {
        let np = policy(json!({
            "podSelector": {},
            "ingress": [{"ports": [{"port": "dashboard"}, {"port": 6379, "endPort": 6380}],
                         "from": [{"podSelector": {"matchExpressions": [
                             {"key": "team", "operator": "In", "values": ["x"]}]}}]}],
        }));
        let nss = [ns("a")];
        let target = pod("a", json!({}));
        let x = pod("a", json!({"team": "x"}));
        let allowed = |port| ingress_allowed(std::slice::from_ref(&np), &nss, &x, &target, port);
        assert!(allowed(8265) && allowed(6380));
        assert!(!allowed(10001));
        assert!(!ingress_allowed(
            &[np],
            &nss,
            &pod("a", json!({"team": "y"})),
            &target,
            8265
        ));
    }
}
