//! A job's pods as Forge looks them up — the driver (the RayJob's submitter pod) and
//! the head (the pod of machine zero) — and their logs. One lookup each, used by the
//! live log endpoint, log archival and diagnosis alike.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};

use super::api_error::with_retry;
use super::labels::{JOB_NAME, LABEL_JOB_ID, RAY_NODE_TYPE, SUBMITTER_CONTAINER};

/// Which log of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogSource {
    /// The driver: the submitter pod's `ray-job-submitter` container.
    Driver,
    /// The head pod's Ray container.
    Head,
}

impl LogSource {
    /// Every source, in archival order.
    pub const ALL: [LogSource; 2] = [LogSource::Driver, LogSource::Head];

    /// Its name in the API (`?name=`) and in archive keys.
    pub fn as_str(self) -> &'static str {
        match self {
            LogSource::Driver => "driver",
            LogSource::Head => "head",
        }
    }

    /// The source a name means.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// Pods in the gateway's namespace.
#[derive(Clone)]
pub struct Pods {
    api: Api<Pod>,
}

impl std::fmt::Debug for Pods {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pods")
    }
}

impl Pods {
    /// The pods of `namespace`.
    pub fn new(client: Client, namespace: &str) -> Self {
        Pods {
            api: Api::namespaced(client, namespace),
        }
    }

    /// Pods matching a label selector.
    pub async fn list(&self, selector: &str) -> Result<Vec<Pod>, kube::Error> {
        let lp = ListParams::default().labels(selector);
        Ok(with_retry(|| self.api.list(&lp)).await?.items)
    }

    /// Every pod of a job: its Ray pods (labelled with the job id) and its submitter
    /// pods (labelled with the RayJob's Job name).
    pub async fn of_job(&self, job_id: &str, rayjob: &str) -> Result<Vec<Pod>, kube::Error> {
        let mut pods = self.list(&format!("{LABEL_JOB_ID}={job_id}")).await?;
        for p in self.list(&format!("{JOB_NAME}={rayjob}")).await? {
            if !pods.iter().any(|q| q.name_any() == p.name_any()) {
                pods.push(p);
            }
        }
        Ok(pods)
    }

    /// The newest pod holding a job's `source` log (a retried submitter leaves
    /// several), and the container to read.
    pub async fn log_pod(
        &self,
        job_id: &str,
        rayjob: &str,
        source: LogSource,
    ) -> Result<Option<(Pod, Option<&'static str>)>, kube::Error> {
        let (selector, container) = match source {
            LogSource::Driver => (format!("{JOB_NAME}={rayjob}"), Some(SUBMITTER_CONTAINER)),
            LogSource::Head => (
                format!("{LABEL_JOB_ID}={job_id},{RAY_NODE_TYPE}=head"),
                None,
            ),
        };
        let pods = self.list(&selector).await?;
        Ok(pods
            .into_iter()
            .max_by_key(|p| p.metadata.creation_timestamp.clone())
            .map(|p| (p, container)))
    }

    /// A pod's log as a byte stream: what it holds now, or (`follow`) as it is written
    /// until the container exits (or the API server closes it). Read in chunks by the
    /// caller, never whole.
    pub async fn log_stream(
        &self,
        pod: &str,
        container: Option<&str>,
        follow: bool,
    ) -> Result<std::pin::Pin<Box<dyn futures::AsyncBufRead + Send>>, kube::Error> {
        let params = LogParams {
            container: container.map(str::to_string),
            follow,
            ..LogParams::default()
        };
        let reader = with_retry(|| self.api.log_stream(pod, &params)).await?;
        Ok(Box::pin(reader))
    }

    /// The last `lines` lines (at most `limit_bytes`) of a container's *previous*
    /// instance (`previous=true`: the last terminated one), for a crash loop's cause.
    pub async fn previous_tail(
        &self,
        pod: &str,
        container: &str,
        lines: i64,
        limit_bytes: i64,
    ) -> Result<String, kube::Error> {
        let params = LogParams {
            container: Some(container.to_string()),
            previous: true,
            tail_lines: Some(lines),
            limit_bytes: Some(limit_bytes),
            ..LogParams::default()
        };
        with_retry(|| self.api.logs(pod, &params)).await
    }
}
