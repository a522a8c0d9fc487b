//! The queue board: what the dispatcher last published about the gateway queue — each
//! queued job's series, position and current reason — plus the wake-up signal that
//! makes the dispatcher run again. (The teams' usage it counts goes to admission:
//! `admission::usage`.)
//!
//! The queue itself is durable (queued jobs in the store, oldest first); this board is
//! the in-memory view the API reads so that `GET /v1/jobs/{id}` never waits on a
//! dispatcher pass. It is swapped whole (`arc-swap`), never locked.

use std::collections::BTreeMap;

/// Queue standings by job id (keys are the gateway's own ids).
pub type Standings = rustc_hash::FxHashMap<String, QueueEntry>;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::Notify;

/// Where a queued job stands. Serialized for the API with its standing's sentence,
/// which is built only then: a pass compares every entry with the last one, and a
/// sentence per waiting job would double what it compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// The job's team (for the per-team depth metric; the API's job view says it).
    pub team: String,
    /// The series queue it waits in.
    pub series: String,
    /// GPUs it asks for (the console draws the queue with them).
    pub gpus: u32,
    /// 1-based position in that series' queue (in the order the dispatcher decides
    /// it: priority, then fair share, then submission).
    pub position: u32,
    /// Stable code of the current reason (e.g. `quota.exceeded`, `capacity.no-room`).
    pub code: String,
    /// Why it waits, for people.
    pub reason: String,
    /// Where it stands against other teams, as the leader's last pass saw it (`None`:
    /// a replica that is not the leader, which reads the queue from the store).
    pub standing: Option<FairStanding>,
}

impl QueueEntry {
    /// Its standing against other teams as a sentence for people.
    pub fn standing_sentence(&self) -> Option<String> {
        let s = self.standing.as_ref()?;
        let versus = match s.team_share.cmp(&s.fair_share) {
            std::cmp::Ordering::Less => "below",
            std::cmp::Ordering::Equal => "at",
            std::cmp::Ordering::Greater => "above",
        };
        let others = s.others_ahead;
        let ahead = match others.jobs {
            0 => "no job of another team ahead of it".to_string(),
            1 => format!("1 job of other teams ({} GPUs) ahead of it", others.gpus),
            n => format!("{n} jobs of other teams ({} GPUs) ahead of it", others.gpus),
        };
        Some(format!(
            "#{} on {}; {} uses {} GPUs, {versus} its fair share of {}; {ahead}",
            self.position,
            self.series,
            self.team,
            Tenths(s.team_share),
            Tenths(s.fair_share),
        ))
    }
}

impl Serialize for QueueEntry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut m = s.serialize_struct("QueueEntry", 5)?;
        m.serialize_field("series", &self.series)?;
        m.serialize_field("position", &self.position)?;
        m.serialize_field("code", &self.code)?;
        m.serialize_field("reason", &self.reason)?;
        if let (Some(f), Some(sentence)) = (&self.standing, self.standing_sentence()) {
            m.serialize_field(
                "standing",
                &serde_json::json!({
                    "teamShare": f64::from(f.team_share) / 10.0,
                    "fairShare": f64::from(f.fair_share) / 10.0,
                    "othersAhead": f.others_ahead,
                    "sentence": sentence,
                }),
            )?;
        }
        m.end()
    }
}

/// A queued job against the other teams of its series (fair share): numbers only,
/// never another team's job. Shown as `teamShare`, `fairShare` (GPUs), `othersAhead`
/// and a `sentence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairStanding {
    /// Its team's share of the series, in tenths of GPUs: its decayed past use (as
    /// GPUs held on average) plus the GPUs it holds.
    pub team_share: u32,
    /// The series' GPUs divided among the teams that hold or want some, in tenths.
    pub fair_share: u32,
    /// Other teams' jobs that wait ahead of it in the series.
    pub others_ahead: Ahead,
}

/// Jobs and the GPUs they ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Ahead {
    pub jobs: u32,
    pub gpus: u64,
}

