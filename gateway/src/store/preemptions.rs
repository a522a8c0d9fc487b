//! Preemptions as stored (issue 38): the terms a job was admitted on (its priority
//! after the policy's cap, and whether it may be preempted), and one record per
//! preemption of a job — opened in the same transaction that moves it `running →
//! preempting`, closed in the one that releases it (`preempting → queued`, or an end
//! if it finished during its notice). A job's `attempt` counts its releases: each
//! attempt runs under a RayJob of its own and keeps its own archived logs.

use serde::{Deserialize, Serialize};

use crate::store::Checkpoint;

/// What a job was admitted on, stored with its dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmittedTerms {
    /// The priority it runs at: its spec's, capped by the policy.
    pub priority: i32,
    /// `false`: a policy protected it from preemption.
    pub preemptible: bool,
    /// GPUs it runs on beyond its team's guaranteed quota (a quota policy marked
    /// them, `BORROWED_GPUS_ANNOTATION`): reclaimable by teams within their guarantee.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub borrowed_gpus: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl AdmittedTerms {
    /// The terms in words, as the console shows them.
    pub fn sentence(&self) -> String {
        let protection = if self.preemptible {
            "preemptible"
        } else {
            "protected from preemption by the policy"
        };
        let borrowed = match self.borrowed_gpus {
            0 => String::new(),
            n => format!(
                "; {n} of its GPUs are borrowed beyond its team's guarantee, and are \
                 reclaimed when a team they are guaranteed to needs them"
            ),
        };
        format!(
            "Runs at priority {}, {protection}{borrowed}.",
            self.priority
        )
    }
}

/// The notice a victim is given, recorded with `running → preempting`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewPreemption {
    /// The job the GPUs are freed for.
    pub by_job: String,
    /// Unix milliseconds of the notice.
    pub at_ms: i64,
    /// How long the victim has to checkpoint and exit, in milliseconds.
    pub notice_ms: i64,
    /// GPUs it frees.
    pub gpus: u32,
    /// Their series.
    pub series: String,
    /// Lost work the plan expected, in GPU-seconds: since its last checkpoint plus the
    /// grace, or as its last notice in the window went (`jobs/preemption_plan.rs`).
    pub planned_lost_gpu_seconds: f64,
    /// Unix milliseconds the preempted attempt started running: its work at risk is
    /// counted from there, or from a later acknowledged checkpoint.
    pub attempt_started_ms: i64,
}

/// What ended a notice and released the victim's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ReleaseCause {
    /// Its Ray job ended (it exited on the signal, or was killed).
    #[serde(rename = "exited")]
    Exited,
    /// It acknowledged a checkpoint after the notice.
    #[serde(rename = "checkpointed")]
    Checkpointed,
    /// Its grace ended.
    #[serde(rename = "grace-ended")]
    GraceEnded,
    /// Its RayJob was gone (deleted outside Forge, or by an interrupted release).
    #[serde(rename = "rayjob-gone")]
    RayJobGone,
}

impl ReleaseCause {
    /// Every cause.
    pub const ALL: [ReleaseCause; 4] = [
        ReleaseCause::Exited,
        ReleaseCause::Checkpointed,
        ReleaseCause::GraceEnded,
        ReleaseCause::RayJobGone,
    ];

    /// Its name: in the API, the stored column, the metric label and the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCause::Exited => "exited",
            ReleaseCause::Checkpointed => "checkpointed",
            ReleaseCause::GraceEnded => "grace-ended",
            ReleaseCause::RayJobGone => "rayjob-gone",
        }
    }

    /// The cause a stored name names (`None`: none stored, or a name this version
    /// does not know — shown as `null` rather than failing the job's page).
    pub fn parse(name: Option<&str>) -> Option<Self> {
        Self::ALL.into_iter().find(|c| Some(c.as_str()) == name)
    }
}

/// The release of a victim, recorded with the transition that ends its notice. The
/// step it resumes from is the last one it acknowledged *as the transition commits*
/// (read from its row in the same transaction: a job out of `preempting` can
/// acknowledge no more), so the record and its next run's `FORGE_RESUME_STEP` agree;
/// the work it lost is measured from that same checkpoint, so an acknowledgement that
/// lands while the release archives the logs counts as saved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// Unix milliseconds of the release.
    pub released_ms: i64,
    /// Whether the work lost is measured ([`lost_gpu_seconds`], as the transition
    /// commits); `false`: it left the notice another way (e.g. cancelled), and the
    /// record says nothing of what it lost.
    pub measured: bool,
    /// What released it (`None`: it left the notice another way).
    pub released_by: Option<ReleaseCause>,
}

