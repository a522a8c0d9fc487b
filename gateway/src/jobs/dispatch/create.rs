//! One job's dispatch: the stored intent (queued → dispatched, with the RayJob's name,
//! the placement and the decision), then the NetworkPolicy and the RayJob — and the
//! capsule reference the RayJob's pods fetch their code by.

use std::time::{Duration, Instant};

use forge_policy_host::model::Placement;

use super::Dispatcher;
use crate::cluster::api_error::{self, Failure};
use crate::cluster::{Cluster, CreateError, Created};
use crate::domain::JobState;
use crate::jobs::error::JobError;
use crate::manifests::{self, CapsuleRef, JobRef};
use crate::store::{AdmittedTerms, JobRecord, NewDecision, StoreError, Transition};
use crate::telemetry::job_trace::{JobTrace, LiveSpan};
use tracing::Instrument as _;

/// Longest a presigned capsule URL may live (S3's SigV4 limit).
const MAX_URL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl Dispatcher {
    /// The capsule as the RayJob references it.
    ///
    /// Pods fetch straight from the object store whenever that URL outlives the job,
    /// so a pod that starts while the gateway is down still gets its code:
    /// - plain-HTTP storage (the init container fetches and verifies): the store's URL
    ///   first, and the job's capsule link as the fallback when that fails — a pod
    ///   recreated after the presigned URL expired (at most 7 days) gets a fresh one
    ///   from the gateway;
    /// - `https` storage, which Ray fetches itself from one URL: the store's URL when
    ///   the job's deadlines end before it expires, else the capsule link (valid until
    ///   the job ends, however long; it needs an `https` gateway URL, since Ray
    ///   fetches only `https`). Without a link (no URL pods reach the gateway at, or
    ///   an `http` one) such a job's URL expires after 7 days.
    async fn capsule_ref(&self, job: &JobRecord) -> Result<CapsuleRef, JobError> {
        let digest = job
            .capsule_sha256
            .clone()
            .ok_or_else(|| JobError::Invariant(format!("job {} has no capsule", job.id)))?;
        let cfg = &self.core.config;
        let pre = crate::jobs::pre_running::deadline_s(&job.spec, cfg);
        let active = job.spec.deadlines.active_seconds;
        let lifetime = pre
            .saturating_add(active.unwrap_or(24 * 3600))
            .saturating_add(3600);
        let lifetime = Duration::from_secs(u64::try_from(lifetime).unwrap_or(0));
        let direct = self
            .objects
            .get_url(digest.as_str(), lifetime.min(MAX_URL_TTL))
            .await?;
        let link = self
            .links
            .as_ref()
            .map(|l| l.capsules.link(&job.id, &digest));
        if direct.scheme() == "http" {
            let init = forge_capsule::init_container(
                &direct,
                digest.as_str(),
                Some(&cfg.gateway.capsule_init_image),
            )
            .map_err(|e| JobError::io("capsule init container", e))?;
            let init = match &link {
                Some(link) => init.with_fallback(link),
                None => init,
            };
            return Ok(CapsuleRef {
                digest,
                working_dir_url: direct.to_string(),
                init: Some(init),
            });
        }
        let outlives = active.is_some() && lifetime <= MAX_URL_TTL;
        let url = match link {
            Some(link) if !outlives && link.scheme() == "https" => link,
            _ => direct,
        };
        Ok(CapsuleRef {
            digest,
            working_dir_url: url.to_string(),
            init: None,
        })
    }

    /// Dispatches one job: persists the intent, then creates (or adopts) its RayJob.
    /// Returns whether the job was dispatched (false when it was cancelled meanwhile,
    /// or is being dispatched by another pass of this process).
    /// `fleet` is the one the gang fit chose; `decision` (the admission that placed
    /// it) is stored with the dispatch.
    pub(super) async fn create(
        &self,
        job: &JobRecord,
        fleet: String,
        placement: Placement,
        decision: Option<NewDecision>,
        terms: AdmittedTerms,
    ) -> Result<bool, JobError> {
        self.create_in_span(job, fleet, placement, decision, terms)
            .instrument(JobTrace::span_of(job, LiveSpan::Dispatch))
            .await
    }

    /// [`Dispatcher::create`] inside the job's `forge.dispatch` span.
    async fn create_in_span(
        &self,
        job: &JobRecord,
        fleet: String,
        placement: Placement,
        decision: Option<NewDecision>,
        terms: AdmittedTerms,
    ) -> Result<bool, JobError> {
        let started = Instant::now();
        // The fit chooses among the configured fleets' nodes only: a fit in any other
        // fleet is a bug, not a job's.
        let Some(cluster) = self.fleets.get(&fleet).cloned() else {
            return Err(JobError::Invariant(format!(
                "job {} was fitted in fleet {fleet}, which this dispatcher does not drive",
                job.id
            )));
        };
        let capsule = self.capsule_ref(job).await?;
        let manifest = self.manifest(job, &cluster, &placement, &capsule).await?;
        let name = manifests::rayjob_name_of(&job.id, job.attempt);
        // In flight from before the intent is stored until the create returns: the
        // lifecycle controller's reconcile leaves the job to this create meanwhile. A
        // job already claimed is being dispatched here by another pass: leave it to it.
        let Some(_in_flight) = self.creating.try_claim(&job.id) else {
            return Ok(false);
        };
        if !self
            .store_intent(job, (&name, fleet), placement, decision, terms)
            .await?
        {
            return Ok(false);
        }
        // The intent is stored under this term; the create goes out only while the term
        // lasts (a deposed leader's stored intent is reconciled by its successor).
        self.core.may_act("create")?;
        self.core.metrics.rayjob_write("create");
        self.send(job, &cluster, &name, &manifest)
            .instrument(JobTrace::span_of(job, LiveSpan::RayJobCreate))
            .await?;
        self.core.metrics.dispatched(started.elapsed());
        Ok(true)
    }

    /// The RayJob of `job` as placed; a job that cannot run as placed fails (rather
    /// than being retried for ever).
    async fn manifest(
        &self,
        job: &JobRecord,
        cluster: &Cluster,
        placement: &Placement,
        capsule: &CapsuleRef,
    ) -> Result<crate::cluster::RayJob, JobError> {
        let view = JobRef {
            id: &job.id,
            team: &job.team,
            spec: &job.spec,
            instance: cluster.rayjobs.instance(),
            trace_parent: job.trace_parent.as_deref(),
            access: self.links.as_deref().map(|l| &l.jobs),
            resume_step: job.last_checkpoint.map(|c| c.step),
            attempt: job.attempt,
        };
        match manifests::build_rayjob(&view, placement, capsule, &self.core.config) {
            Ok(m) => Ok(m),
            Err(e) => {
                let t = Transition::new(
                    &job.id,
                    JobState::Queued,
                    JobState::Failed,
                    Some(format!("dispatch.invalid: {e}")),
                );
                self.core.transition(t).await?;
                Err(e.into())
            }
        }
    }

    /// The dispatch intent (queued → dispatched, with the RayJob's name and fleet, the
    /// placement and the decision); false when the job is no longer queued.
    async fn store_intent(
        &self,
        job: &JobRecord,
        (name, fleet): (&str, String),
        placement: Placement,
        decision: Option<NewDecision>,
        terms: AdmittedTerms,
    ) -> Result<bool, JobError> {
        let mut t = Transition::new(
            &job.id,
            JobState::Queued,
            JobState::Dispatched,
            Some(format!("RayJob {name} created")),
        );
        t.rayjob_name = Some(name.to_owned());
        t.fleet = Some(fleet);
        t.placement = Some(placement);
        t.decision = decision;
        t.terms = Some(terms);
        match self.core.transition(t).await {
            Ok(_) => Ok(true),
            Err(StoreError::Conflict { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether `job` is still dispatched as RayJob `name` with nothing seen of it: the
    /// lifecycle controller moves the job on as soon as it sees its RayJob. Unknown
    /// (the store cannot answer) counts as seen: no second create on a guess.
    async fn no_rayjob_seen(&self, job: &str, name: &str) -> bool {
        match self.core.store.get(job).await {
            Ok(Some(rec)) => {
                rec.state == JobState::Dispatched && rec.rayjob_name.as_deref() == Some(name)
            }
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(
                    job,
                    "reading the job before sending its RayJob create again: {e}"
                );
                false
            }
        }
    }

    /// The NetworkPolicy (first, so the RayJob's pods are never reachable by others),
    /// then the RayJob. A refusal fails the job; a RayJob known not to exist puts it
    /// back in the queue; one that may exist leaves it dispatched to this fleet.
    async fn send(
        &self,
        job: &JobRecord,
        cluster: &Cluster,
        name: &str,
        manifest: &crate::cluster::RayJob,
    ) -> Result<(), JobError> {
        let policy = manifests::network::network_policy(
            &job.id,
            &job.team,
            cluster.rayjobs.instance(),
            &self.core.config,
        );
        let created = match cluster.network_policies.create_or_adopt(&policy).await {
            Ok(_) => {
                cluster
                    .rayjobs
                    .create_or_adopt(manifest, || self.no_rayjob_seen(&job.id, name))
                    .await
            }
            // No RayJob create was sent.
            Err(e) if api_error::classify(&e) == Failure::Refused => Err(CreateError::Refused(e)),
            Err(e) => Err(CreateError::NotCreated(e)),
        };
        let (to, reason, e) = match created {
            Ok(Created::New) => return Ok(()),
            Ok(Created::Adopted) => {
                tracing::info!(job = %job.id, rayjob = %name, fleet = %cluster.fleet, "RayJob exists: adopted");
                return Ok(());
            }
            Err(CreateError::Unknown(e)) => {
                // The job stays dispatched to this fleet, whose lifecycle controller
                // queues it again once the fleet answers that its RayJob does not
                // exist (`lifecycle::rayjob_events`).
                tracing::warn!(job = %job.id, rayjob = %name, fleet = %cluster.fleet, "creating the RayJob failed ({e}) and the fleet cannot tell whether it exists: the job stays dispatched there until it can");
                return Err(e.into());
            }
            // The API server refused this RayJob (invalid, too large, forbidden): the
            // same request would be refused again, so the job fails with the server's
            // message instead of holding its GPUs in every pass.
            Err(CreateError::Refused(e)) => (
                JobState::Failed,
                format!(
                    "dispatch.refused: the Kubernetes API server refused the RayJob: {}",
                    api_error::message(&e)
                ),
                e,
            ),
            Err(CreateError::NotCreated(e)) => (
                JobState::Queued,
                format!("dispatch.retry: creating the RayJob failed ({e}); will retry"),
                e,
            ),
        };
        let t = Transition::new(&job.id, JobState::Dispatched, to, Some(reason));
        if let Err(e2) = self.core.transition(t).await {
            tracing::warn!(job = %job.id, "after a failed create ({to}): {e2}");
        }
        Err(e.into())
    }
}
