//! [`Jobs`]: the job domain, as the rest of the gateway sees it — one [`JobCore`] (the
//! owner of job state) and the services that hold it: submission ([`Submissions`]),
//! dispatch ([`Dispatcher`]), the RayJob lifecycle with clean-up and cancellation
//! ([`Lifecycle`]), and a job's logs and diagnosis ([`JobLogs`]). Each service lives in
//! its own file or folder; nothing here knows HTTP.

use std::sync::Arc;

use crate::admission::Admission;
use crate::auth::Caller;
use crate::cluster::Fleets;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::objects::ObjectStore;
use crate::store::{CapsuleStore, JobRecord, JobStore};

use super::capsule_links::CapsuleLinks;
use super::claims::Claims;
use super::core::JobCore;
use super::dispatch::Dispatcher;
use super::error::JobError;
use super::feed::JobFeed;
use super::job_access::JobAccess;
use super::lifecycle::Lifecycle;
use super::logs::JobLogs;
use super::pod_links::PodLinks;
use super::queue::QueueBoard;
use super::records::RecordCache;
use super::submit::Submissions;

/// The job domain: its core and its services (cheap to clone).
#[derive(Clone)]
pub struct Jobs {
    pub core: JobCore,
    pub submissions: Submissions,
    pub dispatcher: Dispatcher,
    pub lifecycle: Lifecycle,
    pub logs: JobLogs,
    /// The fleets' cluster adapters.
    pub fleets: Fleets,
    /// Object storage (capsules, archived logs).
    pub objects: Arc<dyn ObjectStore>,
    /// How a job meets the policy (the dry-run review asks it too), and the teams'
    /// usage the dispatcher publishes to it.
    pub admission: Admission,
}

/// What the job services act on.
pub struct JobParts {
    pub config: Arc<Config>,
    pub store: Arc<dyn JobStore>,
    /// The job feed (`feed_tail::feed_for`: shared and tailed on PostgreSQL).
    pub feed: JobFeed,
    pub capsules: Arc<dyn CapsuleStore>,
    pub metrics: Arc<Metrics>,
    pub queue: Arc<QueueBoard>,
    pub admission: Admission,
    pub fleets: Fleets,
    pub objects: Arc<dyn ObjectStore>,
    /// Capsule links for `working_dir` and the job's API access (`pod_links.rs`),
    /// when the gateway knows the URL pods reach it at; otherwise pods get the object
    /// store's URL and no job access.
    pub links: Option<PodLinks>,
}

impl std::fmt::Debug for Jobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Jobs")
    }
}

impl Jobs {
    /// The job domain over these parts.
    pub fn new(parts: JobParts) -> Self {
        let core = JobCore::new(
            parts.config,
            parts.store,
            parts.feed,
            parts.metrics,
            parts.queue,
        );
        // The dispatcher's copy of unfinished jobs' records (a follower's board is
        // refreshed from it too).
        let records: Arc<RecordCache> = Arc::default();
        // Dispatches whose RayJob create is in flight here: the lifecycle leaves them
        // to the create.
        let creating: Arc<Claims> = Arc::default();
        let logs = JobLogs::new(core.clone(), parts.fleets.clone(), parts.objects.clone());
        Jobs {
            submissions: Submissions::new(
                core.clone(),
                parts.admission.clone(),
                parts.capsules,
                parts.objects.clone(),
            ),
            dispatcher: Dispatcher::new(
                core.clone(),
                parts.admission.clone(),
                parts.fleets.clone(),
                parts.objects.clone(),
                parts.links.map(Arc::new),
                records.clone(),
                creating.clone(),
            ),
            lifecycle: Lifecycle::new(
                core.clone(),
                parts.fleets.clone(),
                parts.objects.clone(),
                creating,
                logs.clone(),
            ),
            logs,
            objects: parts.objects,
            admission: parts.admission,
            fleets: parts.fleets,
            core,
        }
    }

    /// The store (reads: lists, history, decisions).
    pub fn store(&self) -> &dyn JobStore {
        self.core.store.as_ref()
    }

    /// The feed of job changes (`feed.rs`).
    pub fn feed(&self) -> &JobFeed {
        &self.core.feed
    }

    /// The dispatcher's published queue view.
    pub fn queue(&self) -> &Arc<QueueBoard> {
        &self.core.queue
    }

    /// The capsule links pods fetch capsules through, if the gateway hands them out
    /// (the routes that serve them are mounted then).
    pub fn capsule_links(&self) -> Option<&CapsuleLinks> {
        self.dispatcher.links.as_deref().map(|l| &l.capsules)
    }

    /// The job tokens and URLs jobs reach the gateway with, if it hands them out.
    pub fn job_access(&self) -> Option<&JobAccess> {
        self.dispatcher.links.as_deref().map(|l| &l.jobs)
    }

    /// A job the caller may see (another team's job is "not found").
    pub async fn visible(&self, caller: &Caller, id: &str) -> Result<JobRecord, JobError> {
        self.core.visible(caller, id).await
    }
}
