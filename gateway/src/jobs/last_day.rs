//! The cluster's last day per GPU series, from the store alone (no Prometheus): for
//! each hour, how long the jobs dispatched in it had waited in the queue (p50, p99)
//! and the GPU-seconds the jobs held (dispatched, initializing, running or
//! preempting). The console's capacity page draws it for admins; the input is
//! [`crate::store::JobStore::lives_since`], so every replica computes the same.

use std::collections::BTreeMap;

use crate::domain::JobState;
use crate::store::JobLife;

/// One hour of the window.
pub const HOUR_MS: i64 = 3_600_000;

/// One hour of one series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hour {
    /// Unix milliseconds the hour starts.
    pub start_ms: i64,
    /// Queue waits of the jobs dispatched in it, milliseconds, sorted.
    pub waits_ms: Vec<i64>,
    /// GPU-seconds held in it.
    pub gpu_seconds: f64,
}

impl Hour {
    /// The `p`-quantile of the waits (nearest rank), if any job was dispatched.
    pub fn wait_quantile_ms(&self, p: f64) -> Option<i64> {
        if self.waits_ms.is_empty() {
            return None;
        }
        let rank = (p * self.waits_ms.len() as f64).ceil() as usize;
        Some(self.waits_ms[rank.clamp(1, self.waits_ms.len()) - 1])
    }
}

/// Each series' hours, oldest first, the last one ending at `now`.
pub type LastDay = BTreeMap<String, Vec<Hour>>;

/// Whether a job in `state` holds its GPUs.
fn holds(state: JobState) -> bool {
    matches!(
        state,
        JobState::Dispatched | JobState::Initializing | JobState::Running | JobState::Preempting
    )
}

/// The last `hours` hours up to `now_ms` of every series the `lives` touched.
pub fn last_day(lives: &[JobLife], now_ms: i64, hours: usize) -> LastDay {
    let start = now_ms - hours as i64 * HOUR_MS;
    let empty = || -> Vec<Hour> {
        (0..hours)
            .map(|i| Hour {
                start_ms: start + i as i64 * HOUR_MS,
                ..Hour::default()
            })
            .collect()
    };
    let mut out = LastDay::new();
    for life in lives {
        let series = life.series.as_deref().unwrap_or("unplaced");
        let day = match out.get_mut(series) {
            Some(day) => day,
            None => out.entry(series.to_string()).or_insert_with(empty),
        };
        let bucket = |at: i64| {
            usize::try_from((at - start) / HOUR_MS)
                .ok()
                .filter(|&b| b < hours)
        };
        let mut queued_since = life.created_at_ms;
        for (i, entry) in life.history.iter().enumerate() {
            if entry.to == JobState::Queued {
                queued_since = entry.at_ms;
            }
            if entry.to == JobState::Dispatched
                && entry.at_ms >= start
                && let Some(b) = bucket(entry.at_ms)
            {
                day[b].waits_ms.push((entry.at_ms - queued_since).max(0));
            }
            if holds(entry.to) {
                let until = life.history.get(i + 1).map_or(now_ms, |next| next.at_ms);
                charge(
                    day,
                    start,
                    entry.at_ms.max(start),
                    until.min(now_ms),
                    life.gpus,
                );
            }
        }
    }
    for day in out.values_mut() {
        for hour in day.iter_mut() {
            hour.waits_ms.sort_unstable();
        }
    }
    out
}

/// Adds `gpus` × the time from `from` to `to` to the hours it spans.
fn charge(day: &mut [Hour], start: i64, mut from: i64, to: i64, gpus: u32) {
    while from < to {
        let Ok(b) = usize::try_from((from - start) / HOUR_MS) else {
            return;
        };
        let Some(hour) = day.get_mut(b) else {
            return;
        };
        let end = (hour.start_ms + HOUR_MS).min(to);
        hour.gpu_seconds += f64::from(gpus) * (end - from) as f64 / 1000.0;
        from = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::HistoryEntry;

    fn life(series: &str, gpus: u32, created: i64, steps: &[(JobState, i64)]) -> JobLife {
        JobLife {
            id: "j".into(),
            series: Some(series.into()),
            gpus,
            created_at_ms: created,
            history: steps
                .iter()
                .map(|&(to, at_ms)| HistoryEntry {
                    from: None,
                    to,
                    reason: None,
                    at_ms,
                })
                .collect(),
        }
    }

    const NOW: i64 = 100 * HOUR_MS;

    #[test]
    fn held_gpus_are_charged_to_the_hours_they_span_and_only_inside_the_window() {
        // Ran from 30 min before the window to 1.5 h into it, on 8 GPUs.
        let start = NOW - 24 * HOUR_MS;
        let l = life(
            "h100",
            8,
            start - 2 * HOUR_MS,
            &[
                (JobState::Queued, start - 2 * HOUR_MS),
                (JobState::Dispatched, start - HOUR_MS / 2),
                (JobState::Running, start - HOUR_MS / 4),
                (JobState::Succeeded, start + 3 * HOUR_MS / 2),
            ],
        );
        let day = last_day(&[l], NOW, 24);
        let h = &day["h100"];
        assert_eq!(h.len(), 24);
        assert!((h[0].gpu_seconds - 8.0 * 3600.0).abs() < 1e-6);
        assert!((h[1].gpu_seconds - 8.0 * 1800.0).abs() < 1e-6);
        assert!(h[2..].iter().all(|h| h.gpu_seconds == 0.0));
        // Dispatched before the window: its wait is not the window's.
        assert!(h.iter().all(|h| h.waits_ms.is_empty()));
    }

    #[test]
    fn a_job_still_running_is_charged_until_now() {
        let l = life(
            "h100",
            2,
            NOW - 10 * HOUR_MS,
            &[
                (JobState::Queued, NOW - 10 * HOUR_MS),
                (JobState::Dispatched, NOW - HOUR_MS / 2),
            ],
        );
        let day = last_day(&[l], NOW, 24);
        assert!((day["h100"][23].gpu_seconds - 2.0 * 1800.0).abs() < 1e-6);
    }

    #[test]
    fn waits_are_from_the_last_queueing_and_read_as_quantiles() {
        let start = NOW - 24 * HOUR_MS;
        let mut lives = Vec::new();
        for (i, wait) in [1, 2, 3, 4, 100].iter().enumerate() {
            let queued = start + HOUR_MS + i as i64;
            lives.push(life(
                "h200",
                1,
                queued,
                &[
                    (JobState::Queued, queued),
                    (JobState::Dispatched, queued + wait * 1000),
                ],
            ));
        }
        // Preempted and queued again: its second wait counts from its requeue.
        lives.push(life(
            "h200",
            1,
            start,
            &[
                (JobState::Queued, start),
                (JobState::Dispatched, start + 1000),
                (JobState::Running, start + 2000),
                (JobState::Preempting, start + HOUR_MS + 10),
                (JobState::Queued, start + HOUR_MS + 20),
                (JobState::Dispatched, start + HOUR_MS + 5020),
            ],
        ));
        let day = last_day(&lives, NOW, 24);
        let hour = &day["h200"][1];
        assert_eq!(hour.waits_ms, vec![1000, 2000, 3000, 4000, 5000, 100_000]);
        assert_eq!(hour.wait_quantile_ms(0.5), Some(3000));
        assert_eq!(hour.wait_quantile_ms(0.99), Some(100_000));
        assert_eq!(day["h200"][0].waits_ms, vec![1000]);
        assert_eq!(day["h200"][5].wait_quantile_ms(0.5), None);
    }
}
