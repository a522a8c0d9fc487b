//! API-server behaviour through the real `kube` client: CRUD and
//! error bodies, optimistic concurrency, selectors, pagination, watches (resume after
//! a dropped connection, 410 → relist, bookmarks), CRD validation/defaulting from the
//! real KubeRay CRDs, status subresource, finalizers, garbage collection, binding,
//! pod logs and fault injection.

use std::time::Duration;

use crate::support::{
    api_err, eventually, holds_for, pod, raw, raw_http, rayclusters, rayjob, rayjobs, start_bare,
};
use forge_kubesim::{CrashRule, FailRule, HoldRule, LoseAnswerRule, Matching};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams,
    WatchParams,
};
use kube::core::WatchEvent;
use kube::runtime::watcher;
use serde_json::{Value, json};

fn dynamic(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("valid object")
}

#[tokio::test]
async fn crud_and_status_error_bodies() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p: Pod = serde_json::from_value(pod("web", json!({"app": "web"}))).expect("pod");
    let created = pods
        .create(&PostParams::default(), &p)
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        created
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref()),
        Some("Always")
    );

    let got = pods.get("web").await.expect("get");
    assert_eq!(got.metadata.resource_version, meta.resource_version);

    let dup = api_err(
        pods.create(&PostParams::default(), &p)
            .await
            .expect_err("duplicate"),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    // The audit trail keeps the one committed create, not the refused duplicate.
    let audit = sim.created("pods");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].name, "web");
    assert_eq!(audit[0].uid, meta.uid.clone().unwrap_or_default());
    assert_eq!(dup.message, "pods \"web\" already exists");

    // Exact Status body of a 404, like the real server's.
    let (code, _, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/starforge/pods/nope",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "pods \"nope\" not found", "reason": "NotFound",
               "details": {"name": "nope", "kind": "pods"}, "code": 404})
    );
    let (code, _, body) = raw(
        &client,
        "GET",
        "/apis/ray.io/v1/namespaces/starforge/rayjobs/nope",
        None,
        None,
    )
    .await;
    assert_eq!(
        (code, body["details"]["group"].as_str()),
        (404, Some("ray.io"))
    );
    assert_eq!(body["message"], "rayjobs.ray.io \"nope\" not found");

    // Namespace must exist.
    let other: Api<Pod> = Api::namespaced(client.clone(), "missing-ns");
    let e = api_err(
        other
            .create(&PostParams::default(), &p)
            .await
            .expect_err("no namespace"),
    );
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));

    // generateName.
    let mut g = pod("", json!({}));
    g["metadata"] = json!({"generateName": "gen-"});
    let g = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(g).expect("pod"),
        )
        .await
        .expect("generateName");
    let name = g.metadata.name.expect("named");
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // The written kubeconfig works for a client built the way the gateway builds one.
    let kc =
        kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml()).expect("kubeconfig parses");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .expect("config");
    assert_eq!(cfg.default_namespace, "starforge");
    let via_kubeconfig: Api<Pod> =
        Api::default_namespaced(kube::Client::try_from(cfg).expect("client"));
    assert!(
        via_kubeconfig
            .get_opt("web")
            .await
            .expect("get via kubeconfig")
            .is_some()
    );

    // Delete, then it is gone.
    pods.delete("web", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = api_err(pods.get("web").await.expect_err("deleted"));
    assert_eq!(gone.code, 404);
    sim.shutdown().await;
}

