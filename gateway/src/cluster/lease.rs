//! The leader lease as a `coordination.k8s.io/v1` Lease in the gateway's namespace
//! ([`LEASE_NAME`]), so `kubectl get lease` shows who leads. A **mirror** only: the
//! authoritative lease, and its fencing epoch, is the row in the store; the Lease is
//! written (server-side apply) by the leader after each acquisition and renewal, with
//! the store's times and `leaseTransitions` = epoch − 1. An API server that does not
//! serve Leases, or refuses the write, costs a log line, never leadership.

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::api_error::{Failure, classify};
use crate::store::Lease;

/// The Lease's name (the deploy manifests' RBAC names it).
pub const LEASE_NAME: &str = "forge-gateway-leader";
/// The field manager of the server-side apply.
const MANAGER: &str = "forge-gateway";

/// Writes Leases in the gateway's namespace.
#[derive(Clone)]
pub struct LeaseMirror {
    api: Api<k8s_openapi::api::coordination::v1::Lease>,
}

impl std::fmt::Debug for LeaseMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaseMirror")
    }
}

/// Why a mirror write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// The API server does not serve `coordination.k8s.io/v1` Leases.
    #[error("the API server does not serve coordination.k8s.io/v1 Leases")]
    NotServed,
    /// Any other failure (forbidden, unreachable, …).
    #[error("writing Lease {LEASE_NAME}: {0}")]
    Api(kube::Error),
}

/// RFC 3339 with microseconds, as `MicroTime` is written.
fn micro_time(ms: i64) -> serde_json::Value {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms)
        .map(|t| json!(t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()))
        .unwrap_or(serde_json::Value::Null)
}

impl LeaseMirror {
    /// Leases of `namespace`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        LeaseMirror {
            api: Api::namespaced(client, namespace),
        }
    }

    /// Writes `lease` (held for `duration_s` seconds from its renewal) as the Lease.
    pub async fn write(&self, lease: &Lease, duration_s: i32) -> Result<(), MirrorError> {
        let mut labels = serde_json::Map::new();
        labels.insert(
            super::labels::LABEL_MANAGED_BY.into(),
            super::labels::MANAGED_BY.into(),
        );
        let body = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "labels": labels},
            "spec": {
                "holderIdentity": lease.holder,
                "leaseDurationSeconds": duration_s,
                "acquireTime": micro_time(lease.acquired_at_ms),
                "renewTime": micro_time(lease.renewed_at_ms),
                "leaseTransitions": i32::try_from(lease.epoch.saturating_sub(1)).unwrap_or(i32::MAX),
            }
        });
        let pp = PatchParams::apply(MANAGER).force();
        match self.api.patch(LEASE_NAME, &pp, &Patch::Apply(&body)).await {
            Ok(_) => Ok(()),
            Err(e) if classify(&e) == Failure::NotFound => Err(MirrorError::NotServed),
            Err(e) => Err(MirrorError::Api(e)),
        }
    }

    /// The Lease as the API server holds it (tests, `kubectl`-like reads).
    pub async fn read(
        &self,
    ) -> Result<Option<k8s_openapi::api::coordination::v1::Lease>, kube::Error> {
        self.api.get_opt(LEASE_NAME).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_have_microseconds() {
        assert_eq!(
            micro_time(1_700_000_000_123),
            json!("2023-11-14T22:13:20.123000Z")
        );
    }
}
