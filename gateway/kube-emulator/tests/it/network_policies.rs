//! `networking.k8s.io/v1` NetworkPolicies as a gateway isolating each RayJob uses
//! them: discovery (`netpol`), create / get / list by label / watch / delete, the
//! real validation (422 with field causes), `metadata.generation`, and garbage
//! collection with the RayJob that owns one.

use futures::StreamExt;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};

use crate::support::{NS, api_err, raw, rayjob, rayjobs, start_bare, wait_for};

/// A policy admitting traffic to a RayJob's pods only from its own pods and from the
/// gateway's namespace, owned by that RayJob.
fn isolation(name: &str, owner_uid: &str) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "forge-gateway"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name,
                                 "uid": owner_uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "podSelector": {"matchLabels": {"ray.io/cluster": name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [
                {"podSelector": {"matchLabels": {"ray.io/cluster": name}}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "forge"}}},
            ], "ports": [{"protocol": "TCP", "port": 8265}]}],
        },
    }))
    .expect("network policy")
}

#[tokio::test]
async fn network_policies_are_served_and_collected_with_their_rayjob() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), NS);

    let (code, _, doc) = raw(&client, "GET", "/apis/networking.k8s.io/v1", None, None).await;
    assert_eq!(code, 200);
    let entry = doc["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "networkpolicies")
        .expect("networkpolicies served")
        .clone();
    assert_eq!(entry["kind"], "NetworkPolicy");
    assert_eq!(entry["shortNames"], json!(["netpol"]));
    assert_eq!(entry["namespaced"], true);

    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    let owner = rayjobs(&client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(rayjob("train-a")).expect("rayjob"),
        )
        .await
        .expect("rayjob");
    let created = api
        .create(
            &PostParams::default(),
            &isolation("train-a", &owner.uid().expect("uid")),
        )
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    match watch.next().await.expect("event").expect("ok") {
        WatchEvent::Added(p) => assert_eq!(p.name_any(), "train-a"),
        other => panic!("expected ADDED, got {other:?}"),
    }
    let got = api.get("train-a").await.expect("get");
    assert_eq!(got.spec, created.spec);
    let mine = api
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=forge-gateway"))
        .await
        .expect("list");
    assert_eq!(mine.items.len(), 1);
    let patched = api
        .patch(
            "train-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"policyTypes": ["Ingress", "Egress"]}})),
        )
        .await
        .expect("patch");
    assert_eq!(patched.metadata.generation, Some(2), "a spec change");

    let (code, _, body) = raw(
        &client,
        "POST",
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"),
        Some("application/json"),
        Some(json!({"metadata": {"name": "bad"}, "spec": {
            "podSelector": {}, "policyTypes": ["Sideways"],
            "ingress": [{"from": [{"ipBlock": {}}], "ports": [{"protocol": "HTTP"}]}]}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["message"],
        "NetworkPolicy.networking.k8s.io \"bad\" is invalid: [spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\", spec.ingress[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"TCP\", \"UDP\", \"SCTP\", spec.ingress[0].from[0].ipBlock.cidr: Required value]"
    );
    let causes: Vec<Value> = body["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(causes.len(), 3, "{body}");

    // A second policy (no owner), deleted directly; the first goes with its RayJob.
    let mut plain = isolation("train-b", "");
    plain.metadata.owner_references = None;
    api.create(&PostParams::default(), &plain)
        .await
        .expect("create");
    api.delete("train-b", &DeleteParams::default())
        .await
        .expect("delete");
    let e = api_err(api.get("train-b").await.expect_err("gone"));
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    rayjobs(&client)
        .delete("train-a", &DeleteParams::default())
        .await
        .expect("delete rayjob");
    wait_for(10, "the policy to go with its RayJob", || async {
        api.get_opt("train-a")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let mut seen = Vec::new();
    while let Some(ev) = watch.next().await {
        let ev = ev.expect("ok");
        let (kind, p) = match ev {
            WatchEvent::Added(p) => ("ADDED", p),
            WatchEvent::Modified(p) => ("MODIFIED", p),
            WatchEvent::Deleted(p) => ("DELETED", p),
            other => panic!("unexpected {other:?}"),
        };
        seen.push(format!("{kind} {}", p.name_any()));
        if seen.last().map(String::as_str) == Some("DELETED train-a") {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            "MODIFIED train-a",
            "ADDED train-b",
            "DELETED train-b",
            "DELETED train-a"
        ],
        "the watch saw every change"
    );
    sim.shutdown().await;
}
