//! How the simulated controllers write status: a JSON merge patch of `.status`
//! through the `/status` subresource, and `metav1.Time` timestamps (RFC 3339, second
//! precision) for the fields they stamp.

use std::fmt::Debug;

use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Now, rendered like `metav1.Time`.
pub fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Merges `status` into the `.status` of object `name` through `/status`.
pub async fn merge_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Clone + DeserializeOwned + Debug,
{
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
}
