//! One GPU series as a stacked bar: in use by the viewer's team, in use by others,
//! reserved (dispatched jobs whose pods are not bound yet: free for the API, promised
//! for the dispatcher), free, and blocked (cordoned, NotReady or tainted nodes), with
//! the largest free block marked under the free part. Also a team's running and queued
//! GPUs against its fair share of the series.

use maud::{Markup, html};

use super::{Segment, along, num, stacked};
use crate::http::console::present;
use forge_policy_host::model::SeriesCapacity;

/// What the bar shows besides the capacity snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct Holders {
    /// GPUs the viewer's team runs on the series (the dispatcher's ledger).
    pub team_running: u32,
    /// GPUs every team's dispatched jobs hold there (the same ledger).
    pub all_running: u32,
}

/// The bar's parts, from the snapshot: their sum is the series' drawn total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub yours: u32,
    pub others: u32,
    pub reserved: u32,
    pub free: u32,
    pub blocked: u32,
}

impl Parts {
    /// Splits a series' capacity; `free + reserved` is the API's `free`.
    pub fn of(s: &SeriesCapacity, h: Holders) -> Parts {
        let yours = h.team_running.min(s.in_use);
        let reserved = h.all_running.saturating_sub(s.in_use).min(s.free);
        Parts {
            yours,
            others: s.in_use - yours,
            reserved,
            free: s.free - reserved,
            blocked: s.blocked.saturating_add(s.tainted),
        }
    }

    fn total(self) -> u32 {
        self.yours + self.others + self.reserved + self.free + self.blocked
    }
}

/// The series' bar with its legend.
pub fn series(s: &SeriesCapacity, h: Holders) -> Markup {
    let p = Parts::of(s, h);
    let total = f64::from(p.total().max(1));
    let segment = |class, label: String, value: u32| Segment {
        class,
        label,
        value: f64::from(value),
    };
    let segments = [
        segment(
            "yours",
            format!("{} GPUs in use by your team", p.yours),
            p.yours,
        ),
        segment(
            "others",
            format!("{} GPUs in use by other teams", p.others),
            p.others,
        ),
        segment(
            "reserved",
            format!("{} GPUs reserved for jobs being started", p.reserved),
            p.reserved,
        ),
        segment("free", format!("{} GPUs free", p.free), p.free),
        segment(
            "blocked",
            format!(
                "{} GPUs blocked (cordoned, not ready or tainted)",
                p.blocked
            ),
            p.blocked,
        ),
    ];
    // The largest free block, under the free part (it sits on one node, so it is at
    // most the free GPUs).
    let free_from = along(f64::from(p.yours + p.others + p.reserved), total);
    let block = along(f64::from(s.largest_free_block.min(s.free)), total);
    let label = format!(
        "{}: {} GPUs on {} nodes; {} in use ({} by your team), {} free ({} reserved), {} blocked; largest free block {}",
        s.series,
        s.total,
        s.nodes,
        s.in_use,
        p.yours,
        s.free,
        p.reserved,
        p.blocked,
        s.largest_free_block
    );
    html! {
        figure.bar data-series=(s.series) data-free=(s.free) data-in-use=(s.in_use)
            data-blocked=(p.blocked) data-total=(s.total) data-largest=(s.largest_free_block) {
            svg viewBox="0 0 1000 40" preserveAspectRatio="none" role="img" aria-label=(label) {
                g { (stacked(&segments, total, 28)) }
                @if block > 0.0 {
                    line.largest x1=(num(free_from)) x2=(num(free_from + block)) y1="34" y2="34" {
                        title { "Largest free block: " (s.largest_free_block) " GPUs on one node" }
                    }
                }
            }
            figcaption {
                strong { (s.series) } " · " (present::count(s.total, "GPU")) " on " (present::count(s.nodes, "node")) " · "
                span.key.yours {} "yours " (p.yours) " · "
                span.key.others {} "others " (p.others) " · "
                span.key.reserved {} "reserved " (p.reserved) " · "
                span.key.free {} "free " span.free-gpus { (s.free) } " · "
                span.key.blocked {} "blocked " (p.blocked) " · "
                "largest free block " (s.largest_free_block)
            }
        }
    }
}

