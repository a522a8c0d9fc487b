//! Submission: validated spec → policy chain (with the live cluster snapshot and the
//! team's usage) → reject, or pack the code into a capsule, store it, and write the job
//! to the durable queue *before* acknowledging it. The dispatcher takes it from there.
//!
//! A rejection is recorded too (state `rejected`, with the decision) so that audits see
//! it, but nothing is stored in object storage and no RayJob is created. A hostile or
//! oversize archive is refused before anything is written.
//!
//! A team over its submission rate or queue cap is refused before anything is read or
//! stored (`limits.rs`).
//!
//! Capsules belong to the teams that uploaded them ([`crate::store::CapsuleStore`]):
//! a submission naming a capsule by digest is accepted only from one of its owners.

pub mod limits;

use std::path::PathBuf;
use std::sync::Arc;

use forge_capsule::{CapsuleLimits, CodeSource, assemble, read_requirements};
use forge_policy_host::ChainOutcome;
use forge_policy_host::model::{Decision, PolicyRequest};
use serde::Serialize;

use super::core::JobCore;
use super::error::JobError;
use crate::admission::{self, Admission, Path};
use crate::auth::Caller;
use crate::domain::{Digest, JobState};
use crate::jobspec::JobSpec;
use crate::objects::{ObjectStore, PutOutcome};
use crate::policy::Evaluated;
use crate::store::{CapsuleStore, JobRecord, NewJob, new_job_id};
use crate::telemetry::job_trace::{self, SubmitTrace};
use limits::SubmissionLimits;
use tracing::Instrument as _;

/// Where a submission's code comes from.
#[derive(Debug)]
pub enum CodeInput {
    /// An uploaded `.zip` / `.tar.gz`, spooled to a temporary file.
    Upload(tempfile::TempPath),
    /// A capsule that is already stored, by its hex SHA-256 (as the client sent it).
    Capsule(String),
}

/// An accepted submission.
#[derive(Debug, Clone, Serialize)]
pub struct Submitted {
    /// The stored job.
    pub job: JobRecord,
    /// The admission decision and its per-plugin trace.
    pub outcome: ChainOutcome,
    /// Version of the global chain that decided.
    pub policy_version: u64,
    /// The policy versions as recorded (`global@3`, `global@3+team@1`).
    pub policy: String,
}

/// The submission service.
#[derive(Clone)]
pub struct Submissions {
    core: JobCore,
    admission: Admission,
    capsules: Arc<dyn CapsuleStore>,
    objects: Arc<dyn ObjectStore>,
    /// Per-team submission rate and queue cap (`limits.rs`).
    limits: Arc<SubmissionLimits>,
}

impl std::fmt::Debug for Submissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Submissions")
    }
}

impl Submissions {
    pub fn new(
        core: JobCore,
        admission: Admission,
        capsules: Arc<dyn CapsuleStore>,
        objects: Arc<dyn ObjectStore>,
    ) -> Self {
        let limits = Arc::new(SubmissionLimits::new(
            core.config.gateway.submissions_per_minute,
            core.config.gateway.max_queued_per_team,
        ));
        Submissions {
            core,
            admission,
            capsules,
            objects,
            limits,
        }
    }

    /// Takes one submission from `caller`'s team's rate (`limits.rs`); call before
    /// reading the submission.
    pub fn check_submission_rate(&self, team: &str) -> Result<(), JobError> {
        self.limits.check_rate(team).inspect_err(|_| {
            self.core.metrics.submission_limited("rate");
        })?;
        Ok(())
    }

    /// Submits a job for `caller`, inside the submission's `trace` (its root span
    /// names the job; admission and the capsule get child spans; the trace context is
    /// stored with the job).
    pub async fn submit(
        &self,
        caller: &Caller,
        mut spec: JobSpec,
        code: CodeInput,
        trace: &SubmitTrace,
    ) -> Result<Submitted, JobError> {
        if self.limits.caps_queue() {
            let queued = self.core.store.queued_count(&caller.team).await?;
            self.limits
                .check_queue(&caller.team, queued)
                .inspect_err(|_| self.core.metrics.submission_limited("queue"))?;
        }
        let id = new_job_id();
        trace.record_job(&id);
        let (request, evaluated) = self.admit(&id, &caller.team, &spec).await?;
        let outcome = evaluated.outcome;
        let trace_parent = trace.stored();
        let decision = admission::decision_record(
            &id,
            &caller.team,
            &outcome,
            &evaluated.label,
            Some(&request),
        );
        self.admission.shadow(&id, &caller.team, request, &outcome);

        if let Decision::Reject {
            code,
            message,
            field,
        } = &outcome.decision
        {
            let job = NewJob {
                id: id.clone(),
                team: caller.team.clone(),
                spec,
                state: JobState::Rejected,
                reason: Some(format!("{code}: {message}")),
                capsule_sha256: None,
                queue_series: None,
                trace_parent,
            };
            self.core.insert(job, Some(decision)).await?;
            return Err(JobError::Rejected {
                job_id: id,
                code: code.clone(),
                message: message.clone(),
                field: field.clone(),
                plugin: admission::rejecting_plugin(&outcome),
            });
        }

        let digest = self
            .capsule_of(&caller.team, &mut spec, code)
            .instrument(job_trace::capsule_span(&id, &caller.team))
            .await?;
        let reason = match &outcome.decision {
            Decision::Queue { code, message } => format!("{code}: {message}"),
            _ => "admitted: waiting for dispatch".to_string(),
        };
        let job = NewJob {
            id,
            team: caller.team.clone(),
            queue_series: Some(admission::waiting_series(&spec, &outcome)),
            spec,
            state: JobState::Queued,
            reason: Some(reason),
            capsule_sha256: Some(digest),
            trace_parent,
        };
        let job = self.core.insert(job, Some(decision)).await?;
        Ok(Submitted {
            job,
            outcome,
            policy_version: evaluated.global_version,
            policy: evaluated.label,
        })
    }

