//! A job's life as a timeline (Gantt): one bar per state it was in, from its
//! submission to its end (or now), coloured like its state badge; marks below for the
//! admission decisions, preemption notices and releases, its last checkpoint and
//! the Kubernetes events of its objects (warnings apart). The
//! job page draws it large, with the times at both ends; the jobs list draws the same
//! bars small.

use maud::{Markup, html};

use super::{along, num};
use crate::domain::JobState;
use crate::http::console::present;
use crate::store::HistoryEntry;

/// Something that happened at a moment of the job's life.
#[derive(Debug, Clone)]
pub struct Mark {
    pub at_ms: i64,
    /// `decision`, `preemption`, `release`, `checkpoint`, `log`, or a Kubernetes
    /// `event` / `warning` (its CSS class).
    pub kind: &'static str,
    pub label: String,
    /// Where the mark leads (a log), if anywhere.
    pub href: Option<String>,
}

/// Where each attempt's driver log begins — the first time the attempt ran — linked
/// to that log: an earlier attempt's archived one (`…/log?attempt=N`), the current
/// one's below on the page (`#log`). `attempt`: the job's current attempt.
pub fn log_marks(job_id: &str, attempt: u32, history: &[HistoryEntry]) -> Vec<Mark> {
    let mut out = Vec::new();
    let (mut n, mut ran) = (0u32, false);
    for h in history {
        if h.from == Some(JobState::Preempting) && h.to == JobState::Queued {
            (n, ran) = (n + 1, false);
        }
        if h.to == JobState::Running && !ran {
            ran = true;
            let href = if n < attempt {
                format!("/console/jobs/{job_id}/log?attempt={n}")
            } else {
                "#log".to_string()
            };
            out.push(Mark {
                at_ms: h.at_ms,
                kind: "log",
                label: format!("attempt {n}'s log begins"),
                href: Some(href),
            });
        }
    }
    out
}

/// One state's stretch of time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stretch {
    state: JobState,
    from_ms: i64,
    to_ms: i64,
}

/// The stretches of `history` (oldest first), the last one ending `now` unless the
/// job ended; and the moment the drawing ends.
fn stretches(history: &[HistoryEntry], now: i64) -> (Vec<Stretch>, i64) {
    let mut out = Vec::new();
    for (i, h) in history.iter().enumerate() {
        let to_ms = match history.get(i + 1) {
            Some(next) => next.at_ms,
            None if h.to.is_terminal() => h.at_ms,
            None => now.max(h.at_ms),
        };
        out.push(Stretch {
            state: h.to,
            from_ms: h.at_ms,
            to_ms,
        });
    }
    let end = out.last().map_or(now, |s| s.to_ms);
    (out, end)
}

/// What both drawings place: the stretches, and the moments the drawing starts and
/// ends (`None`: no history to draw).
struct Frame {
    stretches: Vec<Stretch>,
    start: i64,
    end: i64,
}

impl Frame {
    /// Where `at` falls along the drawing's width.
    fn x(&self, at: i64) -> f64 {
        along(
            (at - self.start) as f64,
            (self.end - self.start).max(1) as f64,
        )
    }
}

fn frame(history: &[HistoryEntry], now: i64) -> Option<Frame> {
    let (stretches, end) = stretches(history, now);
    let start = stretches.first()?.from_ms;
    Some(Frame {
        stretches,
        start,
        end,
    })
}

/// The large timeline of the job page.
pub fn full(history: &[HistoryEntry], marks: &[Mark], now: i64) -> Markup {
    let Some(f) = frame(history, now) else {
        return html! {};
    };
    let x = |at: i64| f.x(at);
    let (stretches, start, end) = (f.stretches.as_slice(), f.start, f.end);
    let last = stretches.last().map(|s| s.state);
    html! {
        figure.gantt data-states=(stretches.len()) data-span-ms=(end - start) {
            svg viewBox="0 0 1000 64" role="img"
                aria-label={ "The job's states over " (present::duration(end - start)) } {
                @for s in stretches {
                    @let w = (x(s.to_ms) - x(s.from_ms)).max(if s.state.is_terminal() { 0.0 } else { 1.0 });
                    @if w > 0.0 {
                        rect class={ "seg state-" (s.state.as_str()) } data-state=(s.state.as_str())
                            data-ms=(s.to_ms - s.from_ms)
                            x=(num(x(s.from_ms))) y="0" width=(num(w)) height="24" {
                            title { (s.state.as_str()) " for " (present::duration(s.to_ms - s.from_ms))
                                " (from " (present::exact(s.from_ms)) ")" }
                        }
                        @if w > 90.0 {
                            text x=(num(x(s.from_ms) + 4.0)) y="16" { (s.state.as_str()) }
                        }
                    }
                }
                @if let Some(state) = last.filter(|s| s.is_terminal()) {
                    line class={ "end state-" (state.as_str()) } x1="999" x2="999" y1="0" y2="28" {
                        title { "ended " (state.as_str()) " at " (present::exact(end)) }
                    }
                }
                @for m in marks.iter().filter(|m| m.at_ms >= start && m.at_ms <= end) {
                    @let at = x(m.at_ms);
                    @let mark = html! {
                        path class={ "mark " (m.kind) } data-kind=(m.kind)
                            d={ "M" (num(at)) " 28 l-5 9 h10 z" } {
                            title { (m.label) " (" (present::exact(m.at_ms)) ")" }
                        }
                    };
                    @match &m.href {
                        Some(href) => a href=(href) { (mark) },
                        None => (mark),
                    }
                }
                text.axis x="0" y="60" { (present::exact(start)) }
                text.axis x="1000" y="60" text-anchor="end" {
                    @if last.is_some_and(JobState::is_terminal) { (present::exact(end)) } @else { "now" }
                }
            }
            figcaption {
                @for s in stretches {
                    @if !s.state.is_terminal() {
                        span class={ "key state-" (s.state.as_str()) } {} (s.state.as_str()) " " (present::duration(s.to_ms - s.from_ms)) " · "
                    }
                }
                @if let Some(state) = last.filter(|s| s.is_terminal()) { "ended " (state.as_str()) }
                @else { "still " (last.map_or("", JobState::as_str)) }
            }
        }
    }
}

