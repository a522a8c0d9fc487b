//! `coordination.k8s.io/v1` Leases used the way leader electors use them: client-go's
//! `tryAcquireOrRenew` (get, create, or replace carrying the resourceVersion that was
//! read — a stale one is 409 Conflict, so of two candidates racing for an expired
//! lease exactly one wins), the real validation, discovery, watches, and the
//! `kube-lease-manager` crate (strategic merge patches and server-side apply) electing
//! one leader at a time.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube_lease_manager::LeaseManagerBuilder;
use serde_json::json;

use crate::support::{NS, api_err, raw, start_bare, wait_for};

const LEASE: &str = "forge-gateway-leader";

/// One candidate of client-go's leader election (`leaderelection.go`
/// `tryAcquireOrRenew`), with the Lease it last read.
struct Candidate {
    api: Api<Lease>,
    identity: String,
    duration_secs: i32,
    observed: Option<Lease>,
}

impl Candidate {
    fn new(client: &kube::Client, identity: &str, duration_secs: i32) -> Self {
        Self {
            api: Api::namespaced(client.clone(), NS),
            identity: identity.into(),
            duration_secs,
            observed: None,
        }
    }

    /// Reads the Lease, then acquires or renews it if it is free, expired or ours.
    async fn try_acquire_or_renew(&mut self) -> bool {
        let now = MicroTime(Timestamp::now());
        let Some(current) = self.api.get_opt(LEASE).await.expect("get lease") else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE.into()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observed = Some(l);
                    true
                }
                Err(e) => {
                    assert_eq!(api_err(e).reason, "AlreadyExists");
                    false
                }
            };
        };
        self.observed = Some(current.clone());
        self.replace_if_allowed(current, now).await
    }

    /// The update step alone, on `lease` as this candidate last saw it.
    async fn replace_if_allowed(&mut self, lease: Lease, now: MicroTime) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let expires = spec.renew_time.as_ref().map(|t| {
            t.0 + SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)))
        });
        if !holder.is_empty()
            && holder != self.identity
            && expires.is_some_and(|e| e > Timestamp::now())
        {
            return false;
        }
        let mut next = lease;
        let mut spec = spec;
        if holder != self.identity {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.acquire_time = Some(now.clone());
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(self.duration_secs);
        spec.renew_time = Some(now);
        next.spec = Some(spec);
        match self.api.replace(LEASE, &PostParams::default(), &next).await {
            Ok(l) => {
                self.observed = Some(l);
                true
            }
            Err(e) => {
                let s = api_err(e);
                assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"), "{s:?}");
                false
            }
        }
    }
}

fn holder(l: &Lease) -> String {
    l.spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn client_go_style_election_fails_over_and_fences_stale_writers() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let mut watch = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("watch leases")
        .boxed();
    let mut a = Candidate::new(&client, "gateway-a", 1);
    let mut b = Candidate::new(&client, "gateway-b", 1);

    assert!(a.try_acquire_or_renew().await, "a creates the lease");
    assert!(!b.try_acquire_or_renew().await, "b sees it held");
    let first = a.observed.clone().expect("lease");
    assert!(
        first.metadata.generation.is_none(),
        "leases have no generation"
    );
    assert!(a.try_acquire_or_renew().await, "a renews");
    let renewed = a.observed.clone().expect("lease");
    assert_ne!(
        renewed.metadata.resource_version, first.metadata.resource_version,
        "a renewal is a write"
    );
    match watch.next().await.expect("event").expect("ok") {
        WatchEvent::Added(l) => assert_eq!(holder(&l), "gateway-a"),
        other => panic!("expected ADDED, got {other:?}"),
    }

    // a stops renewing; once the lease expires b takes it over (a transition).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !b.try_acquire_or_renew().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b never acquired the expired lease"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let taken = api.get(LEASE).await.expect("lease");
    let spec = taken.spec.clone().expect("spec");
    assert_eq!(holder(&taken), "gateway-b");
    assert_eq!(spec.lease_transitions, Some(1));
    assert!(spec.acquire_time > renewed.spec.as_ref().and_then(|s| s.acquire_time.clone()));

    // a, resuming with what it read before, cannot overwrite b: its resourceVersion is
    // stale (the fencing client-go relies on).
    let stale = renewed.clone();
    let mut stale_write = stale.clone();
    stale_write.spec.as_mut().expect("spec").renew_time = Some(MicroTime(Timestamp::now()));
    let e = api_err(
        api.replace(LEASE, &PostParams::default(), &stale_write)
            .await
            .expect_err("stale resourceVersion"),
    );
    assert_eq!(e.code, 409);
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"{LEASE}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    );
    assert!(!a.try_acquire_or_renew().await, "a now sees b's lease");
    assert_eq!(holder(&api.get(LEASE).await.expect("lease")), "gateway-b");

    // Two candidates racing for the same expired lease: both read it, both replace
    // with the resourceVersion they read; exactly one wins.
    let expired = wait_for(10, "b's lease to expire", || {
        let api = api.clone();
        async move {
            let l = api.get(LEASE).await.expect("lease");
            let s = l.spec.clone().expect("spec");
            let end = s.renew_time.expect("renewed").0
                + SignedDuration::from_secs(i64::from(s.lease_duration_seconds.expect("dur")));
            (end <= Timestamp::now()).then_some(l)
        }
    })
    .await;
    let mut c = Candidate::new(&client, "gateway-c", 1);
    let mut d = Candidate::new(&client, "gateway-d", 1);
    let now = MicroTime(Timestamp::now());
    let (won_c, won_d) = tokio::join!(
        c.replace_if_allowed(expired.clone(), now.clone()),
        d.replace_if_allowed(expired, now)
    );
    assert!(won_c ^ won_d, "exactly one of two racing candidates wins");
    let winner = if won_c { "gateway-c" } else { "gateway-d" };
    let l = api.get(LEASE).await.expect("lease");
    assert_eq!(holder(&l), winner);
    assert_eq!(l.spec.and_then(|s| s.lease_transitions), Some(2));
    sim.shutdown().await;
}

