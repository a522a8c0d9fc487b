//! A series' last day as two small charts of one bar per hour: how long the jobs
//! dispatched in the hour had waited in the queue (p99 bar, p50 inside it), and the
//! share of the series' GPUs held (GPU-seconds over the series' GPUs now × the hour).

use maud::{Markup, html};

use super::num;
use crate::http::console::present;
use crate::jobs::last_day::{HOUR_MS, Hour};

const HEIGHT: f64 = 60.0;

/// The queue-wait chart.
pub fn waits(series: &str, hours: &[Hour]) -> Markup {
    let top = hours
        .iter()
        .filter_map(|h| h.wait_quantile_ms(0.99))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let width = 1000.0 / hours.len().max(1) as f64;
    let dispatched: usize = hours.iter().map(|h| h.waits_ms.len()).sum();
    html! {
        figure.day.waits data-series=(series) data-dispatched=(dispatched) {
            svg viewBox={ "0 0 1000 " (HEIGHT) } preserveAspectRatio="none" role="img"
                aria-label={ (series) ": queue wait per hour over the last day, " (dispatched) " jobs dispatched" } {
                @for (i, h) in hours.iter().enumerate() {
                    @if let (Some(p50), Some(p99)) = (h.wait_quantile_ms(0.5), h.wait_quantile_ms(0.99)) {
                        @let x = i as f64 * width;
                        @let h99 = (p99 as f64 / top * HEIGHT).max(1.0);
                        @let h50 = (p50 as f64 / top * HEIGHT).max(1.0);
                        g data-hour=(present::iso(h.start_ms)) data-p50-ms=(p50) data-p99-ms=(p99) {
                            title { (present::exact(h.start_ms)) ": " (present::count(h.waits_ms.len() as u64, "job"))
                                " dispatched, waited p50 " (present::duration(p50)) ", p99 " (present::duration(p99)) }
                            rect.p99 x=(num(x + 1.0)) y=(num(HEIGHT - h99)) width=(num(width - 2.0)) height=(num(h99)) {}
                            rect.p50 x=(num(x + 1.0)) y=(num(HEIGHT - h50)) width=(num(width - 2.0)) height=(num(h50)) {}
                        }
                    }
                }
            }
            figcaption { strong { (series) } " · queue wait per hour, last "
                (present::count(hours.len() as u64, "hour")) " · " span.key.p99 {} "p99 " span.key.p50 {} "p50 · top "
                (present::duration(top as i64)) " · " (present::count(dispatched as u64, "job")) " dispatched" }
        }
    }
}

/// The GPU-use chart; `gpus`: the series' GPUs now.
pub fn utilisation(series: &str, hours: &[Hour], gpus: u32, now_ms: i64) -> Markup {
    let width = 1000.0 / hours.len().max(1) as f64;
    let share = |h: &Hour| -> f64 {
        let span = ((now_ms - h.start_ms).clamp(0, HOUR_MS)) as f64 / 1000.0;
        if gpus == 0 || span <= 0.0 {
            0.0
        } else {
            (h.gpu_seconds / (f64::from(gpus) * span)).clamp(0.0, 1.0)
        }
    };
    let mean = if hours.is_empty() {
        0.0
    } else {
        hours.iter().map(share).sum::<f64>() / hours.len() as f64
    };
    html! {
        figure.day.use data-series=(series) data-mean-percent=(format!("{:.0}", mean * 100.0)) {
            svg viewBox={ "0 0 1000 " (HEIGHT) } preserveAspectRatio="none" role="img"
                aria-label={ (series) ": GPUs in use per hour over the last day, " (format!("{:.0}", mean * 100.0)) " % on average" } {
                rect.track x="0" y="0" width="1000" height=(HEIGHT) {}
                @for (i, h) in hours.iter().enumerate() {
                    @let u = share(h);
                    @if u > 0.0 {
                        rect.yours data-hour=(present::iso(h.start_ms)) data-percent=(format!("{:.0}", u * 100.0))
                            x=(num(i as f64 * width + 1.0)) y=(num(HEIGHT - u * HEIGHT)) width=(num(width - 2.0)) height=(num(u * HEIGHT)) {
                            title { (present::exact(h.start_ms)) ": " (format!("{:.0}", u * 100.0)) " % of " (gpus) " GPUs ("
                                (format!("{:.0}", h.gpu_seconds / 3600.0)) " GPU-hours)" }
                        }
                    }
                }
            }
            figcaption { strong { (series) } " · GPUs in use per hour against the " (present::count(gpus, "GPU"))
                " it has now · " (format!("{:.0}", mean * 100.0)) " % on average" }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_charts_carry_their_numbers() {
        let now = 48 * HOUR_MS;
        let mut hours: Vec<Hour> = (0..24)
            .map(|i| Hour {
                start_ms: now - (24 - i) * HOUR_MS,
                ..Hour::default()
            })
            .collect();
        hours[3].waits_ms = vec![1_000, 60_000];
        hours[3].gpu_seconds = 8.0 * 1800.0;
        let w = waits("h100", &hours).into_string();
        assert!(
            w.contains(r#"data-p50-ms="1000" data-p99-ms="60000""#),
            "{w}"
        );
        assert!(w.contains(r#"data-dispatched="2""#), "{w}");
        let u = utilisation("h100", &hours, 16, now).into_string();
        assert!(u.contains(r#"data-percent="25""#), "{u}");
        assert_eq!(u.matches("<rect").count(), 2, "{u}");
    }
}