#[tokio::test]
async fn stale_resource_version_conflicts() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("p", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    let v1 = pods.get("p").await.expect("get");
    let mut first = v1.clone();
    first.metadata.labels = Some([("a".to_owned(), "1".to_owned())].into());
    let v2 = pods
        .replace("p", &PostParams::default(), &first)
        .await
        .expect("first update");
    assert_ne!(v2.metadata.resource_version, v1.metadata.resource_version);
    let mut stale = v1.clone();
    stale.metadata.labels = Some([("a".to_owned(), "2".to_owned())].into());
    let e = api_err(
        pods.replace("p", &PostParams::default(), &stale)
            .await
            .expect_err("stale"),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );
    // A merge patch carrying a stale resourceVersion conflicts too.
    let patch = json!({"metadata": {"resourceVersion": v1.metadata.resource_version, "labels": {"b": "1"}}});
    let e = api_err(
        pods.patch("p", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("stale patch"),
    );
    assert_eq!(e.code, 409);
    // A no-op update does not bump the resourceVersion.
    let same = pods
        .replace("p", &PostParams::default(), &v2)
        .await
        .expect("no-op");
    assert_eq!(same.metadata.resource_version, v2.metadata.resource_version);
    sim.shutdown().await;
}

#[tokio::test]
async fn label_and_field_selectors() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, labels) in [
        ("head", json!({"ray.io/node-type": "head", "app": "ray"})),
        (
            "worker",
            json!({"ray.io/node-type": "worker", "app": "ray"}),
        ),
        ("web", json!({"app": "web"})),
    ] {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod(name, labels)).expect("pod"),
        )
        .await
        .expect("create");
    }
    // The scheduler's way of setting spec.nodeName.
    let (code, _, _) = raw(&client, "POST", "/api/v1/namespaces/starforge/pods/head/binding", Some("application/json"),
        Some(json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "head"}, "target": {"kind": "Node", "name": "h100-0"}}))).await;
    assert_eq!(code, 201);
    let names = |list: kube::core::ObjectList<Pod>| {
        list.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let cases = [
        ("app=ray", vec!["head", "worker"]),
        ("app==ray,ray.io/node-type!=head", vec!["worker"]),
        ("ray.io/node-type in (head,worker)", vec!["head", "worker"]),
        ("app notin (ray)", vec!["web"]),
        ("ray.io/node-type", vec!["head", "worker"]),
        ("!ray.io/node-type", vec!["web"]),
    ];
    for (sel, want) in cases {
        let got = names(
            pods.list(&ListParams::default().labels(sel))
                .await
                .expect("list"),
        );
        assert_eq!(got, want, "{sel}");
    }
    let bound = names(
        pods.list(&ListParams::default().fields("spec.nodeName=h100-0"))
            .await
            .expect("list"),
    );
    assert_eq!(bound, vec!["head"]);
    let unbound = names(
        pods.list(&ListParams::default().fields("spec.nodeName=,status.phase=Pending"))
            .await
            .expect("list"),
    );
    assert_eq!(unbound, vec!["web", "worker"]);
    let by_name = names(
        pods.list(&ListParams::default().fields("metadata.name=web"))
            .await
            .expect("list"),
    );
    assert_eq!(by_name, vec!["web"]);
    let e = api_err(
        pods.list(&ListParams::default().fields("spec.bogus=x"))
            .await
            .expect_err("unsupported"),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "field label not supported: spec.bogus")
    );
    let e = api_err(
        pods.list(&ListParams::default().labels("app in ray"))
            .await
            .expect_err("bad syntax"),
    );
    assert_eq!(e.code, 400);
    // Binding an already bound pod conflicts, like the real scheduler sees.
    let (code, _, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/starforge/pods/head/binding",
        Some("application/json"),
        Some(json!({"target": {"kind": "Node", "name": "h100-1"}})),
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")));
    // Nodes: spec.unschedulable selector.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "a100-0",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon");
    let schedulable = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .expect("list");
    assert_eq!(schedulable.items.len(), 2);
    let series = nodes
        .list(&ListParams::default().labels("starforge/gpu-series=a100"))
        .await
        .expect("list");
    assert_eq!(series.items.len(), 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn pagination_and_expired_continue() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client);
    for i in 0..25 {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod(&format!("p{i:02}"), json!({}))).expect("pod"),
        )
        .await
        .expect("create");
    }
    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(10);
    let mut pages = 0;
    loop {
        let page = pods.list(&lp).await.expect("page");
        pages += 1;
        seen.extend(
            page.items
                .iter()
                .map(|p| p.metadata.name.clone().unwrap_or_default()),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => {
                assert!(page.metadata.remaining_item_count.is_some_and(|n| n > 0));
                lp = lp.continue_token(&c);
            }
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, want);
    // A continue token older than the retained window is 410 Gone / Expired.
    let first = pods
        .list(&ListParams::default().limit(5))
        .await
        .expect("page");
    let token = first.metadata.continue_.expect("more pages");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("late", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    sim.faults().compact();
    let e = api_err(
        pods.list(&ListParams::default().limit(5).continue_token(&token))
            .await
            .expect_err("expired"),
    );
    assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    sim.shutdown().await;
}

#[tokio::test]
async fn watcher_resumes_after_dropped_connection_and_relists_on_410() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let w = watcher(pods.clone(), watcher::Config::default());
    let task = tokio::spawn(async move {
        let mut s = std::pin::pin!(w);
        while let Some(ev) = s.next().await {
            let ev = match ev {
                Ok(watcher::Event::Init) => "init".to_owned(),
                Ok(watcher::Event::InitDone) => "init-done".to_owned(),
                Ok(watcher::Event::Apply(p)) => {
                    format!("apply {}", p.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::Delete(p)) => {
                    format!("delete {}", p.metadata.name.unwrap_or_default())
                }
                Ok(watcher::Event::InitApply(p)) => {
                    format!("initapply {}", p.metadata.name.unwrap_or_default())
                }
                Err(e) => format!("error {e}"),
            };
            if tx.send(ev).is_err() {
                break;
            }
        }
    });
    let next_matching = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
                               want: &str,
                               log: &mut Vec<String>| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ev = tokio::time::timeout_at(deadline, rx.recv())
                .await
                .unwrap_or_else(|_| panic!("timeout waiting for {want}; saw {log:?}"))
                .expect("watcher alive");
            log.push(ev.clone());
            if ev == want {
                return;
            }
        }
    };
    let mut log = Vec::new();
    next_matching(&mut rx, "init-done", &mut log).await;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("a", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    next_matching(&mut rx, "apply a", &mut log).await;

    // Drop every watch connection: the watcher re-watches from its last
    // resourceVersion without a relist and still sees the next change.
    log.clear();
    // A one-shot 429 on the next pod watch (the kube client retries it by itself)
    // tells when the watcher has re-watched after the drop.
    sim.faults().add_rule(FailRule {
        count: 1,
        code: 429,
        retry_after_seconds: Some(0),
        matching: Matching::default().path_contains("/pods").verb("watch"),
    });
    sim.faults().drop_watches();
    eventually("the watcher re-watches after the drop", || async {
        sim.faults().state().rules.is_empty()
    })
    .await;
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("b", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    next_matching(&mut rx, "apply b", &mut log).await;
    assert!(
        !log.iter().any(|e| e == "init"),
        "resumed without relist: {log:?}"
    );

    // Drop + compact: the re-watch gets 410 Gone and the watcher relists.
    log.clear();
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("c", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    next_matching(&mut rx, "apply c", &mut log).await;
    sim.faults().compact();
    sim.faults().drop_watches();
    next_matching(&mut rx, "init", &mut log).await;
    next_matching(&mut rx, "init-done", &mut log).await;
    for n in ["a", "b", "c"] {
        assert!(
            log.contains(&format!("initapply {n}")),
            "relist saw {n}: {log:?}"
        );
    }
    task.abort();
    sim.shutdown().await;
}

#[tokio::test]
async fn raw_watch_expired_error_and_bookmarks() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("x", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    sim.faults().compact();
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("y", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    // Watching from before the compaction: one ERROR event carrying a 410 Expired Status.
    let old: u64 = rv.parse::<u64>().expect("numeric rv") - 1;
    let mut s = pods
        .watch(&WatchParams::default(), &old.to_string())
        .await
        .expect("watch")
        .boxed();
    match s.try_next().await.expect("event").expect("some event") {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410 ERROR, got {other:?}"),
    }
    // From a current resourceVersion with bookmarks: the change then a BOOKMARK.
    let now = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut s = pods
        .watch(&WatchParams::default(), &now)
        .await
        .expect("watch")
        .boxed();
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("z", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    let mut saw_added = false;
    let mut saw_bookmark = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !(saw_added && saw_bookmark) {
        match tokio::time::timeout_at(deadline, s.try_next())
            .await
            .expect("in time")
            .expect("ok")
            .expect("open")
        {
            WatchEvent::Added(p) => {
                assert_eq!(p.metadata.name.as_deref(), Some("z"));
                saw_added = true;
            }
            WatchEvent::Bookmark(b) => {
                assert!(saw_added, "bookmark after the event it covers");
                assert!(
                    b.metadata.resource_version.parse::<u64>().expect("rv")
                        > now.parse::<u64>().expect("rv")
                );
                saw_bookmark = true;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn rayjob_schema_validation_and_defaults() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api = rayjobs(&client);
    // A worker group without groupName, and a wrong type.
    let mut bad = rayjob("bad");
    bad["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        .as_object_mut()
        .expect("object")
        .remove("groupName");
    bad["spec"]["shutdownAfterJobFinishes"] = json!("yes");
    let e = api_err(
        api.create(&PostParams::default(), &dynamic(bad))
            .await
            .expect_err("invalid"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let details = e.details.expect("details");
    assert_eq!(
        (
            details.kind.as_str(),
            details.group.as_str(),
            details.name.as_str()
        ),
        ("RayJob", "ray.io", "bad")
    );
    let causes: Vec<(String, String)> = details
        .causes
        .iter()
        .map(|c| (c.reason.clone(), c.field.clone()))
        .collect();
    assert!(
        causes.contains(&(
            "FieldValueRequired".into(),
            "spec.rayClusterSpec.workerGroupSpecs[0].groupName".into()
        )),
        "{causes:?}"
    );
    assert!(
        causes.contains(&(
            "FieldValueTypeInvalid".into(),
            "spec.shutdownAfterJobFinishes".into()
        )),
        "{causes:?}"
    );
    assert!(
        e.message.starts_with("RayJob.ray.io \"bad\" is invalid: ["),
        "{}",
        e.message
    );
    // An enum violation → FieldValueNotSupported.
    let mut bad = rayjob("bad-enum");
    bad["spec"]["deletionStrategy"] = json!({"onSuccess": {"policy": "DeleteEverything"}});
    let e = api_err(
        api.create(&PostParams::default(), &dynamic(bad))
            .await
            .expect_err("invalid enum"),
    );
    let cause = &e.details.expect("details").causes[0];
    assert_eq!(
        (cause.reason.as_str(), cause.field.as_str()),
        (
            "FieldValueNotSupported",
            "spec.deletionStrategy.onSuccess.policy"
        )
    );
    assert!(
        cause.message.starts_with(
            "Unsupported value: \"DeleteEverything\": supported values: \"DeleteCluster\""
        ),
        "{}",
        cause.message
    );
    // RayClusters are validated against their own CRD.
    let mut rc = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"}, "spec": rayjob("x")["spec"]["rayClusterSpec"].clone()});
    rc["spec"]["headGroupSpec"]["serviceType"] = json!(5);
    let e = api_err(
        rayclusters(&client)
            .create(&PostParams::default(), &dynamic(rc))
            .await
            .expect_err("invalid"),
    );
    assert_eq!(e.code, 422);

    // Defaults from the CRD are applied to a valid object.
    let created = api
        .create(&PostParams::default(), &dynamic(rayjob("good")))
        .await
        .expect("valid");
    let spec = &created.data["spec"];
    assert_eq!(spec["submissionMode"], "K8sJobMode");
    assert_eq!(spec["backoffLimit"], 0);
    assert_eq!(
        spec["shutdownAfterJobFinishes"],
        Value::Null,
        "no default in the CRD"
    );
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.data.get("status").is_none());

    // Updates are validated too.
    let patch = json!({"spec": {"entrypoint": 42}});
    let e = api_err(
        api.patch("good", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err("invalid patch"),
    );
    assert_eq!(e.code, 422);
    sim.shutdown().await;
}

#[tokio::test]
async fn status_subresource_and_generation() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api = rayjobs(&client);
    api.create(&PostParams::default(), &dynamic(rayjob("s")))
        .await
        .expect("create");
    // Status through the main resource is ignored.
    let p = json!({"status": {"jobStatus": "RUNNING"}, "metadata": {"labels": {"x": "y"}}});
    let o = api
        .patch("s", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .expect("patch");
    assert!(o.data.get("status").is_none());
    assert_eq!(
        o.metadata.generation,
        Some(1),
        "metadata-only change keeps generation"
    );
    // Status subresource sets status and ignores spec.
    let p = json!({"status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}, "spec": {"entrypoint": "changed"}});
    let o = api
        .patch_status("s", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .expect("status patch");
    assert_eq!(o.data["status"]["jobStatus"], "RUNNING");
    assert_eq!(
        o.data["spec"]["entrypoint"],
        "python /home/ray/samples/sample_code.py"
    );
    assert_eq!(o.metadata.generation, Some(1));
    // A spec change bumps generation.
    let p = json!({"spec": {"entrypoint": "python other.py"}});
    let o = api
        .patch("s", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .expect("patch");
    assert_eq!(o.metadata.generation, Some(2));
    assert_eq!(o.data["status"]["jobStatus"], "RUNNING");
    // JSON patch works, and a failed test op is rejected.
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "replace", "path": "/spec/entrypoint", "value": "python third.py"}]),
    )
    .expect("patch");
    let o = api
        .patch("s", &PatchParams::default(), &Patch::<()>::Json(jp))
        .await
        .expect("json patch");
    assert_eq!(o.data["spec"]["entrypoint"], "python third.py");
    let jp: json_patch::Patch = serde_json::from_value(
        json!([{"op": "test", "path": "/spec/entrypoint", "value": "nope"}]),
    )
    .expect("patch");
    assert!(
        api.patch("s", &PatchParams::default(), &Patch::<()>::Json(jp))
            .await
            .is_err()
    );
    // Server-side apply creates and then merges.
    let applied = rayjob("ssa");
    let o = api
        .patch("ssa", &PatchParams::apply("test"), &Patch::Apply(&applied))
        .await
        .expect("apply");
    assert_eq!(o.data["spec"]["submissionMode"], "K8sJobMode");
    sim.shutdown().await;
}

fn owner_ref(kind: &str, api_version: &str, obj: &DynamicObject, block: bool) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": obj.metadata.name, "uid": obj.metadata.uid, "controller": true, "blockOwnerDeletion": block})
}

/// RayJob → RayCluster → Pod ownership chain.
async fn owned_chain(
    client: &kube::Client,
    name: &str,
    pod_finalizer: Option<&str>,
) -> (DynamicObject, DynamicObject, Pod) {
    let job = rayjobs(client)
        .create(&PostParams::default(), &dynamic(rayjob(name)))
        .await
        .expect("rayjob");
    let rc = json!({
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": format!("{name}-abcde"), "ownerReferences": [owner_ref("RayJob", "ray.io/v1", &job, true)]},
        "spec": rayjob(name)["spec"]["rayClusterSpec"].clone(),
    });
    let rc = rayclusters(client)
        .create(&PostParams::default(), &dynamic(rc))
        .await
        .expect("raycluster");
    let mut p = pod(&format!("{name}-head"), json!({}));
    p["metadata"]["ownerReferences"] = json!([owner_ref("RayCluster", "ray.io/v1", &rc, true)]);
    if let Some(f) = pod_finalizer {
        p["metadata"]["finalizers"] = json!([f]);
    }
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(p).expect("pod"),
        )
        .await
        .expect("pod");
    (job, rc, p)
}

#[tokio::test]
async fn an_object_created_for_an_owner_already_gone_is_collected() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    // A controller with a stale cache creates a pod for a RayCluster deleted meanwhile;
    // nothing else is written afterwards.
    let p = json!({
        "metadata": {"name": "late-head", "ownerReferences": [{
            "apiVersion": "ray.io/v1", "kind": "RayCluster", "name": "gone",
            "uid": "00000000-0000-0000-0000-00000000dead", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(p).expect("pod"),
    )
    .await
    .expect("create");
    eventually("the dangling dependent is collected", || async {
        pods.get_opt("late-head").await.expect("get").is_none()
    })
    .await;
}

#[tokio::test]
async fn garbage_collection_background_foreground_orphan() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let rcs = rayclusters(&client);

    // Background: the owner goes at once, dependents follow.
    owned_chain(&client, "bg", None).await;
    rayjobs(&client)
        .delete("bg", &DeleteParams::background())
        .await
        .expect("delete");
    assert!(rayjobs(&client).get_opt("bg").await.expect("get").is_none());
    eventually("background GC", || async {
        rcs.get_opt("bg-abcde").await.expect("get").is_none()
            && pods.get_opt("bg-head").await.expect("get").is_none()
    })
    .await;

    // Foreground: the owner waits (foregroundDeletion) until blocking dependents are
    // gone; a finalizer on the pod holds the whole chain.
    owned_chain(&client, "fg", Some("test/hold")).await;
    rayjobs(&client)
        .delete("fg", &DeleteParams::foreground())
        .await
        .expect("delete");
    let job = rayjobs(&client).get("fg").await.expect("still there");
    assert!(job.metadata.deletion_timestamp.is_some());
    assert!(
        job.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.contains(&"foregroundDeletion".to_owned()))
    );
    eventually("pod marked for deletion", || async {
        pods.get("fg-head")
            .await
            .is_ok_and(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await;
    holds_for(
        Duration::from_millis(300),
        "owner and cluster blocked by the held pod",
        || async {
            let owner = rayjobs(&client).get_opt("fg").await.expect("get");
            assert!(owner.is_some(), "owner blocked by dependents");
            let cluster = rcs.get_opt("fg-abcde").await.expect("get");
            assert!(cluster.is_some(), "cluster blocked by its pod");
            true
        },
    )
    .await;
    pods.patch(
        "fg-head",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    eventually("foreground chain gone", || async {
        rayjobs(&client).get_opt("fg").await.expect("get").is_none()
            && rcs.get_opt("fg-abcde").await.expect("get").is_none()
            && pods.get_opt("fg-head").await.expect("get").is_none()
    })
    .await;

    // Orphan: dependents stay, without the owner reference.
    owned_chain(&client, "or", None).await;
    rayjobs(&client)
        .delete(
            "or",
            &DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
                ..DeleteParams::default()
            },
        )
        .await
        .expect("delete");
    eventually("orphan owner gone", || async {
        rayjobs(&client).get_opt("or").await.expect("get").is_none()
    })
    .await;
    let rc = rcs.get("or-abcde").await.expect("orphan survives");
    assert!(
        rc.metadata
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty)
    );
    assert!(pods.get_opt("or-head").await.expect("get").is_some());
    sim.shutdown().await;
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api = rayjobs(&client);
    let mut j = rayjob("fin");
    j["metadata"]["finalizers"] = json!(["ray.io/rayjob-finalizer"]);
    api.create(&PostParams::default(), &dynamic(j))
        .await
        .expect("create");
    api.delete("fin", &DeleteParams::default())
        .await
        .expect("delete accepted");
    let o = api.get("fin").await.expect("still present");
    assert!(o.metadata.deletion_timestamp.is_some());
    // Status updates still work while terminating; removing the finalizer deletes it.
    api.patch_status(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"jobStatus": "STOPPED"}})),
    )
    .await
    .expect("status");
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "remove", "path": "/metadata/finalizers"}]))
                .expect("patch"),
        ),
    )
    .await
    .expect("remove finalizer");
    assert!(api.get_opt("fin").await.expect("get").is_none());
    sim.shutdown().await;
}

#[tokio::test]
async fn pod_logs_tail_and_follow() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("logger", json!({}))).expect("pod"),
    )
    .await
    .expect("create");
    let e = api_err(
        pods.logs("logger", &LogParams::default())
            .await
            .expect_err("not started"),
    );
    assert_eq!(e.code, 400);
    assert!(e.message.contains("is waiting to start"), "{}", e.message);
    let logs = sim.logs().clone();
    logs.append("starforge", "logger", "main", b"one\ntwo\nthree\n");
    assert_eq!(
        pods.logs("logger", &LogParams::default())
            .await
            .expect("logs"),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        pods.logs(
            "logger",
            &LogParams {
                tail_lines: Some(1),
                ..LogParams::default()
            }
        )
        .await
        .expect("tail"),
        "three\n"
    );
    let e = api_err(
        pods.logs(
            "logger",
            &LogParams {
                container: Some("nope".into()),
                ..LogParams::default()
            },
        )
        .await
        .expect_err("bad container"),
    );
    assert_eq!(e.code, 400);
    let stream = pods
        .log_stream(
            "logger",
            &LogParams {
                follow: true,
                tail_lines: Some(1),
                ..LogParams::default()
            },
        )
        .await
        .expect("follow");
    use futures::{AsyncBufReadExt, AsyncReadExt};
    let mut stream = Box::pin(stream);
    // The tail line first; only then does the kubelet write more and close the log.
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_line(&mut out))
        .await
        .expect("tail line arrives")
        .expect("read");
    assert_eq!(out, "three\n");
    logs.append("starforge", "logger", "main", b"four\n");
    logs.close("starforge", "logger", "main");
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut out))
        .await
        .expect("follow ends on close")
        .expect("read");
    assert_eq!(out, "three\nfour\n");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_lost_answer_fails_a_create_that_took_effect() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p: Pod = serde_json::from_value(pod("lost", json!({"app": "lost"}))).expect("pod");
    sim.faults().lose_answers(LoseAnswerRule {
        count: 2,
        matching: Matching::default().path_contains("/pods").verb("create"),
    });
    let e = api_err(
        pods.create(&PostParams::default(), &p)
            .await
            .expect_err("the answer is lost"),
    );
    assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    assert!(
        pods.get_opt("lost").await.expect("get").is_some(),
        "the create took effect"
    );
    // A retry finds it (409), and that answer is lost too; then answers come back.
    let e = api_err(
        pods.create(&PostParams::default(), &p)
            .await
            .expect_err("lost again"),
    );
    assert_eq!(e.code, 500);
    assert!(sim.faults().state().lost_answers.is_empty(), "rule used up");
    let e = api_err(
        pods.create(&PostParams::default(), &p)
            .await
            .expect_err("exists"),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(
        sim.created("pods")
            .iter()
            .filter(|c| c.name == "lost")
            .count(),
        1
    );
}

