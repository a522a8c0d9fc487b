//! The operator's client of a real Ray head's Jobs API (KubeRay's dashboard client):
//! `GET /api/jobs/<submission id>` for the job's status, `POST …/stop` when its RayJob
//! is deleted. Only the fields the operator copies into the RayJob are read.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

/// Each call's deadline (KubeRay's client uses 2 s for most of its calls).
const TIMEOUT: Duration = Duration::from_secs(5);

/// A Jobs API call that got no usable answer (the head is starting, or gone).
#[derive(Debug, thiserror::Error)]
#[error("Ray Jobs API at {addr}: {reason}")]
pub struct JobsApiError {
    addr: SocketAddr,
    reason: String,
}

/// The fields of Ray's `JobDetails` the operator reads.
#[derive(Debug, Deserialize)]
pub struct JobDetails {
    /// PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED.
    pub status: String,
    #[serde(default)]
    pub message: Option<String>,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub start_time: Option<i64>,
    /// Milliseconds since the epoch.
    #[serde(default)]
    pub end_time: Option<i64>,
}

fn client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .timeout(TIMEOUT)
            .no_proxy()
            .build()
            .unwrap_or_default()
    })
}

/// `GET /api/jobs/<id>` on the dashboard at `addr`; `Ok(None)` is its 404.
pub async fn job_info(addr: SocketAddr, id: &str) -> Result<Option<JobDetails>, JobsApiError> {
    let err = |reason: String| JobsApiError { addr, reason };
    let resp = client()
        .get(format!("http://{addr}/api/jobs/{id}"))
        .send()
        .await
        .map_err(|e| err(e.to_string()))?;
    if resp.status() == reqwest::StatusCode::NOT_FOUND {
        return Ok(None);
    }
    let resp = resp.error_for_status().map_err(|e| err(e.to_string()))?;
    resp.json().await.map(Some).map_err(|e| err(e.to_string()))
}

/// `POST /api/jobs/<id>/stop`: whether the head stopped a running job.
pub async fn stop(addr: SocketAddr, id: &str) -> Result<bool, JobsApiError> {
    let err = |reason: String| JobsApiError { addr, reason };
    #[derive(Deserialize)]
    struct Stopped {
        stopped: bool,
    }
    let resp = client()
        .post(format!("http://{addr}/api/jobs/{id}/stop"))
        .send()
        .await
        .map_err(|e| err(e.to_string()))?
        .error_for_status()
        .map_err(|e| err(e.to_string()))?;
    let s: Stopped = resp.json().await.map_err(|e| err(e.to_string()))?;
    Ok(s.stopped)
}
