//! Reading a job's logs: the archived copy once the job ended, the live pod's log
//! before that.

use bytes::Bytes;

use super::error::JobError;
use super::service::Jobs;
use crate::cluster::LogSource;
use crate::objects::{ObjectStoreError, log_key};
use crate::store::JobRecord;

impl Jobs {
    /// A job's `source` log: archived if it is, else live from the cluster while the
    /// pod exists.
    pub async fn log(&self, job: &JobRecord, source: LogSource) -> Result<Bytes, JobError> {
        let key = log_key(&job.id, source.as_str())?;
        match self.objects.get_object(&key).await {
            Ok(bytes) => return Ok(bytes),
            Err(ObjectStoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(live) = self.live_log(job, source).await {
            return Ok(Bytes::from(live));
        }
        Err(JobError::LogNotAvailable {
            id: job.id.clone(),
            source_: source,
            state: job.state,
        })
    }

    /// The current log of a job's pod, if it can be read.
    async fn live_log(&self, job: &JobRecord, source: LogSource) -> Option<String> {
        let rayjob = job.rayjob_name.as_deref()?;
        let pods = &self.cluster.pods;
        let (pod, container) = pods.log_pod(&job.id, rayjob, source).await.ok()??;
        let name = kube::ResourceExt::name_any(&pod);
        pods.log(&name, container, None).await.ok()
    }
}