/// A crash after a create: the create is stored, its client and an open watch lose
/// their connections unanswered, nothing listens on the address for the down time,
/// then the same address serves the same store again.
#[tokio::test]
async fn a_crash_after_a_create_keeps_it_and_the_server_comes_back_on_its_address() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut watch = pods
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch")
        .boxed();
    let p: Pod = serde_json::from_value(pod("crashed", json!({"app": "crashed"}))).expect("pod");
    sim.faults().crash(CrashRule {
        down_ms: 1_500,
        matching: Matching::default().path_contains("/pods").verb("create"),
    });
    let e = pods
        .create(&PostParams::default(), &p)
        .await
        .expect_err("killed before answering");
    assert!(
        !matches!(e, kube::Error::Api(_)),
        "no answer, not an API error: {e:?}"
    );
    // The watch saw the create (served before the crash), then its stream ends.
    let mut ended = false;
    while let Ok(next) = tokio::time::timeout(Duration::from_secs(5), watch.next()).await {
        match next {
            None | Some(Err(_)) => {
                ended = true;
                break;
            }
            Some(Ok(_)) => {}
        }
    }
    assert!(ended, "the open watch was cut by the crash");
    // Down: nothing listens on the address.
    assert!(
        tokio::net::TcpStream::connect(sim.addr()).await.is_err(),
        "connection refused while down"
    );
    assert_eq!(sim.faults().state().crashed, 1);
    assert!(sim.faults().state().crashes.is_empty(), "rule used up");
    // Back on the same address, with the object the create stored.
    eventually("the server listens again with its store", || {
        let pods = pods.clone();
        async move { matches!(pods.get_opt("crashed").await, Ok(Some(_))) }
    })
    .await;
    assert_eq!(
        sim.created("pods")
            .iter()
            .filter(|c| c.name == "crashed")
            .count(),
        1
    );
}