    /// Asks the chain about job `id` (the live cluster view, the team's usage) in the
    /// job's `forge.admission` span, with a span per plugin under it.
    async fn admit(
        &self,
        id: &str,
        team: &str,
        spec: &JobSpec,
    ) -> Result<(PolicyRequest, Evaluated), JobError> {
        let span = job_trace::admission_span(id, team);
        async {
            let request = self.admission.live_request(id, team, spec).await?;
            let evaluated = self
                .admission
                .evaluate(team, request.clone(), Path::Submit)
                .await;
            let plugins = match &evaluated {
                Ok(e) => &e.outcome.trace,
                Err(e) => e.chain_trace(),
            };
            job_trace::plugin_spans(&span, id, team, plugins);
            Ok((request, evaluated?))
        }
        .instrument(span.clone())
        .await
    }

    /// The submission's capsule: a stored one the team owns (by digest), or the upload
    /// packed with the spec and stored (its `requirements.txt` joins the spec's pip).
    async fn capsule_of(
        &self,
        team: &str,
        spec: &mut JobSpec,
        code: CodeInput,
    ) -> Result<Digest, JobError> {
        match code {
            CodeInput::Capsule(digest) => {
                let digest = Digest::parse(&digest).map_err(|_| JobError::InvalidCapsuleRef)?;
                // Only a team that uploaded these bytes may run them; to anyone else the
                // capsule does not exist (the same answer, so digests cannot be probed).
                if !self.capsules.use_capsule(&digest, team).await?
                    || !self.objects.exists(digest.as_str()).await?
                {
                    return Err(JobError::UnknownCapsule(digest));
                }
                Ok(digest)
            }
            CodeInput::Upload(path) => {
                let (digest, requirements) = self.pack_and_store(team, spec, path).await?;
                spec.pip = with_requirements(requirements, std::mem::take(&mut spec.pip));
                Ok(digest)
            }
        }
    }

    /// Packs the uploaded archive with the authoritative spec into a capsule and
    /// stores it (content-addressed: an identical capsule is not uploaded again), and
    /// records `team` as one of its owners — also when the bytes were already stored.
    /// Returns its digest and the entries of the code's `requirements.txt` (a file
    /// that cannot become a runtime env refuses the upload before anything is stored).
    async fn pack_and_store(
        &self,
        team: &str,
        spec: &JobSpec,
        upload: tempfile::TempPath,
    ) -> Result<(Digest, Vec<String>), JobError> {
        let spec_bytes = crate::jobspec::capsule_bytes(spec);
        let out_dir: PathBuf = crate::spool::dir(&self.core.config.gateway.data_dir);
        let limits = CapsuleLimits::default();
        let capsule = tokio::task::spawn_blocking(move || {
            let source = CodeSource::Archive(upload.to_path_buf());
            let result = assemble(source, &spec_bytes, None, &limits, &out_dir);
            drop(upload);
            let capsule = result?;
            match read_requirements(&capsule.path) {
                Ok(requirements) => Ok((capsule, requirements)),
                Err(e) => {
                    if let Err(rm) = std::fs::remove_file(&capsule.path) {
                        tracing::warn!(path = %capsule.path.display(), "removing the packed capsule: {rm}");
                    }
                    Err(e)
                }
            }
        })
        .await
        .map_err(|e| JobError::io("capsule task", e))?;
        let (capsule, requirements) = capsule?;
        let stored = self
            .store_capsule(team, &capsule.digest, &capsule.path)
            .await;
        if let Err(e) = tokio::fs::remove_file(&capsule.path).await {
            tracing::warn!(path = %capsule.path.display(), "removing the packed capsule: {e}");
        }
        Ok((stored?, requirements))
    }

    /// Stores the capsule file at `path` (skipped when the bytes are there) and records
    /// `team` as an owner; when retention was deleting these bytes meanwhile, waits for
    /// that to finish and stores them again (`crate::retention::deletion_over`).
    async fn store_capsule(
        &self,
        team: &str,
        digest: &str,
        path: &std::path::Path,
    ) -> Result<Digest, JobError> {
        let outcome = self.objects.put_file(digest, path).await?;
        self.core
            .metrics
            .capsule(matches!(outcome, PutOutcome::AlreadyPresent));
        let digest = Digest::parse(digest).map_err(|e| JobError::io("the capsule digest", e))?;
        let seen = self.capsules.grant_capsule(&digest, team).await?;
        if crate::retention::deletion_over(self.capsules.as_ref(), &digest, seen).await? {
            self.objects.put_file(digest.as_str(), path).await?;
        }
        Ok(digest)
    }
}

/// The job's packages: the code's `requirements.txt` first, then the spec's own entries
/// it does not already list.
fn with_requirements(mut requirements: Vec<String>, named: Vec<String>) -> Vec<String> {
    for entry in named {
        let entry = entry.trim().to_string();
        if !requirements.contains(&entry) {
            requirements.push(entry);
        }
    }
    requirements
}