#[tokio::test]
async fn leases_are_validated_and_discoverable() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let bad = Lease {
        metadata: ObjectMeta {
            name: Some("bad".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            lease_duration_seconds: Some(0),
            lease_transitions: Some(-1),
            ..Default::default()
        }),
    };
    let e = api_err(
        api.create(&PostParams::default(), &bad)
            .await
            .expect_err("invalid"),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Lease.coordination.k8s.io \"bad\" is invalid: [spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0, spec.leaseTransitions: Invalid value: -1: must be greater than or equal to 0]"
    );
    let (code, _, doc) = raw(&client, "GET", "/apis/coordination.k8s.io/v1", None, None).await;
    assert_eq!(code, 200);
    let leases = doc["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "leases")
        .expect("leases served")
        .clone();
    assert_eq!(leases["kind"], "Lease");
    assert_eq!(leases["namespaced"], true);
    for verb in [
        "create", "get", "list", "watch", "update", "patch", "delete",
    ] {
        assert!(
            leases["verbs"]
                .as_array()
                .expect("verbs")
                .contains(&json!(verb)),
            "{verb}"
        );
    }
    let (_, _, groups) = raw(&client, "GET", "/apis", None, None).await;
    assert!(
        groups["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .any(|g| g["name"] == "coordination.k8s.io"),
        "{groups}"
    );
    sim.shutdown().await;
}

/// `kube-lease-manager` (kube 5): one leader at a time; the other takes over when the
/// leader releases the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_lease_manager_elects_one_leader_at_a_time() {
    let sim = start_bare().await;
    let client = sim.client().expect("client");
    let manager = |identity: &str| {
        LeaseManagerBuilder::new(client.clone(), "kube-lease-manager-test")
            .with_namespace(NS)
            .with_identity(identity)
            .with_duration(3)
            .with_grace(1)
            .build()
    };
    let a = manager("replica-a").await.expect("manager a");
    assert!(a.changed().await.expect("a changes"), "a leads");
    let b = manager("replica-b").await.expect("manager b");
    let (b_state, b_task) = b.watch().await;
    let api: Api<Lease> = Api::namespaced(client.clone(), NS);
    let l = api.get("kube-lease-manager-test").await.expect("lease");
    assert_eq!(holder(&l), "replica-a");
    assert!(
        !*b_state.borrow(),
        "b does not lead while a holds the lease"
    );
    a.release().await.expect("release");
    wait_for(20, "b to take over", || {
        let leading = *b_state.borrow();
        async move { leading.then_some(()) }
    })
    .await;
    let l = api.get("kube-lease-manager-test").await.expect("lease");
    assert_eq!(holder(&l), "replica-b");
    drop(b_state);
    let b = tokio::time::timeout(Duration::from_secs(10), b_task)
        .await
        .expect("b's watch ends when its channel closes")
        .expect("joined")
        .expect("released");
    drop(b);
    sim.shutdown().await;
}