#[tokio::test]
async fn fault_injection_errors_and_admin_endpoint() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    sim.faults().fail_next(2, 500);
    for _ in 0..2 {
        let e = api_err(
            nodes
                .list(&ListParams::default())
                .await
                .expect_err("injected"),
        );
        assert_eq!((e.code, e.reason.as_str()), (500, "InternalError"));
    }
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .expect("recovered")
            .items
            .len(),
        3
    );
    // Only requests whose query contains the rule's substring (a label selector).
    sim.faults().add_rule(FailRule {
        count: 1,
        code: 400,
        matching: Matching::default().verb("list").query_contains("gpu"),
        ..FailRule::default()
    });
    nodes
        .list(&ListParams::default())
        .await
        .expect("a list without the selector does not match");
    let e = api_err(
        nodes
            .list(&ListParams::default().labels("gpu=h100"))
            .await
            .expect_err("the list with the selector fails"),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(sim.faults().state().rules.is_empty(), "rule consumed");
    // 429 with Retry-After, only for a matching verb + path (raw TCP: no retries).
    let rule = FailRule {
        count: 1,
        code: 429,
        retry_after_seconds: Some(3),
        matching: Matching::default().path_contains("/nodes").verb("get"),
    };
    sim.faults().add_rule(rule.clone());
    nodes
        .list(&ListParams::default())
        .await
        .expect("list does not match a get rule");
    let (code, headers, body) = raw_http(sim.addr(), "GET", "/api/v1/nodes/h100-0").await;
    assert_eq!(code, 429);
    assert!(
        headers.contains(&("retry-after".to_owned(), "3".to_owned())),
        "{headers:?}"
    );
    let body: Value = serde_json::from_str(&body).expect("Status body");
    assert_eq!(
        (
            body["reason"].as_str(),
            body["details"]["retryAfterSeconds"].as_u64()
        ),
        (Some("TooManyRequests"), Some(3))
    );
    assert!(sim.faults().state().rules.is_empty(), "rule consumed");
    // The kube client itself retries a 429 after Retry-After.
    sim.faults().add_rule(FailRule {
        retry_after_seconds: Some(1),
        ..rule
    });
    nodes.get("h100-0").await.expect("client retried the 429");
    assert!(sim.faults().state().rules.is_empty(), "the 429 was served");
    // Over HTTP: a delay, then clear.
    let (code, _, state) = raw(
        &client,
        "POST",
        "/_sim/faults",
        Some("application/json"),
        Some(json!({"delayMs": 300})),
    )
    .await;
    assert_eq!((code, state["delayMs"].as_u64()), (200, Some(300)));
    let t = std::time::Instant::now();
    nodes.get("h100-0").await.expect("delayed get");
    assert!(t.elapsed() >= Duration::from_millis(300));
    let (code, _, _) = raw(
        &client,
        "POST",
        "/_sim/faults",
        Some("application/json"),
        Some(json!({"fail": {"count": 1, "code": 500, "verb": "create"}})),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _, state) = raw(&client, "DELETE", "/_sim/faults", None, None).await;
    assert_eq!(
        (
            code,
            state["rules"].as_array().map(Vec::len),
            state["delayMs"].as_u64()
        ),
        (200, Some(0), Some(0))
    );
    let (code, _, _) = raw(
        &client,
        "POST",
        "/_sim/faults",
        Some("application/json"),
        Some(json!({"bogus": 1, "delayMs": "x"})),
    )
    .await;
    assert_eq!(code, 400);
    sim.shutdown().await;
}