impl FairStanding {
    /// A team with `team_share` GPUs against a `fair_share`, behind `others`.
    pub fn new(team_share: f64, fair_share: f64, others: Ahead) -> Self {
        FairStanding {
            team_share: to_tenths(team_share),
            fair_share: to_tenths(fair_share),
            others_ahead: others,
        }
    }
}

fn to_tenths(gpus: f64) -> u32 {
    let t = (gpus.max(0.0) * 10.0).round();
    if t >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        t as u32
    }
}

/// Tenths shown with one decimal.
struct Tenths(u32);

impl std::fmt::Display for Tenths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0 / 10, self.0 % 10)
    }
}

/// The board.
#[derive(Debug, Default)]
pub struct QueueBoard {
    wake: Notify,
    entries: ArcSwap<Standings>,
}

impl QueueBoard {
    /// An empty board.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Ask the dispatcher for a pass (coalesces: many wakes, one pass).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Wait for the next wake.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Publish a pass's standings.
    pub fn publish(&self, entries: Standings) {
        self.entries.store(Arc::new(entries));
    }

    /// Every queued job's standing as the last pass published it.
    pub fn snapshot(&self) -> Arc<Standings> {
        self.entries.load_full()
    }

    /// A queued job's standing, if the last pass saw it.
    pub fn entry(&self, job_id: &str) -> Option<QueueEntry> {
        self.entries.load().get(job_id).cloned()
    }

    /// Queued jobs per team (for metrics).
    pub fn depth_by_team(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.entries.load().values() {
            *out.entry(e.team.clone()).or_default() += 1;
        }
        out
    }

    /// Queued jobs per series (for metrics).
    pub fn depth_by_series(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.entries.load().values() {
            *out.entry(e.series.clone()).or_default() += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_shows_what_the_last_pass_published() {
        let board = QueueBoard::new();
        let mut entries = Standings::default();
        entries.insert(
            "j1".to_string(),
            QueueEntry {
                team: "team-a".into(),
                series: "h100".into(),
                gpus: 8,
                position: 1,
                code: "quota.exceeded".into(),
                reason: "over quota".into(),
                standing: None,
            },
        );
        board.publish(entries);
        assert_eq!(board.entry("j1").map(|e| e.position), Some(1));
        assert_eq!(board.depth_by_series().get("h100"), Some(&1));
        assert!(board.entry("j2").is_none());
    }

    #[test]
    fn a_standing_says_the_shares_and_what_is_ahead_in_numbers() {
        let entry = |standing| QueueEntry {
            team: "team-b".into(),
            series: "h100".into(),
            gpus: 8,
            position: 3,
            code: "quota.exceeded".into(),
            reason: "over quota".into(),
            standing,
        };
        let e = entry(Some(FairStanding::new(
            14.24,
            8.0,
            Ahead { jobs: 2, gpus: 16 },
        )));
        let sentence = "#3 on h100; team-b uses 14.2 GPUs, above its fair share of 8.0; 2 jobs of other teams (16 GPUs) ahead of it";
        assert_eq!(e.standing_sentence().as_deref(), Some(sentence));
        assert_eq!(
            serde_json::to_value(&e).expect("json"),
            serde_json::json!({
                "series": "h100",
                "position": 3,
                "code": "quota.exceeded",
                "reason": "over quota",
                "standing": {
                    "teamShare": 14.2,
                    "fairShare": 8.0,
                    "othersAhead": {"jobs": 2, "gpus": 16},
                    "sentence": sentence,
                },
            })
        );
        let alone = entry(Some(FairStanding::new(0.0, 16.0, Ahead::default())));
        let said = alone.standing_sentence().unwrap_or_default();
        assert!(
            said.ends_with("below its fair share of 16.0; no job of another team ahead of it"),
            "{said}"
        );
        let follower = serde_json::to_value(entry(None)).expect("json");
        assert!(
            follower.get("standing").is_none() && follower.get("team").is_none(),
            "{follower}"
        );
    }
}
