//! What a job's state change ends, observed: the queue-wait and time-to-running
//! histograms (counted from the submission, from the record alone, for every job), and
//! for a traced job the span of the phase it left (`telemetry::job_trace`), made off
//! the caller's path from the job's history.

use std::time::Duration;

use super::core::JobCore;
use crate::domain::JobState;
use crate::store::JobRecord;
use crate::telemetry::JobTrace;

impl JobCore {
    /// Observes the move `from → job.state` that just committed.
    pub(crate) fn phase_ended(&self, from: JobState, job: &JobRecord) {
        let since_submit = Duration::from_millis(
            u64::try_from(job.updated_at_ms - job.created_at_ms).unwrap_or(0),
        );
        let series = job.queue_series.as_deref().unwrap_or("unplaced");
        self.metrics
            .job_phase(job.state, series, &job.team, since_submit);
        let Some(trace) = JobTrace::of(job) else {
            return;
        };
        // Why it waited: what the dispatcher's last pass said of it.
        let why = (from == JobState::Queued)
            .then(|| self.queue.entry(&job.id))
            .flatten()
            .map(|e| e.reason);
        let store = self.store.clone();
        let job = job.clone();
        tokio::spawn(async move {
            match store.history(&job.id).await {
                Ok(history) => trace.phase_ended(from, &job, &history, why.as_deref()),
                Err(e) => tracing::debug!(job = %job.id, "no span for the phase it left: {e}"),
            }
        });
    }
}
