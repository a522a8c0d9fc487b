//! Stopping a RayJob's Ray job the way `ray job stop` does — `POST
//! /api/jobs/<submission id>/stop` on its head's dashboard — reached through the API
//! server's pod proxy with the gateway's own credentials (as the playground's servers
//! are; the gateway may run outside the cluster network). Ray's job supervisor then
//! sends the driver's process group SIGTERM and, after `RAY_JOB_STOP_WAIT_TIME_S`
//! (the job's grace, set in its runtime env), SIGKILL; the job ends `STOPPED`.
//!
//! KubeRay's own `suspend` is not used: it deletes the cluster at once, with no
//! signal to the driver and no grace.

use kube::ResourceExt;

use super::labels::RAY_NODE_TYPE;
use super::{Cluster, RayJob, pod_proxy};

/// The Ray dashboard's port on the head.
const DASHBOARD_PORT: u16 = 8265;

/// Why a stop did not reach the Ray job.
#[derive(Debug, thiserror::Error)]
pub enum StopError {
    /// KubeRay has not reported the job's submission id or cluster yet.
    #[error("the RayJob has no Ray job yet")]
    NotSubmitted,
    /// The cluster has no head pod.
    #[error("the Ray head of cluster {0} is not there")]
    NoHead(String),
    /// The API server or the dashboard failed.
    #[error("asking the Ray dashboard failed: {0}")]
    Api(#[from] kube::Error),
    /// The dashboard answered with an error.
    #[error("the Ray dashboard answered {0}")]
    Refused(http::StatusCode),
}

impl StopError {
    /// Whether sending the stop again may succeed: the API server or the dashboard
    /// failed for a moment (throttled, a server error, no answer).
    pub fn is_transient(&self) -> bool {
        match self {
            StopError::Api(e) => super::api_error::transient(e),
            StopError::Refused(code) => code.is_server_error() || code.as_u16() == 429,
            StopError::NotSubmitted | StopError::NoHead(_) => false,
        }
    }
}

/// Asks the head of `rayjob`'s cluster to stop its Ray job.
pub async fn stop_ray_job(cluster: &Cluster, rayjob: &RayJob) -> Result<(), StopError> {
    let status = rayjob.status_or_default();
    let (Some(id), Some(name)) = (status.job_id, status.ray_cluster_name) else {
        return Err(StopError::NotSubmitted);
    };
    let heads = cluster
        .pods
        .list(&format!("ray.io/cluster={name},{RAY_NODE_TYPE}=head"))
        .await?;
    let Some(head) = heads
        .iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
    else {
        return Err(StopError::NoHead(name));
    };
    let resp = pod_proxy::send(
        &cluster.client,
        &cluster.namespace,
        &head.name_any(),
        DASHBOARD_PORT,
        http::Method::POST,
        &format!("/api/jobs/{id}/stop"),
        http::HeaderMap::new(),
        bytes::Bytes::new(),
    )
    .await?;
    if resp.status.is_success() {
        Ok(())
    } else {
        Err(StopError::Refused(resp.status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_moment_s_failure_is_worth_sending_the_stop_again() {
        let api = |code: u16| {
            StopError::Api(kube::Error::Api(
                kube::core::Status::failure("x", "Reason")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert!(api(503).is_transient());
        assert!(api(429).is_transient());
        assert!(!api(403).is_transient());
        assert!(StopError::Refused(http::StatusCode::BAD_GATEWAY).is_transient());
        assert!(!StopError::Refused(http::StatusCode::NOT_FOUND).is_transient());
        assert!(!StopError::NotSubmitted.is_transient());
        assert!(!StopError::NoHead("c".into()).is_transient());
    }
}
