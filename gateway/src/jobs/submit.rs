//! Submission: validated spec → policy chain (with the live cluster snapshot and the
//! team's usage) → reject, or pack the code into a capsule, store it, and write the job
//! to the durable queue *before* acknowledging it. The dispatcher takes it from there.
//!
//! A rejection is recorded too (state `rejected`, with the decision) so that audits see
//! it, but nothing is stored in object storage and no RayJob is created. A hostile or
//! oversize archive is refused before anything is written.

use std::path::PathBuf;

use forge_capsule::{CapsuleLimits, CodeSource, assemble};
use serde::Serialize;

use super::JobError;
use crate::app::{AppState, policy_request};
use crate::auth::Caller;
use crate::jobspec::JobSpec;
use crate::policy::ChainOutcome;
use crate::policy::model::{Decision, PolicyRequest};
use crate::store::{JobRecord, JobState, NewDecision, NewJob, new_job_id};

/// Where a submission's code comes from.
#[derive(Debug)]
pub enum CodeInput {
    /// An uploaded `.zip` / `.tar.gz`, spooled to a temporary file.
    Upload(tempfile::TempPath),
    /// A capsule that is already stored, by its hex SHA-256.
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

/// The decision as stored: kind, code, message, field, plugin digests and trace.
/// `request` is kept so candidate chains can be replayed against the decision.
pub fn decision_record(
    job_id: &str,
    team: &str,
    outcome: &ChainOutcome,
    policy: &str,
    request: Option<&PolicyRequest>,
) -> NewDecision {
    let (code, message, field) = match &outcome.decision {
        Decision::Admit { .. } => (None, None, None),
        Decision::Queue { code, message } => (Some(code.clone()), Some(message.clone()), None),
        Decision::Reject {
            code,
            message,
            field,
        } => (Some(code.clone()), Some(message.clone()), field.clone()),
    };
    NewDecision {
        job_id: job_id.to_string(),
        team: team.to_string(),
        kind: outcome.decision.kind().to_string(),
        code,
        message,
        field,
        plugins: serde_json::to_value(&outcome.trace).unwrap_or_default(),
        chain_version: policy.to_string(),
        request: request.and_then(|r| serde_json::to_value(r).ok()),
    }
}

/// The series a job queues on: its primary pool's series as placed, else as requested.
pub fn primary_series(spec: &JobSpec, decision: &Decision) -> String {
    if let Decision::Admit { placement } = decision
        && let Some(series) = placement.pools.first().and_then(|p| p.series.clone())
    {
        return series;
    }
    spec.primary()
        .and_then(|p| p.series.clone())
        .unwrap_or_else(|| "unplaced".to_string())
}

/// Submit a job for `caller`.
pub async fn submit(
    state: &AppState,
    caller: &Caller,
    spec: JobSpec,
    code: CodeInput,
) -> Result<Submitted, JobError> {
    let id = new_job_id();
    let request = policy_request(state, caller, &id, &spec);
    let evaluated = state
        .policies
        .evaluate(&caller.team, request.clone(), "submit")
        .await?;
    let outcome = evaluated.outcome;
    let decision = decision_record(
        &id,
        &caller.team,
        &outcome,
        &evaluated.label,
        Some(&request),
    );
    state
        .policies
        .shadow_submission(&id, &caller.team, request, &outcome);

    if let Decision::Reject {
        code,
        message,
        field,
    } = &outcome.decision
    {
        let plugin = outcome
            .trace
            .iter()
            .find(|t| t.outcome == "reject")
            .map(|t| t.plugin.clone());
        state
            .store
            .insert(
                NewJob {
                    id: id.clone(),
                    team: caller.team.clone(),
                    spec,
                    state: JobState::Rejected,
                    reason: Some(format!("{code}: {message}")),
                    capsule_sha256: None,
                    queue_series: None,
                },
                Some(decision),
            )
            .await?;
        return Err(JobError::Rejected {
            job_id: id,
            code: code.clone(),
            message: message.clone(),
            field: field.clone(),
            plugin,
        });
    }

    let digest = match code {
        CodeInput::Capsule(digest) => {
            forge_object_store::validate_digest(&digest).map_err(|_| JobError::BadRequest {
                code: "invalid-capsule",
                field: "capsule",
                message: "a capsule is named by its SHA-256: 64 lowercase hex digits".into(),
            })?;
            if !state.capsules.exists(&digest).await? {
                return Err(JobError::UnknownCapsule(digest));
            }
            digest
        }
        CodeInput::Upload(path) => pack_and_store(state, &spec, path).await?,
    };

    let reason = match &outcome.decision {
        Decision::Queue { code, message } => format!("{code}: {message}"),
        _ => "admitted: waiting for dispatch".to_string(),
    };
    let job = state
        .store
        .insert(
            NewJob {
                id,
                team: caller.team.clone(),
                queue_series: Some(primary_series(&spec, &outcome.decision)),
                spec,
                state: JobState::Queued,
                reason: Some(reason),
                capsule_sha256: Some(digest),
            },
            Some(decision),
        )
        .await?;
    state.queue.wake();
    Ok(Submitted {
        job,
        outcome,
        policy_version: evaluated.global_version,
        policy: evaluated.label,
    })
}

/// Pack the uploaded archive with the authoritative spec into a capsule and store it
/// (content-addressed: an identical capsule is not uploaded again).
async fn pack_and_store(
    state: &AppState,
    spec: &JobSpec,
    upload: tempfile::TempPath,
) -> Result<String, JobError> {
    let spec_bytes = serde_json::to_vec_pretty(spec).map_err(|e| JobError::Io(e.to_string()))?;
    let out_dir: PathBuf = state.config.gateway.data_dir.join("spool");
    let limits = CapsuleLimits::default();
    let capsule = tokio::task::spawn_blocking(move || {
        let source = CodeSource::Archive(upload.to_path_buf());
        let result = assemble(source, &spec_bytes, None, &limits, &out_dir);
        drop(upload);
        result
    })
    .await
    .map_err(|e| JobError::Io(format!("capsule task: {e}")))??;
    let stored = state
        .capsules
        .put_file(&capsule.digest, &capsule.path)
        .await;
    if let Err(e) = tokio::fs::remove_file(&capsule.path).await {
        tracing::warn!(path = %capsule.path.display(), "removing the packed capsule: {e}");
    }
    let outcome = stored?;
    state.metrics.capsule(matches!(
        outcome,
        forge_object_store::PutOutcome::AlreadyPresent
    ));
    Ok(capsule.digest)
}
