//! The Ray dashboard of a job that is starting or running: KubeRay's in-cluster address
//! (`status.dashboardURL`, `<cluster>-head-svc.<namespace>.svc.cluster.local:8265`, no
//! scheme) and the `kubectl port-forward` command that reaches it from a laptop.
//!
//! *Decision*: the address is shown to whoever may see the job (the job's team and
//! admins); it is only reachable from inside the cluster, and the hint names the
//! head Service, not a pod, so it survives a head restart.

use serde::Serialize;

use super::JobLogs;
use crate::cluster::RayJob;
use crate::domain::JobState;
use crate::jobs::error::JobError;
use crate::jobs::job_fleet::cluster_of;
use crate::store::JobRecord;

/// The dashboard port of a Ray head.
const DASHBOARD_PORT: u16 = 8265;

/// Where a job's Ray dashboard is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Dashboard {
    /// In-cluster URL (`http://<head service>.<namespace>.svc.cluster.local:8265`).
    pub url: String,
    /// The command that forwards it to `http://localhost:8265`.
    pub port_forward: String,
}

/// The dashboard of a RayJob whose status names one.
pub fn dashboard_of(rayjob: &RayJob, namespace: &str) -> Option<Dashboard> {
    let address = rayjob.status.as_ref()?.dashboard_url.as_deref()?.trim();
    let address = address
        .strip_prefix("http://")
        .or_else(|| address.strip_prefix("https://"))
        .unwrap_or(address);
    let host = address.split([':', '/']).next().filter(|h| !h.is_empty())?;
    let service = host.split('.').next()?;
    Some(Dashboard {
        url: format!("http://{address}"),
        port_forward: format!(
            "kubectl -n {namespace} port-forward svc/{service} {DASHBOARD_PORT}:{DASHBOARD_PORT}"
        ),
    })
}

impl JobLogs {
    /// The dashboard of a job that is initializing or running (`None` otherwise, or
    /// while KubeRay has not reported it), within [`super::CLUSTER_READ_WITHIN`].
    pub async fn dashboard(&self, job: &JobRecord) -> Result<Option<Dashboard>, JobError> {
        if !matches!(job.state, JobState::Initializing | JobState::Running) {
            return Ok(None);
        }
        let Some(name) = &job.rayjob_name else {
            return Ok(None);
        };
        let cluster = cluster_of(&self.fleets, job)?;
        let rayjob = super::within("the job's RayJob", async {
            Ok(cluster.rayjobs.get(name).await?)
        })
        .await?;
        Ok(rayjob.and_then(|r| dashboard_of(&r, &cluster.namespace)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::RayJobStatus;
    use crate::cluster::rayjob_crd::RayJobSpec;

    fn with_url(url: Option<&str>) -> RayJob {
        let mut rj = RayJob::new("rj", RayJobSpec::default());
        rj.status = Some(RayJobStatus {
            dashboard_url: url.map(str::to_string),
            ..RayJobStatus::default()
        });
        rj
    }

    #[test]
    fn url_and_port_forward_from_kuberay_status() {
        let d = dashboard_of(
            &with_url(Some(
                "job-abc-raycluster-x-head-svc.starforge.svc.cluster.local:8265",
            )),
            "starforge",
        )
        .expect("dashboard");
        assert_eq!(
            d.url,
            "http://job-abc-raycluster-x-head-svc.starforge.svc.cluster.local:8265"
        );
        assert_eq!(
            d.port_forward,
            "kubectl -n starforge port-forward svc/job-abc-raycluster-x-head-svc 8265:8265"
        );
        let with_scheme = dashboard_of(&with_url(Some("http://h-head-svc.ns.svc:8265")), "ns")
            .expect("dashboard");
        assert_eq!(with_scheme.url, "http://h-head-svc.ns.svc:8265");
        assert_eq!(dashboard_of(&with_url(None), "ns"), None);
        assert_eq!(dashboard_of(&with_url(Some("")), "ns"), None);
        assert_eq!(
            dashboard_of(&RayJob::new("rj", RayJobSpec::default()), "ns"),
            None
        );
    }
}
