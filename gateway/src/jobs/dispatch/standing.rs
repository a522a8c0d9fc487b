//! Where queued jobs stand, per series, in the order a pass decided them (or a
//! follower ordered them): each job's position, its team's share against its fair
//! share, and how many jobs and GPUs of other teams are ahead of it (numbers only).
//! The leader's pass and a follower's board both fill one, so a member reads the same
//! standing from any replica.

use crate::jobs::queue::{Ahead, FairStanding, QueueEntry, Standings};
use crate::store::JobRecord;

/// Where queued jobs stand after a pass, per series in the order decided.
#[derive(Default)]
pub(super) struct Standing {
    pub(super) entries: Standings,
    positions: rustc_hash::FxHashMap<String, u32>,
    /// Per series: the jobs that wait so far, in all and per team.
    waiting: rustc_hash::FxHashMap<String, (Ahead, rustc_hash::FxHashMap<String, Ahead>)>,
}

impl Standing {
    /// Records that a job keeps waiting in its series' queue (next position, with
    /// why); `shares`: its team's share and the series' fair share, in GPUs.
    pub(super) fn waits(
        &mut self,
        job: &JobRecord,
        series: String,
        code: &str,
        reason: String,
        shares: (f64, f64),
    ) {
        let p = match self.positions.get_mut(series.as_str()) {
            Some(p) => p,
            None => self.positions.entry(series.clone()).or_default(),
        };
        *p += 1;
        let position = *p;
        let (all, by_team) = self.waiting.entry(series.clone()).or_default();
        let own = by_team.get(&job.team).copied().unwrap_or_default();
        let others = Ahead {
            jobs: all.jobs - own.jobs,
            gpus: all.gpus - own.gpus,
        };
        let gpus = job.spec.total_gpus();
        for a in [&mut *all, by_team.entry(job.team.clone()).or_default()] {
            a.jobs += 1;
            a.gpus += gpus;
        }
        let (team_share, fair_share) = shares;
        let standing = FairStanding::new(team_share, fair_share, others);
        self.entries.insert(
            job.id.clone(),
            QueueEntry {
                team: job.team.clone(),
                series,
                gpus: u32::try_from(gpus).unwrap_or(u32::MAX),
                position,
                code: code.to_string(),
                reason,
                standing: Some(standing),
            },
        );
    }
}
