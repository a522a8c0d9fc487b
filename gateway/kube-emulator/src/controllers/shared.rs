//! What every simulated controller of one cluster shares: the API client, the
//! configuration, pod logs, the pods' served endpoints, the simulated Ray dashboards, the volume attachments and
//! the shutdown token; and the `ray.io/v1` API resources they address.

use std::sync::Arc;

use kube::core::{ApiResource, GroupVersionKind};
use tokio_util::sync::CancellationToken;

use super::attach::Attachments;
use super::config::ControllerConfig;
use super::dashboard::Dashboard;
use super::memory_limit::OomKills;
use crate::endpoints::PodEndpoints;
use crate::logs::LogStore;

/// State shared by all controllers of one simulated cluster.
pub struct Shared {
    /// API client.
    pub client: kube::Client,
    /// Configuration.
    pub cfg: ControllerConfig,
    /// Pod logs written by the kubelet.
    pub logs: Arc<LogStore>,
    /// What the pods serve (registered by the kubelet, read by the pod proxy).
    pub endpoints: Arc<PodEndpoints>,
    /// The simulated Ray dashboards (job table per cluster).
    pub dashboard: Arc<Dashboard>,
    /// Which node each persistent volume is attached to (attach/detach controller).
    pub attachments: Arc<Attachments>,
    /// Containers process mode killed for going over their memory limit.
    pub ooms: OomKills,
    /// Cancelled on shutdown.
    pub shutdown: CancellationToken,
}

/// `ray.io/v1` RayJob.
pub fn rayjob_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("ray.io", "v1", "RayJob"), "rayjobs")
}

/// `ray.io/v1` RayCluster.
pub fn raycluster_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ray.io", "v1", "RayCluster"),
        "rayclusters",
    )
}