/// A team's running and queued GPUs on a series against its fair share, on the
/// series' scale.
pub fn team_use(
    series: &str,
    total: u32,
    (running, queued): (u32, u32),
    fair_share: f64,
    quota: Option<u32>,
) -> Markup {
    // A quota past the series' GPUs is drawn at its end.
    let scale = f64::from(total.max(running + queued).max(1));
    let segments = [
        Segment {
            class: "yours",
            label: format!("{running} GPUs running"),
            value: f64::from(running),
        },
        Segment {
            class: "queued",
            label: format!("{queued} GPUs queued"),
            value: f64::from(queued),
        },
    ];
    let mark = along(fair_share, scale);
    html! {
        figure.bar.team data-series=(series) data-running=(running) data-queued=(queued) data-quota=[quota] {
            svg viewBox="0 0 1000 34" preserveAspectRatio="none" role="img"
                aria-label={ (series) ": your team runs " (running) " GPUs and queues " (queued) "; its fair share is " (format!("{fair_share:.1}")) } {
                rect.track x="0" y="0" width="1000" height="28" {}
                g { (stacked(&segments, scale, 28)) }
                line.fair x1=(num(mark)) x2=(num(mark)) y1="0" y2="34" {
                    title { "Fair share: " (format!("{fair_share:.1}")) " GPUs" }
                }
                @if let Some(q) = quota {
                    @let at = along(f64::from(q).min(scale), scale);
                    line.quota x1=(num(at)) x2=(num(at)) y1="0" y2="34" {
                        title { "Quota: " (q) " GPUs (the team-quota policy)" }
                    }
                }
            }
            figcaption {
                strong { (series) } " · running " (running) " · queued " (queued)
                " · fair share " (format!("{fair_share:.1}"))
                @if let Some(q) = quota { " · quota " (q) }
                " of " (total) " GPUs"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(in_use: u32, free: u32, blocked: u32, tainted: u32) -> SeriesCapacity {
        SeriesCapacity {
            series: "h100".into(),
            total: in_use + free + blocked + tainted,
            allocatable: in_use + free,
            in_use,
            free,
            blocked,
            tainted,
            largest_free_block: free.min(8),
            nodes: 4,
            ..SeriesCapacity::default()
        }
    }

    #[test]
    fn parts_add_up_and_keep_the_apis_free() {
        let s = series(12, 12, 8, 0);
        let p = Parts::of(
            &s,
            Holders {
                team_running: 8,
                all_running: 16,
            },
        );
        assert_eq!(
            p,
            Parts {
                yours: 8,
                others: 4,
                reserved: 4,
                free: 8,
                blocked: 8
            }
        );
        assert_eq!(p.free + p.reserved, s.free);
        assert_eq!(p.total(), s.total);
    }

    #[test]
    fn a_ledger_behind_the_pods_never_draws_more_than_is_there() {
        // The ledger says 2 GPUs, the pods hold 6: the team's part is its 2, no reserve.
        let s = series(6, 2, 0, 4);
        let p = Parts::of(
            &s,
            Holders {
                team_running: 2,
                all_running: 2,
            },
        );
        assert_eq!(
            p,
            Parts {
                yours: 2,
                others: 4,
                reserved: 0,
                free: 2,
                blocked: 4
            }
        );
        // The ledger ahead of the pods by more than is free: reserved is what is free.
        let p = Parts::of(
            &s,
            Holders {
                team_running: 20,
                all_running: 20,
            },
        );
        assert_eq!((p.yours, p.reserved, p.free), (6, 2, 0));
    }

    #[test]
    fn the_bar_carries_the_apis_numbers() {
        let html = super::series(
            &series(8, 8, 0, 0),
            Holders {
                team_running: 8,
                all_running: 8,
            },
        )
        .into_string();
        assert!(html.contains(r#"data-free="8""#), "{html}");
        assert!(
            html.contains(r#"<span class="free-gpus">8</span>"#),
            "{html}"
        );
        assert!(html.contains("Largest free block: 8 GPUs"), "{html}");
    }

    #[test]
    fn the_teams_use_is_drawn_against_its_quota_when_one_is_stated() {
        let html = team_use("h100", 16, (8, 16), 8.0, Some(16)).into_string();
        assert!(html.contains(r#"data-quota="16""#), "{html}");
        assert!(html.contains("Quota: 16 GPUs"), "{html}");
        assert!(html.contains(" · quota 16"), "{html}");
        let none = team_use("h100", 16, (8, 0), 8.0, None).into_string();
        assert!(
            !none.contains("data-quota") && !none.contains("line class=\"quota\""),
            "{none}"
        );
    }
}