/// The same bars, small, for a row of the jobs list.
pub fn small(history: &[HistoryEntry], now: i64) -> Markup {
    let Some(f) = frame(history, now) else {
        return html! {};
    };
    let x = |at: i64| f.x(at);
    let (stretches, start, end) = (f.stretches.as_slice(), f.start, f.end);
    html! {
        svg.gantt-small viewBox="0 0 1000 10" preserveAspectRatio="none" role="img"
            aria-label={ "States over " (present::duration(end - start)) } {
            @for s in stretches.iter().filter(|s| !s.state.is_terminal()) {
                rect class={ "seg state-" (s.state.as_str()) } data-state=(s.state.as_str())
                    x=(num(x(s.from_ms))) y="0" width=(num((x(s.to_ms) - x(s.from_ms)).max(2.0))) height="10" {
                    title { (s.state.as_str()) " for " (present::duration(s.to_ms - s.from_ms)) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(to: JobState, at_ms: i64) -> HistoryEntry {
        HistoryEntry {
            from: None,
            to,
            reason: None,
            at_ms,
        }
    }

    #[test]
    fn each_state_lasts_until_the_next_and_a_live_job_until_now() {
        let history = [
            h(JobState::Queued, 0),
            h(JobState::Running, 1_000),
            h(JobState::Succeeded, 4_000),
        ];
        let (s, end) = stretches(&history, 9_000);
        assert_eq!(end, 4_000);
        assert_eq!(
            s.iter()
                .map(|s| (s.state, s.to_ms - s.from_ms))
                .collect::<Vec<_>>(),
            vec![
                (JobState::Queued, 1_000),
                (JobState::Running, 3_000),
                (JobState::Succeeded, 0)
            ]
        );
        let (s, end) = stretches(&history[..2], 9_000);
        assert_eq!((end, s[1].to_ms), (9_000, 9_000));
    }

    #[test]
    fn the_drawing_carries_each_states_time_and_the_marks() {
        let history = [
            h(JobState::Queued, 0),
            h(JobState::Running, 1_000),
            h(JobState::Succeeded, 4_000),
        ];
        let marks = [Mark {
            at_ms: 500,
            kind: "decision",
            href: None,
            label: "admit".into(),
        }];
        let html = full(&history, &marks, 9_000).into_string();
        assert!(
            html.contains(r#"data-state="running" data-ms="3000""#),
            "{html}"
        );
        assert!(html.contains(r#"data-kind="decision""#), "{html}");
        assert!(html.contains("ended succeeded"), "{html}");
        assert!(
            html.contains(r#"<span class="key state-running">"#),
            "{html}"
        );
        assert_eq!(full(&[], &marks, 9_000).into_string(), "");
    }

    #[test]
    fn each_attempt_marks_where_its_log_begins() {
        let h = |from: Option<JobState>, to: JobState, at_ms: i64| HistoryEntry {
            from,
            to,
            reason: None,
            at_ms,
        };
        use JobState::*;
        let history = [
            h(None, Queued, 0),
            h(Some(Queued), Dispatched, 10),
            h(Some(Dispatched), Running, 20),
            h(Some(Running), Preempting, 30),
            h(Some(Preempting), Queued, 40),
            h(Some(Queued), Dispatched, 50),
            h(Some(Dispatched), Initializing, 55),
            h(Some(Initializing), Running, 60),
        ];
        let marks = log_marks("j1", 1, &history);
        let got: Vec<(i64, Option<&str>)> =
            marks.iter().map(|m| (m.at_ms, m.href.as_deref())).collect();
        assert_eq!(
            got,
            [
                (20, Some("/console/jobs/j1/log?attempt=0")),
                (60, Some("#log"))
            ]
        );
        let html = full(&history, &marks, 70).into_string();
        assert!(
            html.contains(r#"<a href="/console/jobs/j1/log?attempt=0"><path class="mark log""#),
            "{html}"
        );
    }
}