impl PreemptionWrite {
    /// What a transition out of `preempting` writes when its caller wrote nothing: the
    /// record is closed at `now`, unmeasured (every way out of a notice closes it).
    pub fn implied(t_from_preempting: bool, given: Option<&Self>, now: i64) -> Option<Self> {
        match given {
            Some(w) => Some(w.clone()),
            None if t_from_preempting => Some(PreemptionWrite::Release(Release {
                released_ms: now,
                measured: false,
                released_by: None,
            })),
            None => None,
        }
    }
}

/// What a transition writes about a preemption.
#[derive(Debug, Clone, PartialEq)]
pub enum PreemptionWrite {
    /// `running → preempting`: the notice.
    Notice(NewPreemption),
    /// The end of the notice: released (`→ queued`, the attempt counter goes up) or
    /// ended during it.
    Release(Release),
}

/// One preemption of a job, as `GET /v1/jobs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionRecord {
    /// The preempted job.
    #[serde(skip)]
    pub job_id: String,
    /// The attempt it preempted (0: the first run).
    pub attempt: u32,
    /// The job the GPUs were freed for.
    pub by_job: String,
    /// Unix milliseconds of the notice (SIGTERM).
    pub at_ms: i64,
    /// The grace the notice gave, in milliseconds.
    pub notice_ms: i64,
    /// When it released its GPUs (`None`: the notice runs).
    pub released_ms: Option<i64>,
    /// The step it resumes from.
    pub checkpoint_step: Option<u64>,
    /// GPU-seconds of work lost (known at the release).
    pub lost_gpu_seconds: Option<f64>,
    /// What released it (`None`: the notice runs, or it left the notice another
    /// way, e.g. cancelled or succeeded during it).
    pub released_by: Option<ReleaseCause>,
    /// GPUs freed.
    pub gpus: u32,
    /// Their series.
    pub series: String,
    /// When the preempted attempt started running (Unix ms).
    #[serde(skip)]
    pub attempt_started_ms: i64,
}

impl PreemptionRecord {
    /// When the notice ends: the victim is released then at the latest.
    pub fn deadline_ms(&self) -> i64 {
        self.at_ms.saturating_add(self.notice_ms)
    }
}

/// The work a release at `until_ms` throws away, in GPU-seconds, of an attempt on
/// `gpus` GPUs that started running at `attempt_started_ms` and last acknowledged
/// `last`: the GPUs × the time since [`work_at_risk_since`].
pub fn lost_gpu_seconds(
    gpus: u32,
    attempt_started_ms: i64,
    last: Option<Checkpoint>,
    until_ms: i64,
) -> f64 {
    let since = work_at_risk_since(attempt_started_ms, last);
    f64::from(gpus) * ((until_ms - since).max(0) as f64 / 1000.0)
}

/// Where an attempt that started running at `attempt_started_ms` would resume from,
/// in time: its last acknowledged checkpoint if this attempt made it, else its start.
/// The planner (which costs a preemption) and the release (which measures it) both
/// count lost work from here.
pub fn work_at_risk_since(attempt_started_ms: i64, last: Option<Checkpoint>) -> i64 {
    last.filter(|c| c.at_ms >= attempt_started_ms)
        .map_or(attempt_started_ms, |c| c.at_ms)
}

/// The columns a preemption row is read with, in the order both backends expect.
pub const PREEMPTION_COLUMNS: &str = "job_id, attempt, by_job, at_ms, notice_ms, released_ms, \
                                      checkpoint_step, lost_gpu_seconds, gpus, series, \
                                      attempt_started_ms, released_by";

#[cfg(test)]
mod tests {
    use super::*;

    /// The API's names (serde) are the stored and labelled ones (`as_str`), and a
    /// stored name reads back as its cause.
    #[test]
    fn every_cause_has_one_name() {
        for cause in ReleaseCause::ALL {
            let json = serde_json::to_value(cause).expect("json");
            assert_eq!(json, cause.as_str());
            assert_eq!(ReleaseCause::parse(Some(cause.as_str())), Some(cause));
        }
        assert_eq!(ReleaseCause::parse(Some("evicted")), None);
        assert_eq!(ReleaseCause::parse(None), None);
    }
}