#[tokio::test]
async fn a_held_request_waits_until_released() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    sim.faults()
        .hold(HoldRule::default().path_contains("/nodes/").verb("get"));
    let get = tokio::spawn({
        let nodes = nodes.clone();
        async move { nodes.get("h100-0").await }
    });
    eventually("the get is held", || async {
        sim.faults().state().held == 1
    })
    .await;
    // Only matching requests wait: a list of the same resource is served meanwhile.
    let listed = nodes.list(&ListParams::default()).await.expect("list");
    assert_eq!(listed.items.len(), 3);
    holds_for(Duration::from_millis(300), "the get stays held", || async {
        !get.is_finished() && sim.faults().state().held == 1
    })
    .await;
    // Over HTTP: release lets it through; the state shows no hold and nothing held.
    let (code, _, _) = raw(
        &client,
        "POST",
        "/_sim/faults",
        Some("application/json"),
        Some(json!({"release": true})),
    )
    .await;
    assert_eq!(code, 200);
    let node = get.await.expect("join").expect("the held get is served");
    assert_eq!(node.metadata.name.as_deref(), Some("h100-0"));
    let state = sim.faults().state();
    assert!(state.holds.is_empty() && state.held == 0, "{state:?}");
    // A hold set over HTTP shows in the state; clearing the faults releases it too.
    let (code, _, state) = raw(
        &client,
        "POST",
        "/_sim/faults",
        Some("application/json"),
        Some(json!({"hold": {"pathContains": "/nodes/", "verb": "get"}})),
    )
    .await;
    assert_eq!(
        (code, state["holds"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let get = tokio::spawn(async move { nodes.get("h100-1").await });
    eventually("the second get is held", || async {
        sim.faults().state().held == 1
    })
    .await;
    // A held request whose client gives up (its future dropped, the stream reset) is
    // no longer counted; the other stays held.
    let abandoned = tokio::spawn({
        let nodes: Api<Node> = Api::all(client.clone());
        async move { nodes.get("h100-2").await }
    });
    eventually("the third get is held too", || async {
        sim.faults().state().held == 2
    })
    .await;
    abandoned.abort();
    eventually("the abandoned get no longer counted", || async {
        sim.faults().state().held == 1
    })
    .await;
    sim.faults().clear();
    get.await.expect("join").expect("clearing released the get");
    sim.shutdown().await;
}

#[tokio::test]
async fn a_hold_can_select_requests_by_their_query() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    // Lists selecting on the label `team` wait; other lists of nodes are served.
    sim.faults().hold(
        HoldRule::default()
            .path_contains("/nodes")
            .verb("list")
            .query_contains("team"),
    );
    let selected = tokio::spawn({
        let nodes = nodes.clone();
        async move { nodes.list(&ListParams::default().labels("team=a")).await }
    });
    eventually("the selecting list is held", || async {
        sim.faults().state().held == 1
    })
    .await;
    let all = nodes.list(&ListParams::default()).await.expect("list");
    assert_eq!(all.items.len(), 3, "a list without the selector is served");
    assert!(!selected.is_finished(), "the selecting list was served");
    sim.faults().release();
    let listed = selected.await.expect("join").expect("released list");
    assert!(listed.items.is_empty());
    sim.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_removes_its_content() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "tmp"}})).expect("ns"),
    )
    .await
    .expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "tmp");
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod("p", json!({}))).expect("pod"),
    )
    .await
    .expect("pod");
    nss.delete("tmp", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("namespace gone", || async {
        nss.get_opt("tmp").await.expect("get").is_none()
    })
    .await;
    assert!(pods.get_opt("p").await.expect("get").is_none());
    sim.shutdown().await;
}

#[test]
fn embedded_crds_are_byte_identical_to_kuberay() {
    let dir = std::path::Path::new("/work/shared/kuberay");
    if !dir.exists() {
        eprintln!("skipping: {} absent", dir.display());
        return;
    }
    for (file, embedded) in [
        ("ray.io_rayjobs.yaml", forge_kubesim::schema::RAYJOB_CRD),
        (
            "ray.io_rayclusters.yaml",
            forge_kubesim::schema::RAYCLUSTER_CRD,
        ),
    ] {
        let upstream = std::fs::read_to_string(dir.join(file)).expect("read upstream CRD");
        assert!(upstream == embedded, "{file} differs from the KubeRay copy");
    }
}

#[tokio::test]
async fn metadata_only_get_and_list() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let jobs = rayjobs(&client);
    for (name, team) in [("a", "red"), ("b", "red"), ("c", "blue")] {
        let mut obj = rayjob(name);
        obj["metadata"]["labels"] = json!({"team": team});
        jobs.create(&PostParams::default(), &dynamic(obj))
            .await
            .expect("create");
    }
    // kube-rs asks with `Accept: ...;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`.
    let list = jobs
        .list_metadata(&ListParams::default().labels("team=red"))
        .await
        .expect("metadata list");
    let names: Vec<_> = list
        .items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(list.metadata.resource_version.is_some());
    assert!(
        list.items
            .iter()
            .all(|o| o.metadata.resource_version.is_some() && o.metadata.labels.is_some())
    );

    // The raw answer has the metadata kinds and nothing but metadata.
    let req = http::Request::get(
        "/apis/ray.io/v1/namespaces/starforge/rayjobs?labelSelector=team%3Dblue",
    )
    .header(
        "accept",
        "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
    )
    .body(Vec::new())
    .expect("request");
    let body: Value = client.request(req).await.expect("raw metadata list");
    assert_eq!(body["kind"], "PartialObjectMetadataList");
    assert_eq!(body["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(body["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(body["items"][0]["metadata"]["name"], "c");
    assert!(body["items"][0].get("spec").is_none(), "{body}");

    let one = jobs.get_metadata("a").await.expect("metadata get");
    assert_eq!(
        one.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("team"))
            .map(String::as_str),
        Some("red")
    );
    // A plain read still gets the whole object.
    let whole = jobs.get("a").await.expect("get");
    assert!(whole.data.get("spec").is_some());
}
